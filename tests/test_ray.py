"""The Ray launcher on a real one-node Ray cluster (tests/fixtures_ray.py): the preflight refuses a
cluster it cannot use, with the reason; workers run as Ray jobs whose status, node and logs the run shows,
whose keys never appear in a job's entrypoint or metadata; `stop` leaves no job of the run running, and
neither does a kill -9 of the supervisor once the watchdog acts."""

from __future__ import annotations

import os
import signal

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import process_log_path, rl_dir, run_dir
from hermes_rl.core.daemons.launchers.ray_jobs import RAY_LIVE_STATES, client, cluster_nodes, preflight
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from hermes_rl.core.runs.workers import resolve_workers
from tests.fixtures_core import PY, wait_status, wait_until

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


def test_preflight_refuses_a_cluster_it_cannot_use(ray_cluster, hermes_home):
    with pytest.raises(BadInput, match="no Ray cluster address"):
        preflight({})
    with pytest.raises(BadInput, match="cannot reach the Ray cluster at http://127.0.0.1:9"):
        preflight({"address": "http://127.0.0.1:9"})
    assert len(cluster_nodes(ray_cluster)) == 1  # the cluster's one node, by Ray's state API
    with pytest.raises(BadInput, match="has 2 CPUs; 3 worker"):
        preflight({"address": ray_cluster}, replicas=3)
    preflight({"address": ray_cluster}, replicas=2)  # the same Python and hermes-rl on its node
    # the address decides where the workers' keys go: it comes from the site file only
    with pytest.raises(BadInput, match=r"ray\.address is a command"):
        resolve_workers({"launcher": "ray", "ray": {"address": "http://evil.example:8265"}})


def test_workers_as_ray_jobs_report_log_stop_and_survive_a_supervisor_kill(ray_cluster, run_processes_cleanup):
    _site(ray_cluster)

    def specs() -> list[ProcessSpec]:
        return [
            ProcessSpec(
                name=f"env-{i}",
                argv=[PY, "-c", WORKER],
                env={"HERMES_TEST_TOKEN": TOKEN},
                readiness=Readiness("log", pattern=r"^ready", timeout_s=120.0),
                launcher="ray",
            )
            for i in (1, 2)
        ]

    run = runs.launch(specs(), environment="toy", profile="local")
    run_id = run["run_id"]
    assert wait_status(run_id, ("running", "failed"), timeout=240)["status"] == "running"

    def running() -> list | None:
        procs = runs.get_run(run_id)["processes"]
        return procs if all(p["where"].endswith(" RUNNING") for p in procs) else None

    procs = wait_until(running, 60, what="both jobs RUNNING on a node")
    (node,) = cluster_nodes(ray_cluster)
    assert [p["where"] for p in procs] == [f"{node.node_ip} RUNNING"] * 2  # the node by its address, as Ray names it
    assert len({p["job_id"] for p in procs}) == 2 and all(p["launcher"] == "ray" and p["alive"] for p in procs)
    assert "token ends 2a9c" in process_log_path("env-1", run_id).read_text()  # the key reached the worker
    jobs = _run_jobs(ray_cluster, run_id)
    assert set(jobs) == {p["job_id"] for p in procs}
    for details in jobs.values():
        assert TOKEN not in f"{details.entrypoint} {details.metadata} {details.runtime_env}"
    assert not list((run_dir(run_id) / "ray").glob("*.json"))  # each read once and removed on the node
    final = runs.stop_run(run_id, wait=90)
    assert final["status"] == "stopped"
    assert {d.status.value for d in _run_jobs(ray_cluster, run_id).values()} == {"STOPPED"}
    events = [e["message"] for e in runs.run_events(run_id) if e.get("process") == "env-1"]
    assert any(m.startswith("env-1 stopped (Ray job ") for m in events), events

    run = runs.launch(specs(), environment="toy", profile="local")
    run = wait_status(run["run_id"], ("running", "failed"), timeout=240)
    assert run["status"] == "running", run["reason"]
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    final = wait_status(run["run_id"], "failed", timeout=120)
    assert final["reason"].startswith("supervisor died")
    live = [j for j, d in _run_jobs(ray_cluster, run["run_id"]).items() if d.status.value in RAY_LIVE_STATES]
    assert live == [], live
