"""A failed run's reason names the cause, not just "exited with code N": a config the trainer rejects
(an absurd learning rate), a port another program took between the supervisor's check and the bind,
and a process out of file descriptors (EMFILE). Real processes under the real supervisor; the reason
is read from run.json and from `hermes-rl status`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from tests.reliability.helpers import FINAL, assert_no_orphans, wait_for

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180), pytest.mark.usefixtures("run_processes_cleanup")]

PY = sys.executable
TRAINER = [PY, "-m", "hermes_rl.dataplane.trainer", "--config", "{run_dir}/config.yaml"]
# The trainer with at most 8 open files: Python starts, the event loop cannot be made.
FEW_FILES = textwrap.dedent("""\
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (8, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    os.execv(sys.executable, [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", sys.argv[1]])
""")
# run-api started once the test says so (a file appears): the supervisor's port check has passed by then.
LATE_API = textwrap.dedent("""\
    import os, sys, time
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    argv = ["-m", "atroposlib.cli.run_api", "--host", "127.0.0.1", "--port", sys.argv[2]]
    os.execv(sys.executable, [sys.executable, *argv])
""")


def trainer_config(tmp_path, learning_rate: float = 1e-3) -> dict:
    return {
        "env": {
            "group_size": 4,
            "batch_size": 8,
            "total_steps": 3,
            "max_token_length": 32,
            "rollout_server_url": "http://127.0.0.1:9",
            "tokenizer_name": "m",
            "use_wandb": False,
        },
        "openai": [{"base_url": "http://127.0.0.1:8123/v1", "model_name": "m"}],
        "tinker": {"base_model": "m", "lora_rank": 4, "learning_rate": learning_rate},
        "backend": {"kind": "local", "base_url": "http://127.0.0.1:8124"},
        "hermes": {"run_dir": str(tmp_path)},
    }


def failed_reason(run_id: str, timeout: float = 120) -> str:
    """The run's final reason, as run.json has it and as `hermes-rl status` prints it (the same text)."""
    final = wait_for(lambda: (r := runs.get_run(run_id, sample=False))["status"] in FINAL and r, timeout)
    assert final and final["status"] == "failed", final or runs.get_run(run_id, sample=False)
    argv = [PY, "-m", "hermes_rl.core.clients.cli", "status", run_id]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "2000"})
    assert out.returncode == 0, out.stderr
    assert f"reason: {final['reason']}" in out.stdout, out.stdout
    assert_no_orphans(final)
    return final["reason"]


def test_an_absurd_learning_rate_the_trainer_rejects_is_the_reason(tmp_path):
    spec = ProcessSpec(name="trainer", argv=TRAINER, completes_run=True)
    run = runs.launch([spec], environment="toy", profile="local", config=trainer_config(tmp_path, 1e300))
    reason = failed_reason(run["run_id"])
    assert "trainer exited with code 2" in reason and "tinker.learning_rate must be <= 1.0" in reason, reason


def test_a_port_taken_after_the_supervisor_checked_it_is_the_reason():
    api = ProcessSpec(
        name="api",
        argv=[PY, "-c", LATE_API, "{run_dir}/go", "{port:api}"],
        readiness=Readiness("http", "http://127.0.0.1:{port:api}/status", timeout_s=60),
        port="api",
    )
    run = runs.launch([api], environment="toy", profile="local")
    spawned = wait_for(lambda: (p := runs.get_run(run["run_id"], sample=False)["processes"][0]).get("pid") and p, 30)
    assert spawned, runs.get_run(run["run_id"], sample=False)
    with socket.socket() as taken:  # another program takes the port now, between check and bind
        taken.bind(("127.0.0.1", run["ports"]["api"]))
        taken.listen()
        (run_dir(run["run_id"]) / "go").touch()
        reason = failed_reason(run["run_id"])
    assert reason.startswith("api exited with code"), reason
    assert "address already in use" in reason.lower() and str(run["ports"]["api"]) in reason, reason


def test_a_trainer_out_of_file_descriptors_says_so(tmp_path):
    spec = ProcessSpec(name="trainer", argv=[PY, "-c", FEW_FILES, "{run_dir}/config.yaml"], completes_run=True)
    run = runs.launch([spec], environment="toy", profile="local", config=trainer_config(tmp_path))
    reason = failed_reason(run["run_id"])
    # Not the AttributeError Python reports afterwards for the half-made event loop ("Exception ignored").
    assert "Too many open files" in reason and "AttributeError" not in reason, reason
