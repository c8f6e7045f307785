"""The daemons' small helpers on their own: ending survivors, port reservations under the shared file lock,
and the watchdog's final record."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from hermes_rl.core.base.fsutil import atomic_write_json, read_jsonl
from hermes_rl.core.base.paths import rl_dir, run_dir
from hermes_rl.core.base.states import ProcState, RunStatus
from hermes_rl.core.daemons import pipeline, procscan, watchdog

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); time.sleep(60)"
)


def _survivor(popen: subprocess.Popen) -> procscan.Survivor:
    return procscan.Survivor(pid=popen.pid, pgid=None, name="", cmdline="", create_time=None)


def test_terminate_ends_the_willing_at_once_and_kills_the_rest_after_the_timeout():
    willing = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout.readline().strip() == b"ok"
        began = time.monotonic()
        result = procscan.terminate([_survivor(willing)], timeout=5.0)
        assert result == {"terminated": 1, "killed": 0} and time.monotonic() - began < 3.0
        began = time.monotonic()
        result = procscan.terminate([_survivor(stubborn)], timeout=0.5)
        assert result == {"terminated": 0, "killed": 1} and time.monotonic() - began >= 0.5
        assert stubborn.wait(5) == -9
    finally:
        for child in (willing, stubborn):
            child.kill()
            child.wait()


def test_free_ports_are_distinct_and_reserved_across_calls(hermes_home):
    first = pipeline.free_ports(["api", "inference"])
    assert len(set(first.values())) == 2
    reserved = json.loads((rl_dir() / ".ports.json").read_text())
    assert set(reserved) == {str(p) for p in first.values()}
    second = pipeline.free_ports(["api"])
    assert second["api"] not in first.values()
    assert (rl_dir() / ".ports.json.lock").exists()  # fsutil.file_lock's sidecar: one lock implementation


def test_free_ports_survive_an_unreadable_reservation_file(hermes_home):
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / ".ports.json").write_text("[not json")
    assert pipeline.free_ports(["api"])["api"] > 0


def test_watchdog_records_the_run_failed_with_its_processes_stopped(hermes_home):
    run_id = "0123abcd"
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    atomic_write_json(
        folder / "run.json",
        {
            "run_id": run_id,
            "status": RunStatus.RUNNING,
            "created_at": time.time(),
            "processes": [{"name": "a", "state": ProcState.READY}, {"name": "b", "state": ProcState.EXITED}],
        },
    )
    watchdog.clean_up(run_id, 4242, [])
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "failed" and run["reason"] == "supervisor died (pid 4242)"
    assert [p["state"] for p in run["processes"]] == ["stopped", "exited"]
    [event] = read_jsonl(folder / "events.jsonl")
    assert event["event"] == "run_status" and event["status"] == "failed"
    assert event["message"].startswith("run failed: supervisor died (pid 4242); watchdog ended 0 leftover")
    # A final run is left as it is.
    watchdog.clean_up(run_id, 4242, [])
    assert len(read_jsonl(folder / "events.jsonl")) == 1
