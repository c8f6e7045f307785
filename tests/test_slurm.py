"""Environment workers as Slurm jobs, on a real one-node cluster (tests/fixtures_slurm.py): a training run
with two replicas trains, shows its jobs, stops with nothing left queued; a killed supervisor's jobs are
cancelled by its watchdog; a failing worker job is restarted by policy; worker logs read like local ones.
Without the cluster only the settings checks run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import process_log_path
from hermes_rl.core.daemons.launchers.slurm import slurm_settings
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
from hermes_rl.core.runs.training import training_pipeline
from hermes_rl.core.runs.workers import exposure_warning, resolve_workers
from tests.fixtures_core import PY, proc_path, wait_status, wait_trained_steps, wait_until
from tests.fixtures_model import use_tiny_model
from tests.fixtures_slurm import squeue_jobs

CLI = [sys.executable, "-m", "hermes_rl.core.clients.cli"]


def hermes(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=os.environ.copy())


def procs(run: dict) -> dict:
    return {p["name"]: p for p in run["processes"]}


# ---------------------------------------------------------------- settings (no cluster needed)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"time": "soon"}, "slurm.time"),
        ({"mem_per_worker": "lots"}, "slurm.mem_per_worker"),
        ({"cpus_per_worker": 0}, "slurm.cpus_per_worker"),
        ({"sbatch_args": ["--output=/tmp/x"]}, "may not hold"),
        ({"sbatch_args": "--exclusive"}, "list of sbatch options"),
        ({"partitions": "gpu"}, "unknown slurm setting"),
    ],
)
def test_slurm_settings_that_sbatch_would_refuse_are_named(settings, words):
    with pytest.raises(BadInput, match=words):
        slurm_settings(settings)


def test_replicas_on_slurm_are_worker_jobs_and_servers_bind_the_workers_address():
    workers = resolve_workers({"launcher": "slurm", "replicas": 2, "address": "10.1.2.3", "slurm": {"time": "30"}})
    profile = SimpleNamespace(backend="tinker", locked={})
    specs = {s.name: s for s in training_pipeline("abcd1234", profile, "env.py", {"workers": workers})}
    assert [n for n in specs if n.startswith("env")] == ["env-1", "env-2"]
    assert all(specs[n].launcher == "slurm" and specs[n].settings["time"] == "30" for n in ("env-1", "env-2"))
    assert specs["api"].launcher == specs["trainer"].launcher == "local"
    assert specs["api"].argv[specs["api"].argv.index("--host") + 1] == "10.1.2.3"
    assert specs["trainer"].readiness.url.startswith("http://10.1.2.3:")
    # run-api has no authentication: a non-loopback address is said out loud, loopback is not.
    assert "no authentication" in exposure_warning(workers)
    assert exposure_warning(resolve_workers(None)) is None
    with pytest.raises(BadInput, match="cannot be reached"):
        resolve_workers({"launcher": "slurm", "address": "0.0.0.0"})
    with pytest.raises(BadInput, match="replicas"):
        resolve_workers({"replicas": 0})


def test_a_slurm_worker_is_shown_by_its_job_and_node_a_local_one_by_its_pid():
    from hermes_rl.core.base.formatting import process_id_text, process_place_text

    job = {"launcher": "slurm", "job_id": "16", "node": "node3", "slurm_state": "RUNNING", "pid": None}
    assert process_id_text(job) == "job 16" and process_id_text(job, node=True) == "job 16@node3"
    assert process_place_text(job) == "node3 RUNNING"
    assert process_place_text({**job, "node": None, "slurm_state": "PENDING"}) == "PENDING"
    local = {"launcher": "local", "pid": 4242}
    assert process_id_text(local) == "4242" and process_place_text(local) == "local"


# ---------------------------------------------------------------- on the cluster
# Each timeout below adds CLUSTER_SETUP_S: the first test to ask for the cluster (whichever it is)
# installs and starts it inside its own time on a fresh machine.
CLUSTER_SETUP_S = 600


def _worker(name: str, **kw) -> ProcessSpec:
    return ProcessSpec(
        name=name,
        argv=[PY, proc_path("ready.py")],
        readiness=Readiness("log", pattern=r"^ready", timeout_s=60.0),
        launcher="slurm",
        **kw,
    )


@pytest.mark.timeout(180 + CLUSTER_SETUP_S)
def test_supervisor_killed_leaves_no_job_of_the_run_queued(slurm_cluster, run_processes_cleanup):
    pipeline = [
        ProcessSpec(name="api", argv=[PY, proc_path("ready.py")], readiness=Readiness("log", pattern=r"^ready")),
        _worker("w-1", depends_on=[("api", "ready")]),
        _worker("w-2", depends_on=[("api", "ready")]),
    ]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run_id = run["run_id"]
    run = wait_status(run_id, "running", timeout=90)
    jobs = {p["job_id"] for p in run["processes"] if p["launcher"] == "slurm"}
    assert len(jobs) == 2 and set(squeue_jobs(run_id)) == jobs
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    final = wait_status(run_id, "failed", timeout=60)
    assert "supervisor died" in final["reason"]
    assert squeue_jobs(run_id) == {}, "the watchdog left jobs of the run in squeue"
    assert {p["slurm_state"] for p in final["processes"] if p["launcher"] == "slurm"} == {"CANCELLED"}


@pytest.mark.timeout(180 + CLUSTER_SETUP_S)
def test_a_failing_worker_job_is_restarted_by_policy_and_its_log_reads_as_a_local_one(
    slurm_cluster, run_processes_cleanup
):
    crash = ProcessSpec(
        name="flaky",
        argv=[PY, proc_path("crash.py"), "--after", "0.2", "--code", "3"],
        launcher="slurm",
        required=False,
        restart=RestartPolicy(mode="on_failure", max_restarts=1, backoff_s=0.1),
    )
    keeper = ProcessSpec(name="keeper", argv=[PY, proc_path("ready.py")], readiness=Readiness("log", pattern="^ready"))
    run = runs.launch([keeper, crash], environment="toy", profile="local")
    run_id = run["run_id"]
    try:
        flaky = wait_until(
            lambda: (p := procs(runs.get_run(run_id, sample=False))["flaky"])["state"] == "failed" and p,
            120,
            what="the worker to fail twice",
        )
        assert flaky["restarts"] == 1 and flaky["exit_code"] == 3
        assert "gave up after 1 restart" in next(
            e["message"] for e in reversed(runs.run_events(run_id)) if e.get("process") == "flaky"
        )
        started = [e for e in runs.run_events(run_id) if e.get("process") == "flaky" and e.get("state") == "starting"]
        assert len({e["job_id"] for e in started}) == 2, "a restart is a new job"
        logs = json.loads(hermes("logs", run_id, "--process", "flaky", "--json").stdout)
        lines = [row["line"] for row in logs["lines"]]
        assert sum("crashing in 0.2s with code 3" in line for line in lines) == 2, lines
    finally:
        runs.stop_run(run_id, wait=60)
    assert squeue_jobs(run_id) == {}


@pytest.mark.slow
@pytest.mark.timeout(420 + CLUSTER_SETUP_S)
def test_training_run_with_two_slurm_replicas_trains_shows_its_jobs_and_stops_clean(
    slurm_cluster, tiny_model_dir, run_processes_cleanup
):
    use_tiny_model(tiny_model_dir, total_steps=40)  # more steps than it gets: it is stopped while training
    run = runs.start_run("toy_addition", "local", workers={"launcher": "slurm", "replicas": 2})
    run_id = run["run_id"]
    try:
        run = wait_trained_steps(run_id, 2)
        assert run["status"] == "running", run.get("reason")
        workers = {n: p for n, p in procs(run).items() if n.startswith("env")}
        assert sorted(workers) == ["env-1", "env-2"]
        assert all(p["launcher"] == "slurm" and p["node"] == slurm_cluster for p in workers.values()), workers
        queued = squeue_jobs(run_id)
        assert {p["job_id"] for p in workers.values()} == set(queued) and set(queued.values()) == {"RUNNING"}
        # Both replicas register with run-api, each on its own (one can feed the first steps while the other
        # is still importing atroposlib on a busy machine).
        api_log = process_log_path("api", run_id)
        wait_until(lambda: api_log.read_text().count("POST /register-env") >= 2, 120, what="both replicas registered")
        status = hermes("status", run_id)
        for proc in workers.values():
            assert f"job {proc['job_id']}" in status.stdout and slurm_cluster in status.stdout, status.stdout
        checked = json.loads(hermes("status", run_id, "--json").stdout)
        assert {p["name"]: p["job_id"] for p in checked["processes"] if p["launcher"] == "slurm"} == {
            n: p["job_id"] for n, p in workers.items()
        }
    finally:
        final = runs.stop_run(run_id, wait=90)
    assert final["status"] == "stopped", final.get("reason")
    assert squeue_jobs(run_id) == {}, "stop left jobs of the run in squeue"


def test_workers_are_chosen_through_the_config_fields_and_the_start_tool(hermes_home):
    from hermes_rl.core.clients.toolset import call_tool
    from hermes_rl.core.envs.discovery import find_environment
    from hermes_rl.core.envs.drafts import resolve_run_values
    from hermes_rl.core.envs.profiles import resolve_profile

    call_tool("rl_select_environment", {"name": "toy_addition", "profile": "local"})
    assert call_tool("rl_edit_config", {"field": "env_launcher", "value": "slurm"})["value"] == "slurm"
    assert call_tool("rl_edit_config", {"field": "replicas", "value": 3})["value"] == 3
    assert (
        "must be one of local, slurm" in call_tool("rl_edit_config", {"field": "env_launcher", "value": "k8s"})["error"]
    )
    values = resolve_run_values(find_environment("toy_addition"), resolve_profile("local")[0], None)
    chosen = resolve_workers(None, values)
    assert (chosen["launcher"], chosen["replicas"]) == ("slurm", 3)
    assert resolve_workers({"replicas": 1}, values)["replicas"] == 1  # what a start passes wins over the draft
    refused = call_tool("rl_start_training", {"workers": {"replicas": "two"}})
    assert "replicas must be an integer" in refused["error"]
    assert runs.list_runs() == []  # refused before anything was created
