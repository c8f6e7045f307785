"""Recorded process identities are not trusted: a crafted lost run whose pids and pgids now belong to
real, unrelated processes (what a reboot or a container restart produces) never gets them signalled,
listed as survivors or taken for its supervisor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import toolset
from hermes_rl.core.daemons import procscan

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60)]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    cli = [sys.executable, "-m", "hermes_rl.core.clients.cli"]
    return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())


@pytest.fixture
def strangers():
    """Three real processes that are not ours: own sessions, no run marker, started after the run."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        for _ in range(3)
    ]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _ids(proc: subprocess.Popen, *, ticks: bool = True, created: bool = True) -> dict:
    ids = {"pid": proc.pid}
    if ticks:
        ids["start_ticks"] = procscan.process_start_ticks(proc.pid)
    if created:
        ids["create_time"] = procscan.process_create_time(proc.pid)
    return ids


def _crafted_run(run_id: str, supervisor: dict, processes: list[dict]) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    record = {
        "run_id": run_id,
        "environment": "toy",
        "profile": "local",
        "status": "running",
        "created_at": time.time() - 3600,  # yesterday's run, before the "reboot"
        "started_at": time.time() - 3600,
        "supervisor": supervisor,
        "processes": processes,
    }
    (folder / "run.json").write_text(json.dumps(record))


# (supervisor identity, process identity) as a crafted run.json records them
CASES = {
    "supervisor pid only": ({"ticks": False, "created": False}, {"ticks": False, "created": False}),
    "full start time, no marker": ({}, {}),
    "create_time only": ({"ticks": False}, {"ticks": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_lost_runs_recorded_pids_belonging_to_others_are_never_signalled(case, strangers):
    sup_ids, proc_ids = CASES[case]
    sup, trainer, env = strangers
    run_id = "feedc0de"
    _crafted_run(
        run_id,
        _ids(sup, **sup_ids),
        [
            {"name": "trainer", "state": "running", "pgid": trainer.pid, "log": None, **_ids(trainer, **proc_ids)},
            {"name": "env", "state": "ready", "pgid": env.pid, "log": None, **_ids(env, **proc_ids)},
        ],
    )
    view = runs.get_run(run_id, sample=False)
    assert view["status"] == "lost", view
    assert view["survivors"] == [] and not any(p["alive"] for p in view["processes"])
    status = toolset.rl_check_status(run_id, min_interval_s=0)
    assert status.get("status") == "lost" and not status.get("survivors"), status
    assert next(r for r in runs.list_runs() if r["run_id"] == run_id)["status"] == "lost"

    out = run_cli("stop", run_id)
    assert out.returncode == 0, out.stdout + out.stderr
    time.sleep(0.3)
    assert [p.poll() for p in strangers] == [None, None, None], "an unrelated process was signalled"
    after = runs.get_run(run_id, sample=False)
    assert after["status"] == "stopped" and "0 surviving" in runs.run_events(run_id)[-1]["message"]


def test_restart_of_a_crafted_run_does_not_signal_its_recorded_supervisor(strangers):
    sup = strangers[0]
    _crafted_run("c0ffee00", {"pid": sup.pid}, [{"name": "trainer", "state": "running", "pid": sup.pid, "log": None}])
    with pytest.raises(HermesError):  # refused: its supervisor is not ours to signal
        runs.restart_process("c0ffee00", "trainer", wait=0.5)
    time.sleep(0.3)
    assert sup.poll() is None
