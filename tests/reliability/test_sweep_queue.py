"""Sweep queues recover and never run a member twice: a member is reserved (`starting`) before its run
starts; a run whose run.json names its member is adopted when recording it in sweep.json failed; a
reservation whose process died with no run goes back to the queue; a folder a killed start left with no
run.json is removed; and a client that lists runs advances a queue whose creating command was killed."""

from __future__ import annotations

import json
import os
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import atomic_write_json
from hermes_rl.core.base.paths import run_dir, runs_dir, sweep_queue_flag, sweeps_dir
from hermes_rl.core.runs import sweeps
from tests.fixtures_tui import write_run

pytestmark = [pytest.mark.reliability]

SWEEP = "5e5e5e5e"


def _sweep(members: list[dict]) -> None:
    atomic_write_json(
        sweeps_dir() / SWEEP / "sweep.json",
        {
            "sweep_id": SWEEP,
            "created_at": time.time(),
            "environment": "toy_addition",
            "profile": "local",
            "backend": "local",
            "grid": {"learning_rate": ["1e-4"]},
            "seeds": None,
            "members": members,
        },
    )


def _member(index: int, state: str = "queued", **extra) -> dict:
    return {
        "index": index,
        "config_index": 0,
        "config": {"learning_rate": "1e-4"},
        "seed": None,
        "state": state,
        "run_id": None,
        "error": None,
        "started_at": None,
        **extra,
    }


def _run_naming_member(run_id: str, index: int) -> None:
    write_run(run_id, status="completed", steps=1, total_steps=1)
    record = json.loads((run_dir(run_id) / "run.json").read_text())
    record["sweep"] = {"id": SWEEP, "index": index, "config": {"learning_rate": "1e-4"}, "seed": None}
    (run_dir(run_id) / "run.json").write_text(json.dumps(record))


def test_a_run_that_names_its_member_is_adopted_never_started_again(hermes_home, monkeypatch):
    # the run started, but sweep.json still says queued (its write failed, or its creator was killed)
    _run_naming_member("aaaa0001", 0)
    _sweep([_member(0)])
    monkeypatch.setattr(sweeps, "_start_member", lambda *a: pytest.fail("a member with a run was started again"))
    assert sweeps.start_queued() == []
    member = sweeps.read_sweep(SWEEP)["members"][0]
    assert member["state"] == "started" and member["run_id"] == "aaaa0001"


def test_a_reservation_whose_process_died_goes_back_to_the_queue(hermes_home, monkeypatch):
    dead = 2**22 + 12345  # no such pid
    _sweep([_member(0, "starting", reserved_by=dead, reserved_at=time.time() - 5)])
    started = []
    monkeypatch.setattr(
        sweeps, "_start_member", lambda sweep, member: started.append(member["index"]) or {"run_id": "bbbb0001"}
    )
    assert sweeps.start_queued() == ["bbbb0001"]
    assert started == [0]
    assert sweeps.read_sweep(SWEEP)["members"][0]["state"] == "started"


def test_a_live_reservation_is_left_alone(hermes_home, monkeypatch):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _sweep([_member(0, "starting", reserved_by=holder.pid, reserved_at=time.time())])
        monkeypatch.setattr(sweeps, "_start_member", lambda *a: pytest.fail("a reserved member was started twice"))
        assert sweeps.start_queued() == []
        assert sweeps.read_sweep(SWEEP)["members"][0]["state"] == "starting"
    finally:
        holder.kill()
        holder.wait()


def test_the_member_is_reserved_before_its_run_starts(hermes_home, monkeypatch):
    _sweep([_member(0)])
    seen = []

    def start(sweep, member):
        seen.append(sweeps.read_sweep(SWEEP)["members"][0]["state"])  # what is on disk while it starts
        return {"run_id": "cccc0001"}

    monkeypatch.setattr(sweeps, "_start_member", start)
    sweeps.start_queued()
    assert seen == ["starting"]


def test_a_half_prepared_run_folder_is_removed_once_old(hermes_home):
    runs_dir().mkdir(parents=True, exist_ok=True)
    old, fresh = runs_dir() / "dddd0001", runs_dir() / "dddd0002"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "config.yaml").write_text("env: {}\n")
    past = time.time() - sweeps.ABANDONED_FOLDER_S - 60
    os.utime(old / "config.yaml", (past, past))
    os.utime(old, (past, past))
    assert sweeps.remove_abandoned_run_folders() == ["dddd0001"]
    assert not old.exists() and fresh.exists()


def test_listing_runs_advances_a_queue_whose_creator_was_killed(hermes_home):
    from tests.fixtures_core import wait_until

    _sweep([_member(0)])
    (sweeps_dir() / SWEEP / "sweep.json").write_text(
        (sweeps_dir() / SWEEP / "sweep.json").read_text().replace("toy_addition", "no_such_environment")
    )
    sweep_queue_flag().touch()  # what create_sweep leaves when it is killed before starting any member
    runs.list_runs()
    wait_until(lambda: sweeps.read_sweep(SWEEP)["members"][0]["state"] == "failed", timeout=60, what="queue ran")


def _starting_run(run_id: str, index: int | None = None) -> None:
    """A local run just recorded (`starting`, its supervisor not registered yet): it holds a place."""
    write_run(run_id, status="starting", created_at=time.time(), supervisor={"pid": None})
    if index is not None:
        record = json.loads((run_dir(run_id) / "run.json").read_text())
        record["sweep"] = {"id": SWEEP, "index": index, "config": {"learning_rate": "1e-4"}, "seed": None}
        (run_dir(run_id) / "run.json").write_text(json.dumps(record))


def test_a_reservation_holds_its_place_under_forced_interleaving(hermes_home, monkeypatch):
    """Under a limit of one: between the queue reserving a member and its run being recorded, another
    start (any path) is refused; once recorded, the next member is not reserved while it is active."""
    from hermes_rl.core.base.errors import Conflict
    from hermes_rl.core.runs import start

    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    _sweep([_member(0), _member(1)])
    starts = []

    def start_member(sweep, member):
        starts.append(member["index"])
        # forced: another start takes its turn while this member is reserved and its run not recorded
        with pytest.raises(Conflict, match=f"sweep {SWEEP} member 0"):
            start.check_local_capacity()
        start.check_local_capacity((SWEEP, 0))  # the member's own start is not refused by its reservation
        _starting_run("eeee0001", member["index"])
        return {"run_id": "eeee0001"}

    monkeypatch.setattr(sweeps, "_start_member", start_member)
    assert sweeps.start_queued() == ["eeee0001"]
    assert starts == [0]
    members = sweeps.read_sweep(SWEEP)["members"]
    assert [m["state"] for m in members] == ["started", "queued"]


def test_a_member_without_a_place_is_never_shown_starting(hermes_home, monkeypatch):
    from hermes_rl.core.base.errors import Conflict

    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    _starting_run("eeee0002")  # another local run holds the one place
    _sweep([_member(0)])
    written = []
    real_write = sweeps._write
    monkeypatch.setattr(
        sweeps, "_write", lambda sweep: written.append(sweep["members"][0]["state"]) or real_write(sweep)
    )
    monkeypatch.setattr(sweeps, "_start_member", lambda *a: (_ for _ in ()).throw(Conflict("limit")))
    assert sweeps.start_queued() == []
    assert "starting" not in written  # a sweep's status would count it active: two at once under a limit of one
    assert sweeps.read_sweep(SWEEP)["members"][0]["state"] == "queued"
