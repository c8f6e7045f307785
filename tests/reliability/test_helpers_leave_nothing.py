"""Helpers leave nothing behind: a helper program hermes-rl runs (the desktop notifier, the cloud usage
check) runs in a session of its own, with a deadline, and once it is done or out of time its whole
session is ended, and every process still carrying its one-off marker: a notifier that forks a child
leaves no process marked as the run's after the run ended. And every helper goes that way: a scan of
the sources finds each `subprocess.run`, `subprocess.call` and `check_output` outside spawn.py."""

from __future__ import annotations

import ast
import os
import stat
import time
from pathlib import Path

import psutil
import pytest

from hermes_rl.core.daemons import alerts

pytestmark = [pytest.mark.reliability]

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("linger", ["exits", "hangs"])
def test_a_notifier_that_forks_leaves_no_process(tmp_path, monkeypatch, linger):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    tail = "exit 0" if linger == "exits" else "exec sleep 60"
    script = bin_dir / "notify-send"
    # a notifier that forks a child (stdio detached, so the caller does not wait for its pipes)
    script.write_text(f'#!/bin/sh\nsleep 60 </dev/null >/dev/null 2>&1 &\necho $! > "{pids}"\n{tail}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(alerts, "NOTIFY_SEND_TIMEOUT_S", 1.5)
    started = time.monotonic()
    outcome = alerts.notify_desktop("run failed", "details", urgent=True)
    assert time.monotonic() - started < 5
    assert ("delivered" if linger == "exits" else "did not end") in outcome, outcome
    child = int(pids.read_text())
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"the notifier's child {child} was left running"


SPAWNERS = {"run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
# (file, function) -> why it may run a program without spawn.run_bounded / spawn_group
ALLOWED = {
    ("core/daemons/launchers/slurm.py", "slurm_call"): "Slurm's client commands (squeue, scancel): they fork nothing",
    ("core/daemons/launchers/slurm.py", "SlurmTracker.submit"): "sbatch: it forks nothing; a timeout is a submission "
    "of unknown outcome, looked up by name",
    ("core/daemons/launchers/slurm.py", "SlurmTracker.find_submitted"): "squeue",
    ("core/daemons/launchers/skypilot.py", "down_clusters"): "SkyPilot's teardown (the driver's `down`): it "
    "forks nothing that outlives it, and a session kill could cut a cloud call short",
}


def _spawns(source: str) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                if ast.unparse(child.func.value) == "subprocess" and child.func.attr in SPAWNERS:
                    found.append((".".join(scope), child.lineno))
            visit(child, scope)

    visit(ast.parse(source), [])
    return found


def test_every_helper_runs_through_spawn():
    offending, seen = [], set()
    for top in ("core", "dataplane", "tui", "environments"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            text = path.read_text(encoding="utf-8")
            if "subprocess" not in text:  # parsed only where it can be (the scan stays cheap)
                continue
            for scope, line in _spawns(text):
                if (rel, scope) in ALLOWED:
                    seen.add((rel, scope))
                else:
                    offending.append(f"{rel}:{line} {scope}")
    assert not offending, (
        "run helpers through core.daemons.spawn.run_bounded (own session, ended whole):\n" + "\n".join(offending)
    )
    assert seen == set(ALLOWED), f"stale ALLOWED entries: {sorted(set(ALLOWED) - seen)}"
