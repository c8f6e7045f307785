"""Recorded times are not trusted (a clock stepped back, a folder copied from another machine, a
hand-edited file): a time in the future is an unknown age, never a long one, nor a long wait. A
`starting` run created "in an hour" is shown as such and stoppable at once, holds no local-run slot,
and a future metric time neither hides a stall nor becomes the run's last activity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import toolset
from tests.fixtures_tui import write_run
from tests.reliability.helpers import assert_no_orphans, launch_standin, proc_record, wait_for, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]

AN_HOUR = 3600.0


def _future_starting_run(run_id: str) -> None:
    write_run(run_id, status="starting", created_at=time.time() + AN_HOUR, processes=[], supervisor={"pid": None})


def test_a_run_created_in_the_future_is_shown_so_and_stops_at_once(hermes_home, monkeypatch):
    _future_starting_run("f0f0f0f0")
    listed = {r["run_id"]: r for r in runs.list_runs()}["f0f0f0f0"]
    assert listed["status"] == "lost" and "future" in listed["reason"], listed
    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    from hermes_rl.core.runs.start import active_local_runs

    assert active_local_runs() == []  # it holds no local-run slot

    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "stop", "f0f0f0f0", "--json"]
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "stopped"
    assert took < 15, f"stop took {took:.1f}s"

    _future_starting_run("f1f1f1f1")
    started = time.monotonic()
    answer = toolset.rl_stop_training("f1f1f1f1")
    assert "error" not in answer and time.monotonic() - started < 15, answer
    assert runs.get_run("f1f1f1f1", sample=False)["status"] == "stopped"


def test_a_future_metric_time_hides_no_stall(hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_RL_STALL_S", "2")
    run = launch_standin()
    run_id = run["run_id"]
    trainer_pid = None
    try:
        running = wait_running(run_id)
        trainer_pid = proc_record(running, "trainer")["pid"]
        os.kill(trainer_pid, signal.SIGSTOP)
        future = time.time() + 2 * AN_HOUR
        with open(run_dir(run_id) / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps({"step": 10_000, "time": future}) + "\n")
        report = wait_for(lambda: (r := runs.get_run(run_id, sample=False))["stalled"] and r, 15)
        assert report, runs.get_run(run_id, sample=False)
        assert report["last_activity_at"] < time.time() + 5, "a future time is not the run's last activity"
        assert 2 <= report["stalled_for_s"] < 60, report["stalled_for_s"]
    finally:
        if trainer_pid:
            os.kill(trainer_pid, signal.SIGCONT)
        runs.stop_run(run_id, force=True)
        assert_no_orphans(runs.get_run(run_id, sample=False))
