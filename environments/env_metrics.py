"""Shared by the project's environments: where their metrics go and which trainer step they belong to.

Environments append lines to the run's env_metrics.jsonl (config `hermes.env_metrics_path`,
passed to the environment as the `env_metrics_path` field or the HERMES_ENV_METRICS env var),
each tagged with the trainer step the environment last saw. Light: stdlib and core's file primitives only.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.request

from hermes_rl.core.base.fsutil import append_jsonl

ENV_VAR = "HERMES_ENV_METRICS"


def resolve_path(configured: str | None) -> str | None:
    return configured or os.environ.get(ENV_VAR) or None


def append(path: str | None, step: int, metrics: dict, **extra) -> dict | None:
    """One line {"step", "time", **metrics} appended with a single write; None values and NaN dropped."""
    if not path:
        return None
    row = {"step": int(step), "time": time.time(), **extra}
    for key, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if value is not None:
            row[key] = value
    append_jsonl(path, row)
    return row


def trainer_step(inference_base_url: str | None, fallback: int, timeout: float = 1.0) -> int:
    """The step the trainer is on, from its inference server's /health (run-api's step runs ahead of
    it because /batch can hand out several steps at once); `fallback` if it cannot be asked."""
    if not inference_base_url:
        return fallback
    root = inference_base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=timeout) as resp:
            data = json.loads(resp.read().decode() or "{}")
        step = data.get("step")
        return int(step) if isinstance(step, int) else fallback
    except Exception:
        return fallback
