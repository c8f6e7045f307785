"""Degraded dependencies never fail a run: with a W&B key set while W&B is unreachable, an environment
started the way a run starts it keeps going, logging to W&B offline with one warning."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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


@pytest.mark.slow
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


TRAINER_WANDB = textwrap.dedent("""\
    import logging, sys
    from hermes_rl.dataplane.trainer.loop import WandbLogger
    from hermes_rl.dataplane.trainer.settings import load_settings

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = load_settings(sys.argv[1])
    assert settings.wandb_mode == "online", settings.wandb_mode  # a key is set: the run asks for online
    logger = WandbLogger(settings)  # the trainer's W&B setup, as Trainer.setup makes it
    logger.log(1, {"step": 1, "reward/mean": 0.5})
    logger.finish()
    print("failed" if logger.failed else "logged", flush=True)
""")


def test_an_unreachable_wandb_with_a_key_leaves_the_trainer_logging_offline(tmp_path):
    """The trainer's W&B (real wandb, its own setup code) with a key and a closed endpoint ends in an
    offline W&B run in the run folder with one warning, like the environments, instead of no W&B."""
    import yaml

    config = {
        "env": {"group_size": 4, "batch_size": 8, "total_steps": 3, "max_token_length": 32, "tokenizer_name": "m"},
        "openai": [{"base_url": "http://127.0.0.1:8123/v1", "model_name": "m"}],
        "tinker": {"base_model": "m", "lora_rank": 4, "learning_rate": 1e-3, "wandb_project": "hermes-rl-test"},
        "backend": {"kind": "local", "base_url": "http://127.0.0.1:8124"},
        "hermes": {"run_dir": str(tmp_path)},
    }
    config["env"]["rollout_server_url"] = "http://127.0.0.1:9"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {
        **{k: v for k, v in os.environ.items() if k != "WANDB_MODE"},
        "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
        "WANDB_BASE_URL": f"http://127.0.0.1:{_closed_port()}",
        "WANDB_INIT_TIMEOUT": "5",
        "WANDB_SILENT": "true",
    }
    out = subprocess.run(
        [sys.executable, "-c", TRAINER_WANDB, str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("logged"), out.stdout + out.stderr[-2000:]
    assert "W&B unavailable" in out.stderr and "logging offline" in out.stderr, out.stderr[-2000:]
    assert "W&B disabled" not in out.stderr
    assert list(tmp_path.glob("wandb/offline-run-*")), "no offline W&B run in the run folder"
