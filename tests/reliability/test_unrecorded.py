"""A live run whose run.json is corrupt or deleted is still stoppable (its supervisor is found by its
marker and writes the record again), and a run whose folder is deleted stops itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.daemons.run_record import read_run_file
from tests.reliability.helpers import assert_no_orphans, launch_standin, wait_for, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120), pytest.mark.usefixtures("run_processes_cleanup")]


@pytest.mark.parametrize("damage", ["garbage", "wrong types", "deleted"])
def test_a_live_run_with_a_damaged_run_json_is_stopped(damage):
    run = wait_running(launch_standin()["run_id"])
    path = run_dir(run["run_id"]) / "run.json"
    if damage == "garbage":
        path.write_text("{not json")
    elif damage == "wrong types":
        path.write_text(json.dumps({"status": ["running"], "processes": 5, "supervisor": "abc"}))
    else:
        path.unlink()
    stopped = runs.stop_run(run["run_id"], wait=20)
    assert stopped["status"] == "stopped", stopped
    assert_no_orphans(run)


def _remove_while_written(folder) -> None:
    """`rm -rf` of a folder its live run is writing into: a file written between the listing and the
    last rmdir leaves it "not empty", and the user runs it again."""
    for _ in range(10):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            continue
    raise AssertionError(f"could not delete {folder}")


def test_a_run_whose_folder_is_deleted_stops_itself():
    run = wait_running(launch_standin()["run_id"])
    _remove_while_written(run_dir(run["run_id"]))
    record = wait_for(lambda: (run_dir(run["run_id"]) / "run.json").exists() and runs.get_run(run["run_id"]), 20)
    final = wait_for(lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] == "stopped" and r, 20)
    assert record and final and "folder was deleted" in final["reason"], final
    assert_no_orphans(run)


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_live_run_writes_its_damaged_run_json_again_within_seconds(damage):
    """Nothing happens in a steady run (no transition would rewrite run.json for hours): its supervisor
    notices the file is gone or not its own and writes it again, so `runs`, `status` and `stop` see it."""
    run = wait_running(launch_standin()["run_id"])
    path = run_dir(run["run_id"]) / "run.json"
    if damage == "deleted":
        path.unlink()
    else:
        path.write_text("{not json")
    damaged_at = time.monotonic()
    back = wait_for(lambda: (r := read_run_file(path.parent)) and r.get("status") == "running" and r, 10)
    took = time.monotonic() - damaged_at
    assert back, f"run.json not written again within 10 s: {path.read_text() if path.exists() else 'missing'}"
    assert took < 3.0, f"run.json came back after {took:.1f}s"
    assert runs.get_run(run["run_id"], sample=False)["status"] == "running"
    assert any(e.get("event") == "state" and "written again" in e["message"] for e in runs.run_events(run["run_id"]))
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "stop", run["run_id"]]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 0 and "stopped" in out.stdout, out.stdout + out.stderr
    assert runs.get_run(run["run_id"], sample=False)["status"] == "stopped"
    assert_no_orphans(run)
