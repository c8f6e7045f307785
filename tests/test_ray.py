"""The Ray launcher on a real one-node Ray cluster (tests/fixtures_ray.py): the preflight refuses a
cluster it cannot use, with the reason; a local-profile training run whose two environment workers are
Ray jobs trains, shows each worker's job id, node and state, has their logs in its log folder while they
run, and leaves no job of the run running after `stop`; workers' keys never appear in a job's
entrypoint or metadata, and a kill -9 of the supervisor leaves no job once the watchdog acts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import process_log_path, rl_dir, run_dir
from hermes_rl.core.daemons.launchers.ray_jobs import RAY_LIVE_STATES, client, cluster_nodes, preflight
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from hermes_rl.core.runs.workers import resolve_workers
from tests.fixtures_core import PY, wait_status, wait_trained_steps
from tests.fixtures_model import use_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TOKEN = "hrl-test-token-5f2a9c"  # a stand-in for a key: it must reach the worker, never the job's record
WORKER = (
    "import os, time; print('token ends', os.environ['HERMES_TEST_TOKEN'][-4:], flush=True); "
    "print('ready', flush=True); time.sleep(3600)"
)


def _site(address: str) -> None:
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / "ray.yaml").write_text(f"address: {address}\n", encoding="utf-8")


def _run_jobs(address: str, run_id: str) -> dict:
    return {d.submission_id: d for d in client(address).list_jobs() if (d.metadata or {}).get("hermes_run") == run_id}


def _status(*args: str) -> str:
    cli = [sys.executable, "-m", "hermes_rl.core.clients.cli", "status", *args]
    env = {**os.environ, "COLUMNS": "250"}  # wide enough for the whole job ids (a narrow one elides them)
    return subprocess.run(cli, capture_output=True, text=True, timeout=120, env=env, check=True).stdout


def test_preflight_refuses_a_cluster_it_cannot_use(ray_cluster, hermes_home):
    with pytest.raises(BadInput, match="no Ray cluster address"):
        preflight({})
    with pytest.raises(BadInput, match="cannot reach the Ray cluster at http://127.0.0.1:9"):
        preflight({"address": "http://127.0.0.1:9"})
    assert len(cluster_nodes(ray_cluster)) == 1  # the cluster's one node, by Ray's state API
    # importing Ray leaves no mark in this process's environment (a dashboard's later runs still fork
    # from its warm base, whose environment must match theirs)
    assert "RAY_CLIENT_MODE" not in os.environ
    with pytest.raises(BadInput, match="has 2 CPUs; 3 worker"):
        preflight({"address": ray_cluster}, replicas=3)
    # the address decides where the workers' keys go: it comes from the site file only
    with pytest.raises(BadInput, match=r"ray\.address is a command"):
        resolve_workers({"launcher": "ray", "ray": {"address": "http://evil.example:8265"}})
    # (the preflight that passes, the same Python and hermes-rl on the node, runs in the training run's start)


def test_training_run_on_ray_trains_reports_logs_stops_and_survives_a_supervisor_kill(
    ray_cluster, tiny_model_dir, run_processes_cleanup
):
    _site(ray_cluster)
    use_tiny_model(tiny_model_dir, total_steps=2000)  # more steps than it gets: it is stopped while training
    # loopback: the one node is this machine (a cluster elsewhere takes this host's address, the default)
    run = runs.start_run("toy_addition", "local", workers={"launcher": "ray", "replicas": 2, "address": "127.0.0.1"})
    run_id = run["run_id"]
    try:
        run = wait_trained_steps(run_id, 2)
        assert run["status"] == "running", run.get("reason")
        workers = {p["name"]: p for p in run["processes"] if p["name"].startswith("env")}
        assert sorted(workers) == ["env-1", "env-2"]
        (node,) = cluster_nodes(ray_cluster)
        # each worker is a Ray job on the node, named by its submission id, RUNNING, in Ray's words
        assert {p["where"] for p in workers.values()} == {f"{node.node_ip} RUNNING"}, workers
        assert all(p["launcher"] == "ray" and p["alive"] for p in workers.values()), workers
        jobs = _run_jobs(ray_cluster, run_id)
        assert {p["job_id"] for p in workers.values()} == set(jobs)
        assert {d.status.value for d in jobs.values()} == {"RUNNING"}
        # the workers' output is in the run's log folder while their jobs run (the env's own start-up lines)
        for name in workers:
            assert process_log_path(name, run_id).stat().st_size > 0, f"{name}'s log is empty while it runs"
        shown = _status(run_id)
        for proc in workers.values():
            assert f"job {proc['job_id']}" in shown, shown
        assert shown.count(f"{node.node_ip} RUNNING") >= 2, shown
        checked = json.loads(_status(run_id, "--json"))
        assert {p["name"]: (p["job_id"], p["where"]) for p in checked["processes"] if p["launcher"] == "ray"} == {
            n: (p["job_id"], p["where"]) for n, p in workers.items()
        }
    finally:
        final = runs.stop_run(run_id, wait=90)
    assert final["status"] == "stopped", final.get("reason")
    assert {d.status.value for d in _run_jobs(ray_cluster, run_id).values()} == {"STOPPED"}
    events = [e["message"] for e in runs.run_events(run_id) if e.get("process") == "env-1"]
    assert any(m.startswith("env-1 stopped (Ray job ") for m in events), events

    # Keys reach a worker only through the run folder's private file; then a kill -9 of the supervisor.
    stand_ins = [
        ProcessSpec(
            name=f"env-{i}",
            argv=[PY, "-c", WORKER],
            env={"HERMES_TEST_TOKEN": TOKEN},
            readiness=Readiness("log", pattern=r"^ready", timeout_s=120.0),
            launcher="ray",
        )
        for i in (1, 2)
    ]
    run = runs.launch(stand_ins, environment="toy", profile="local")
    run = wait_status(run["run_id"], ("running", "failed"), timeout=240)
    assert run["status"] == "running", run["reason"]
    assert "token ends 2a9c" in process_log_path("env-1", run["run_id"]).read_text()  # the key reached the worker
    jobs = _run_jobs(ray_cluster, run["run_id"])
    assert len(jobs) == 2
    for details in jobs.values():
        assert TOKEN not in f"{details.entrypoint} {details.metadata} {details.runtime_env}"
    assert not list((run_dir(run["run_id"]) / "ray").glob("*.json"))  # each read once and removed on the node
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    final = wait_status(run["run_id"], "failed", timeout=120)
    assert final["reason"].startswith("supervisor died")
    live = [j for j, d in _run_jobs(ray_cluster, run["run_id"]).items() if d.status.value in RAY_LIVE_STATES]
    assert live == [], live
