"""Concurrency: several runs at once (distinct ports, no cross-talk), a 50-process storm of draft edits
and run-state reads (every file parses afterwards), and two clients acting on one run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import PROJECT_ROOT
from hermes_rl.core.clients import toolset
from tests.reliability.helpers import (
    RPROCS,
    assert_no_orphans,
    assert_state_parses,
    client_env,
    kill_tree,
    launch_standin,
    proc_record,
    record,
    start_watcher,
    wait_for,
    wait_running,
)

pytestmark = [pytest.mark.reliability, pytest.mark.usefixtures("run_processes_cleanup")]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("count", [2, 5])
def test_runs_at_once_have_distinct_ports_and_no_cross_talk(count, monkeypatch):
    from hermes_rl.core.runs.start import MAX_LOCAL_RUNS_ENV

    monkeypatch.setenv(MAX_LOCAL_RUNS_ENV, str(count))  # stand-in runs count as local runs
    launched, errors = [], []

    def one():
        try:
            launched.append(launch_standin(step_s=0.2))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]  # launched concurrently, not in turn
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(launched) == count, errors
    views = [wait_running(run["run_id"], timeout=60) for run in launched]
    ports = [v["ports"]["api"] for v in views]
    assert len(set(ports)) == count, ports
    assert len({v["run_id"] for v in views}) == count
    for view in views:
        run_id, port = view["run_id"], view["ports"]["api"]
        assert wait_for(
            lambda run_id=run_id: (runs.get_run(run_id, sample=False)["last_metric"].get("step") or 0) >= 2, 30
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            assert answer.status == 200
        trainer_log = open(view["logs"]["trainer"], encoding="utf-8").read()
        env_log = open(view["logs"]["env"], encoding="utf-8").read()
        assert f"run={run_id} port={port}" in trainer_log and f"env up {run_id}" in env_log
        others = [v for v in views if v is not view]
        for other in others:  # nothing of another run in this run's logs
            assert other["run_id"] not in trainer_log + env_log
            assert f"port={other['ports']['api']}" not in trainer_log
        assert proc_record(view, "trainer")["pid"] not in [proc_record(o, "trainer")["pid"] for o in others]
    listed = {r["run_id"] for r in runs.list_runs()}
    assert {v["run_id"] for v in views} <= listed
    began = time.monotonic()
    for view in views:
        assert runs.stop_run(view["run_id"])["status"] == "stopped"
    record(
        "concurrency",
        runs_at_once=count,
        distinct_ports=len(set(ports)),
        cross_talk=0,
        stop_all_s=round(time.monotonic() - began, 2),
    )
    for view in views:
        assert_no_orphans(runs.get_run(view["run_id"], sample=False))


@pytest.mark.timeout(200)
def test_fifty_processes_editing_drafts_and_reading_runs(hermes_home, fixture_envs, tmp_path):
    from hermes_rl.core.envs import drafts as config
    from hermes_rl.core.envs.discovery import find_environment

    env_name = "fixture_basic"
    find_environment(env_name)
    config.set_field("group_size", 2, env_name=env_name, profile="local")  # warms the field probe cache once
    run = launch_standin(step_s=0.2)
    run_id = run["run_id"]
    wait_running(run_id)
    env = client_env(hermes_home)
    sync = tmp_path / "sync"
    sync.mkdir()
    ops = 6
    clients = [
        subprocess.Popen(
            [sys.executable, str(RPROCS / "storm.py"), env_name, run_id, str(sync), str(ops), str(seed)],
            cwd=str(PROJECT_ROOT),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for seed in range(50)
    ]
    outputs = []
    try:
        assert wait_for(lambda: len(list(sync.glob("armed-*"))) == 50, 120), "clients did not start"
        began = time.monotonic()
        (sync / "go").touch()  # all 50 hit the draft and the run folder together
        for client in clients:
            out, _ = client.communicate(timeout=150)
            outputs.append((client.returncode, out.decode(errors="replace")))
        storm_s = time.monotonic() - began
    finally:
        for client in clients:
            if client.poll() is None:
                kill_tree(client)
    failures = [o for o in outputs if o[0] != 0 or "Traceback" in o[1]]
    assert not failures, failures[:3]
    edits = sum(int(o[1].split()[1]) for o in outputs)
    reads = sum(int(o[1].split()[2]) for o in outputs)
    assert edits == 50 * (ops // 2) and reads == 50 * (ops - ops // 2)
    assert runs.stop_run(run_id)["status"] == "stopped"
    checked = assert_state_parses(hermes_home)
    value = config.get_config(env_name, "local").values()["group_size"]
    assert value in (2, 4, 8)
    leftovers = [p.name for p in (hermes_home / "rl" / "drafts").iterdir() if p.name.endswith(".tmp")]
    assert not leftovers, leftovers
    record("storm", processes=50, edits=edits, reads=reads, storm_s=round(storm_s, 2), files_parsed=checked, corrupt=0)


@pytest.mark.timeout(90)
def test_stop_from_one_client_while_another_watches(hermes_home, tmp_path):
    run = launch_standin()
    run_id = run["run_id"]
    wait_running(run_id)
    log = tmp_path / "watcher.log"
    watcher = start_watcher(hermes_home, run_id, log)
    try:
        assert wait_for(lambda: log.exists() and b"look 2: running" in log.read_bytes(), 20)
        stop_answer = {}
        stopper = threading.Thread(target=lambda: stop_answer.update(toolset.rl_stop_training(run_id)))
        began = time.monotonic()
        stopper.start()
        # A second agent-side client stops the same run at the same moment: one stop, no error.
        second = toolset.rl_stop_training(run_id)
        stopper.join(timeout=30)
        elapsed = time.monotonic() - began
        assert stop_answer.get("status") == "stopped", stop_answer
        assert second.get("status") == "stopped" or "already stopped" in second.get("error", ""), second
        assert wait_for(lambda: b": stopped" in log.read_bytes(), 10), log.read_bytes()[-500:]
        assert watcher.poll() is None, "the watching client crashed"
        status = toolset.rl_check_status(run_id, min_interval_s=0)
        assert status["status"] == "stopped" and status["reason"] == "stopped by user"
    finally:
        kill_tree(watcher)
    assert b"Traceback" not in log.read_bytes()
    record("two_clients", stop_s=round(elapsed, 2), watcher_survived=True)
    assert_no_orphans(runs.get_run(run_id, sample=False))
