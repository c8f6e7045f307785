"""A site's Slurm settings ($HERMES_HOME/rl/slurm.yaml: account, QoS, GPUs, constraint, time limit with a
grace signal, setup lines, a wrapper, the nodes' python), the preflight a Slurm start gets, and a user's
stop recorded as a cancellation. The settings checks need no cluster; the rest runs on the one-node
cluster of scripts/slurm_local.sh (tests/fixtures_slurm.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import process_log_path, rl_dir
from hermes_rl.core.daemons.launchers.slurm import preflight, slurm_settings
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from hermes_rl.core.runs.workers import resolve_workers
from tests.fixtures_core import PY, proc_path, wait_status, wait_until
from tests.fixtures_slurm import squeue_jobs

CLUSTER_SETUP_S = 600  # the first test to ask for the cluster may install it (tests/test_slurm.py)


def _site(text: str) -> None:
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / "slurm.yaml").write_text(text, encoding="utf-8")


def test_site_settings_are_every_slurm_runs_defaults_and_a_start_overrides_them(hermes_home):
    _site(
        "account: physics\nqos: rollouts\ngres: gpu:1\nconstraint: a100\ntime: '2:00:00'\n"
        "setup: ['module load cuda/12', 'source /opt/conda/bin/activate rl']\nwrapper: apptainer exec --nv rl.sif\n"
        "python: python3\n"
    )
    workers = resolve_workers({"launcher": "slurm", "slurm": {"qos": "debug"}})
    settings = slurm_settings(workers["slurm"])
    assert settings.sbatch_options() == [
        "--cpus-per-task=1",
        "--time=2:00:00",
        "--account=physics",
        "--qos=debug",  # the start's
        "--gres=gpu:1",
        "--constraint=a100",
        "--signal=B:TERM@60",  # a time limit gets a grace signal by default
    ]
    script = settings.script([sys.executable, "-m", "hermes_rl.core.envs.serve"], sys.executable)
    assert script.splitlines() == [
        "#!/bin/bash",
        ": hermes-rl worker, options on the sbatch command line",  # no #SBATCH line below is a directive
        "module load cuda/12",
        "source /opt/conda/bin/activate rl",
        "exec apptainer exec --nv rl.sif python3 -m hermes_rl.core.envs.serve",  # not this host's venv path
    ]
    assert resolve_workers(None)["slurm"] == {}  # a local run ignores the site's Slurm settings
    _site("acount: physics\n")
    with pytest.raises(BadInput, match=r"slurm.yaml: unknown slurm setting\(s\): acount"):
        resolve_workers({"launcher": "slurm"})


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"account": "a b"}, "slurm.account"),
        ({"gres": "gpu;rm -rf /"}, "slurm.gres"),
        ({"signal": "TERM@soon"}, "slurm.signal"),
        ({"setup": "module load x"}, "slurm.setup"),
        ({"setup": ["a\nb"]}, "slurm.setup"),
        ({"wrapper": ""}, "slurm.wrapper"),
    ],
)
def test_site_settings_sbatch_would_refuse_are_named(settings, words):
    with pytest.raises(BadInput, match=words):
        slurm_settings(settings)


@pytest.mark.timeout(120 + CLUSTER_SETUP_S)
def test_preflight_refuses_what_the_cluster_would(slurm_cluster, hermes_home):
    preflight({"time": "5", "account": "any", "qos": "normal"})  # the one-node cluster takes these
    with pytest.raises(BadInput, match="partition 'gpu-nodes' does not exist.*partitions: debug"):
        preflight({"partition": "gpu-nodes"})
    with pytest.raises(BadInput, match="would not accept a worker job.*gres"):
        preflight({"gres": "gpu:8"})
    with pytest.raises(BadInput, match="would not accept a worker job.*feature"):
        preflight({"constraint": "a100"})
    # A start is refused before anything runs: no run folder, no job.
    before = {r["run_id"] for r in runs.list_runs()}
    with pytest.raises(BadInput, match="partition 'gpu-nodes' does not exist"):
        runs.start_run("toy_addition", "local", workers={"launcher": "slurm", "slurm": {"partition": "gpu-nodes"}})
    assert {r["run_id"] for r in runs.list_runs()} == before


@pytest.mark.timeout(180 + CLUSTER_SETUP_S)
def test_setup_hook_runs_and_a_users_stop_is_a_cancellation(slurm_cluster, run_processes_cleanup):
    worker = ProcessSpec(
        name="w",
        argv=[PY, proc_path("ready.py")],
        readiness=Readiness("log", pattern=r"^ready", timeout_s=60.0),
        launcher="slurm",
        # the nodes' own python (not this venv's path), after a setup line
        settings={"setup": ["echo setup ran on $(hostname -s)"], "python": "python3", "time": "10"},
    )
    run = runs.launch([worker], environment="toy", profile="local")
    run_id = run["run_id"]
    run = wait_status(run_id, "running", timeout=90)
    log = process_log_path("w", run_id).read_text()
    assert f"setup ran on {slurm_cluster}" in log
    (proc,) = wait_until(
        lambda: (r := runs.get_run(run_id))["processes"][0]["slurm_state"] == "RUNNING" and r["processes"],
        30,
        what="squeue to report the job RUNNING",
    )
    # A running job has no pid here: its health is its state, as squeue last said, never "gone".
    assert proc["slurm_state"] == "RUNNING" and proc["health"] == "ready" and proc["alive"], proc
    status = subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", "status", run_id],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "gone" not in status, status
    final = runs.stop_run(run_id, wait=60)
    assert final["status"] == "stopped"
    (proc,) = final["processes"]
    assert proc["slurm_state"] == "CANCELLED" and proc["state"] == "stopped", proc
    events = [e["message"] for e in runs.run_events(run_id) if e.get("process") == "w"]
    assert any("Slurm job" in m and "CANCELLED" in m for m in events), events
    assert any(m.startswith(f"w stopped (Slurm job {proc['job_id']} cancelled") for m in events), events
    assert not any("FAILED" in m for m in events), events
    assert squeue_jobs(run_id) == {}
    wait_until(lambda: _sacct_state(proc["job_id"]) in ("CANCELLED", None), 30, what="sacct to record it")


def _sacct_state(job_id: str) -> str | None:
    """Slurm's own record of the job, where accounting is kept (None where it is not)."""
    done = subprocess.run(["sacct", "-n", "-X", "-j", job_id, "-o", "State%20"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return done.stdout.split()[0]
