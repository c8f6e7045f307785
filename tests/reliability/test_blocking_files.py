"""Nothing blocks forever on a file: a FIFO in place of run.json, the metrics, the rollouts, a run's
config, the selection, a draft, .env or the port file (what a crafted folder, or a dead mount, can
leave) never hangs a client. Every state reader opens regular files only, checked on the open
descriptor without blocking (O_NONBLOCK, then fstat), and reports anything else as unreadable with
the reason; the dashboard still opens and quits. Each client runs as its own process under a deadline:
a hang is a timeout here, not a stuck test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from hermes_rl.core.base.paths import current_selection_file, drafts_dir, rl_dir, run_dir
from tests.fixtures_tui import write_run

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]

RUN_ID = "f1f0f1f0"
# A client that has not answered by then is stuck on the FIFO: most answer in ~2 s; those that probe an
# environment's config (config, start) take up to ~40 s on a busy machine the first time.
DEADLINE_S = 120


def fifo(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        path.unlink()
    os.mkfifo(path, 0o600)


def run_client(*argv: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=DEADLINE_S, env=os.environ.copy(), stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(argv[2:])} hung on a FIFO for {DEADLINE_S}s: {exc.stdout!r} {exc.stderr!r}")


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_client(sys.executable, "-m", "hermes_rl.core.clients.cli", *args)


def tool(name: str, **args) -> dict:
    code = (
        "import json, sys; from hermes_rl.core.clients import toolset; "
        "print(json.dumps(toolset.call_tool(sys.argv[1], json.loads(sys.argv[2]))))"
    )
    out = run_client(sys.executable, "-c", code, name, json.dumps(args))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fifo_run_json_is_listed_unreadable_with_the_reason(hermes_home):
    write_run("600d600d", steps=3)
    fifo(run_dir(RUN_ID) / "run.json")
    listed = cli("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    by_id = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert by_id["600d600d"]["status"] == "completed"  # the others are still listed
    assert by_id[RUN_ID]["status"] == "unreadable" and "FIFO" in by_id[RUN_ID]["reason"], by_id[RUN_ID]
    status = cli("status", RUN_ID)
    assert status.returncode == 1 and "FIFO" in status.stderr, status.stderr
    answer = tool("rl_check_status", run_id=RUN_ID, min_interval_s=0)
    assert "error" in answer and "FIFO" in answer["error"], answer
    assert "FIFO" in json.dumps(tool("rl_list_runs")), "rl_list_runs names the unreadable run.json"


@pytest.mark.parametrize("name", ["metrics.jsonl", "env_metrics.jsonl", "rollouts.jsonl", "config.yaml"])
def test_fifo_in_a_run_folder_never_hangs_a_reader(hermes_home, name):
    write_run(RUN_ID, steps=3)
    fifo(run_dir(RUN_ID) / name)
    for args in (("runs",), ("status", RUN_ID), ("results", RUN_ID), ("rollouts", RUN_ID), ("compare", RUN_ID)):
        out = cli(*args)
        assert "Traceback" not in out.stderr, (args, out.stderr)
    for name_, args in (("rl_get_results", {"run_id": RUN_ID}), ("rl_check_status", {"run_id": RUN_ID})):
        assert isinstance(tool(name_, **args), dict)


def test_fifo_selection_draft_env_file_and_port_file(hermes_home):
    from hermes_rl.core.envs.profiles import resolve_profile

    env_name = resolve_profile("local")[0].default_environment
    fifo(current_selection_file())
    shown = cli("config", "--json")
    assert shown.returncode == 0, shown.stderr
    assert any("FIFO" in w for w in json.loads(shown.stdout)["warnings"]), shown.stdout  # defaults, with the reason

    current_selection_file().unlink()
    fifo(drafts_dir() / f"{env_name}.yaml")
    runs_before = set(os.listdir(rl_dir() / "runs")) if (rl_dir() / "runs").exists() else set()
    started = cli("start")
    assert started.returncode != 0 and "FIFO" in started.stderr, started.stderr
    runs_after = set(os.listdir(rl_dir() / "runs")) if (rl_dir() / "runs").exists() else set()
    assert runs_after == runs_before, "a refused start leaves no run folder"

    fifo(hermes_home / ".env")
    listed = cli("envs")
    assert listed.returncode == 0, listed.stderr

    fifo(rl_dir() / ".ports.json")
    code = "from hermes_rl.core.daemons.pipeline import free_ports; print(sorted(free_ports(['a', 'b']).values()))"
    ports = run_client(sys.executable, "-c", code)
    assert ports.returncode == 0, ports.stderr


def test_dashboard_opens_over_fifos_and_quits(hermes_home):
    write_run("600d600d", steps=3)
    fifo(run_dir(RUN_ID) / "run.json")
    fifo(run_dir("600d600d") / "metrics.jsonl")
    fifo(current_selection_file())
    fifo(hermes_home / ".env")
    script = textwrap.dedent("""\
        import asyncio
        from hermes_rl.tui.app import HermesDashboard

        async def main():
            app = HermesDashboard()
            async with app.run_test(size=(140, 50)) as pilot:
                await pilot.pause(2.0)
                await pilot.press("q")
            print("quit")

        asyncio.run(main())
    """)
    started = time.monotonic()
    out = run_client(sys.executable, "-c", script)
    assert out.returncode == 0 and "quit" in out.stdout, out.stderr[-2000:]
    assert time.monotonic() - started < DEADLINE_S
