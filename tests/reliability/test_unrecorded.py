"""A live run whose run.json is corrupt or deleted is still stoppable (its supervisor is found by its
marker and writes the record again), and a run whose folder is deleted stops itself."""

from __future__ import annotations

import json
import shutil

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
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


def test_a_run_whose_folder_is_deleted_stops_itself():
    run = wait_running(launch_standin()["run_id"])
    shutil.rmtree(run_dir(run["run_id"]))
    record = wait_for(lambda: (run_dir(run["run_id"]) / "run.json").exists() and runs.get_run(run["run_id"]), 20)
    final = wait_for(lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] == "stopped" and r, 20)
    assert record and final and "folder was deleted" in final["reason"], final
    assert_no_orphans(run)
