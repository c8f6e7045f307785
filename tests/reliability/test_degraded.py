"""Degraded dependencies never fail a run: with a W&B key set while W&B is unreachable, an environment
started the way a run starts it keeps going, logging to W&B offline with one warning."""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap

import pytest

from hermes_rl.core.runs.training import training_pipeline

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

USES_WANDB = textwrap.dedent("""\
    import sys
    import wandb

    run = wandb.init(project="hermes-rl-test", name="unreachable")
    run.log({"step": 1, "reward/mean": 0.5})
    run.finish()
    print("the environment kept going")
""")


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_an_unreachable_wandb_with_a_key_does_not_stop_the_environment(tmp_path, monkeypatch):
    env_file = tmp_path / "uses_wandb.py"
    env_file.write_text(USES_WANDB)
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    # The environment's argv exactly as a run's spec has it, with this file in place of the env file.
    from hermes_rl.core.envs.profiles import get_profile

    spec = next(s for s in training_pipeline("0000abcd", get_profile("local"), str(env_file)) if s.name == "env")
    argv = [a for a in spec.argv if a not in ("serve", "--config") and "config.yaml" not in a]
    env = {
        **os.environ,
        "WANDB_MODE": "online",
        "WANDB_BASE_URL": f"http://127.0.0.1:{_closed_port()}",
        "WANDB_INIT_TIMEOUT": "5",
        "WANDB_DIR": str(tmp_path),
        "WANDB_SILENT": "true",
    }
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "the environment kept going" in out.stdout
    assert "W&B unavailable" in out.stderr and "logging offline" in out.stderr
    assert list(tmp_path.glob("wandb/offline-run-*")), "no offline W&B run was written"
