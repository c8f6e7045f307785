"""Fixtures for the dashboard tests: deterministic run folders, a fixed clock, fixture environments.

Run folders are written exactly as the supervisor and trainer write them (DESIGN §2-4): run.json,
metrics.jsonl, env_metrics.jsonl and one log per process under logs/rl_training/. Environments are
real Atropos environment files in a fixture folder that discovery scans instead of the project's,
so snapshots do not change when someone adds an environment to the project.
"""

from __future__ import annotations

import json
import math
import textwrap
import time
from pathlib import Path

import pytest

from hermes_rl.core.base.fsutil import atomic_write_json
from hermes_rl.core.base.paths import ensure_private_dir, logs_dir, run_dir, user_environments_dir

FIXED_NOW = 1_764_430_000.0  # 2025-11-29 15:26:40 UTC: every age and clock in snapshots
SNAP_SIZE = (160, 48)


async def wait_for(pilot, predicate, timeout: float = 20.0, what: str = "condition", poll: float = 0.1) -> None:
    """Let the app run until `predicate()` holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(poll)
    raise AssertionError(f"timed out waiting for {what}")


TUI_ENV_SOURCE = '''
"""Counting game used by the dashboard tests: say the next number."""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from pydantic import Field


class CountingConfig(BaseEnvConfig):
    max_number: int = Field(default=9, description="Largest number in a prompt")
    temperature: float = Field(default=1.0, description="Sampling temperature")
    shuffle: bool = Field(default=True, description="Shuffle prompts each epoch")
    prompt_prefix: str = Field(default="Count:", description="Text before each prompt")


class CountingEnv(BaseEnv):
    name = "counting"
    env_config_cls = CountingConfig

    @classmethod
    def config_init(cls) -> tuple[CountingConfig, list[APIServerConfig]]:
        env = CountingConfig(tokenizer_name="unset", group_size=4, use_wandb=False, total_steps=10,
                             batch_size=8, max_token_length=32)
        return env, [APIServerConfig(model_name="unset", base_url="http://127.0.0.1:9/v1", api_key="x")]

    async def setup(self):
        pass

    async def get_next_item(self):
        return None

    async def collect_trajectories(self, item):
        return None, []

    async def evaluate(self, *args, **kwargs):
        return None
'''

BROKEN_ENV_SOURCE = "class Broken(BaseEnv:\n    pass\n"


def fixed_clock() -> float:
    return FIXED_NOW


@pytest.fixture
def tui_environments(tmp_path, monkeypatch) -> Path:
    """A project-environments folder holding one good environment and one that fails to parse."""
    import hermes_rl.core.envs.discovery as discovery

    root = tmp_path / "project"
    envs = root / "environments"
    envs.mkdir(parents=True)
    (envs / "counting.py").write_text(textwrap.dedent(TUI_ENV_SOURCE))
    (envs / "broken_env.py").write_text(BROKEN_ENV_SOURCE)
    monkeypatch.setattr(discovery, "PROJECT_ROOT", root)
    ensure_private_dir(user_environments_dir())
    if hasattr(discovery, "clear_cache"):
        discovery.clear_cache()
    return envs


def write_run(
    run_id: str,
    *,
    environment: str = "counting",
    profile: str = "local",
    status: str = "completed",
    created_at: float = FIXED_NOW - 3600,
    steps: int = 0,
    total_steps: int = 20,
    processes: list[dict] | None = None,
    reason: str | None = None,
    logs: dict[str, str] | None = None,
    env_steps: bool = True,
    supervisor: dict | None = None,
) -> Path:
    """A run folder as the supervisor leaves it (final states need no live processes)."""
    folder = ensure_private_dir(run_dir(run_id))
    ensure_private_dir(logs_dir())
    names = ["api", "trainer", "env"]
    ports = {"api": "api", "trainer": "inference"}

    def state(name: str) -> str:
        if status == "completed":
            return "exited"
        return "failed" if status == "failed" and name == "trainer" else "stopped"

    processes = (
        processes
        if processes is not None
        else [
            {
                "name": name,
                "pid": 41000 + i,
                "create_time": created_at + i,
                "argv_redacted": [name],
                "state": state(name),
                "ready_at": created_at + 5,
                "exit_code": 0 if status == "completed" else (1 if name == "trainer" else -15),
                "restarts": 1 if name == "env" else 0,
                "log": str(logs_dir() / f"{name}_{run_id}.log"),
                "port": ports.get(name),
            }
            for i, name in enumerate(names)
        ]
    )
    run = {
        "run_id": run_id,
        "environment": environment,
        "profile": profile,
        "status": status,
        "created_at": created_at,
        "started_at": created_at + 2,
        "ended_at": None if status in ("running", "starting") else created_at + 600,
        "reason": reason,
        "supervisor": supervisor or {"pid": 40999, "create_time": created_at},
        "ports": {"api": 18000, "inference": 18001, "tinker": 18002},
        "processes": processes,
        "total_steps": total_steps,
        "wandb": {"mode": "offline", "project": "hermes-rl", "run_name": f"{environment}-{run_id}", "url": None},
    }
    atomic_write_json(folder / "run.json", run)
    with open(folder / "metrics.jsonl", "w") as handle:
        for step in range(1, steps + 1):
            handle.write(json.dumps(metric_row(step, created_at)) + "\n")
    if env_steps and steps:
        with open(folder / "env_metrics.jsonl", "w") as handle:
            for step in range(1, steps + 1):
                row = {"step": step, "train/percent_correct": round(min(1.0, 0.1 + 0.04 * step), 4)}
                if step % 5 == 0:
                    row["eval/percent_correct"] = round(min(1.0, 0.05 + 0.04 * step), 4)
                handle.write(json.dumps(row) + "\n")
    for name, text in (logs or {}).items():
        data = text if isinstance(text, bytes) else text.encode()
        if name == "trainer" and data:
            data += b"invalid utf-8: caf\xe9 \xff and a NUL\x00 byte\n"
        Path(logs_dir() / f"{name}_{run_id}.log").write_bytes(data)
    return folder


def metric_row(step: int, start: float = FIXED_NOW) -> dict:
    return {
        "step": step,
        "time": start + 30 * step,
        "train/loss": round(1.2 * math.exp(-step / 12) + 0.05 * math.sin(step), 5),
        "train/learning_rate": 4e-5,
        "reward/mean": round(0.15 + 0.7 * (1 - math.exp(-step / 10)) + 0.03 * math.cos(step * 1.7), 5),
        "logprobs/mean": round(-1.5 + 0.04 * step, 4),
        "logprobs/diff": round(0.02 * math.sin(step / 2), 5),
        "advantages/mean": 0.0,
        "advantages/std": round(0.5 - 0.01 * step, 4),
        "time/step_s": 29.5,
    }


SAMPLE_LOGS = {
    "api": "INFO:     Started server process [41000]\nINFO:     Uvicorn running on http://127.0.0.1:18000\n"
    'INFO:     127.0.0.1 - "POST /register HTTP/1.1" 200 OK\n',
    "trainer": "".join(
        f"step {s}: loss={metric_row(s)['train/loss']:.4f} reward={metric_row(s)['reward/mean']:.3f}\n"
        for s in range(1, 21)
    )
    + "\x1b[32mcheckpoint saved\x1b[0m tinker://local/step_20\n"
    + "progress 10%\rprogress 55%\rprogress 100%\n"
    + "\x1b[31mERROR\x1b[0m a red error line kept in colour\n",
    "env": "".join(f"[env] group {g} scored: 0.{g % 10}\n" for g in range(1, 30)),
}


@pytest.fixture
def synthetic_runs(hermes_home) -> list[str]:
    """Three finished runs with metrics and logs: completed, failed, stopped."""
    write_run("a1b2c3d4", status="completed", steps=20, created_at=FIXED_NOW - 7200, logs=SAMPLE_LOGS)
    write_run(
        "0badc0de",
        status="failed",
        steps=7,
        created_at=FIXED_NOW - 3 * 86400,
        reason="trainer exited 1",
        logs={"api": "ok\n", "trainer": "Traceback (most recent call last):\nRuntimeError: boom\n", "env": ""},
    )
    write_run(
        "5ee5ee5e",
        status="stopped",
        steps=3,
        profile="tinker",
        environment="gsm8k",
        created_at=FIXED_NOW - 600,
        reason="stopped by user",
        logs={"api": "", "trainer": "", "env": ""},
    )
    return ["5ee5ee5e", "a1b2c3d4", "0badc0de"]


def write_run_config(run_id: str, group_size: int, learning_rate: float) -> None:
    """A run's config.yaml in the sections `compare` reads, with the per-run values (ports, names)
    that differ between any two runs."""
    import yaml

    config = {
        "env": {
            "group_size": group_size,
            "batch_size": 16,
            "rollout_server_url": f"http://127.0.0.1:{18000 + group_size}",
            "wandb_name": f"toy-{run_id}",
        },
        "tinker": {"lora_rank": 8, "learning_rate": learning_rate},
        "hermes": {"run_id": run_id, "run_dir": str(run_dir(run_id))},
    }
    (run_dir(run_id) / "config.yaml").write_text(yaml.safe_dump(config))


REAL_ROLLOUTS = Path(__file__).parent / "data" / "rollouts_toy_addition.jsonl"  # a real 12-step local run's
