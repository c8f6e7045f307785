"""Two or more runs side by side: the profile values each changed, the config values that differ, the
headline reward (trailing mean) and the first/best/last of the headline metrics, aligned by step.
What `hermes-rl compare` prints and the dashboard's overlay reads."""

from __future__ import annotations

from typing import Any

from ..base.errors import BadInput
from ..base.paths import run_dir, validate_run_id
from ..base.states import HEADLINE_METRICS, Metric
from ..readers.metrics import REWARD_WINDOW, RunMetrics, metric_summary, trailing_mean
from .cost import run_cost
from .runconfig import read_run_config
from .store import get_run

# Sections of config.yaml that describe the training (the rest is where the run's files and ports are).
COMPARED_SECTIONS = ("env", "tinker")
# Values that differ between any two runs by construction: their own paths, ports and names.
PER_RUN_KEYS = {
    "env.rollout_server_url",
    "env.env_metrics_path",
    "env.wandb_name",
    "env.data_path_to_save_groups",
    "tinker.checkpoint_dir",
    "tinker.wandb_run_name",
    "tinker.log_path",
}


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = value


def config_values(run_id: str) -> dict[str, Any]:
    """The run's training config as dotted keys (env.group_size, tinker.learning_rate, ...)."""
    config = read_run_config(run_id)
    out: dict[str, Any] = {}
    for section in COMPARED_SECTIONS:
        _flatten(section, config.get(section) or {}, out)
    return {k: v for k, v in out.items() if k not in PER_RUN_KEYS}


def config_differences(run_ids: list[str]) -> list[dict]:
    """[{key, values: {run_id: value}}] for every key whose value is not the same in every run
    (a key a run lacks counts as null)."""
    values = {run_id: config_values(run_id) for run_id in run_ids}
    keys = sorted({k for v in values.values() for k in v})
    out = []
    for key in keys:
        row = {run_id: values[run_id].get(key) for run_id in run_ids}
        if len({repr(v) for v in row.values()}) > 1:
            out.append({"key": key, "values": row})
    return out


def compare_runs(run_ids: list[str]) -> dict:
    """The runs' identity, the config values that differ, and per headline metric each run's
    first/best/last. BadInput for fewer than two runs or a repeated id; NotFound for an unknown run."""
    ids = [validate_run_id(r) for r in run_ids]
    if len(ids) < 2:
        raise BadInput("compare needs at least two runs", hint="e.g. `hermes-rl compare RUN_A RUN_B`")
    if len(set(ids)) != len(ids):
        raise BadInput("a run is named twice", hint="name each run once")
    runs = []
    metrics: dict[str, dict[str, dict | None]] = {str(k): {} for k in HEADLINE_METRICS}
    for run_id in ids:
        run = get_run(run_id, sample=False)
        reader = RunMetrics(run_dir(run_id))
        reader.poll()
        runs.append(
            {
                "run_id": run_id,
                "environment": run.get("environment"),
                "profile": run.get("profile"),
                "status": run.get("status"),
                "steps": reader.trainer_step,
                "total_steps": run.get("total_steps"),
                "profile_changes": run.get("profile_changes") or {},
                "profile_values": run.get("profile_values") or {},
                "seed": run.get("seed"),
                "sweep_id": (run.get("sweep") or {}).get("id"),
                "reward": trailing_mean(reader.series(Metric.REWARD_MEAN), REWARD_WINDOW),
                "cost": run_cost(run),
            }
        )
        for key in HEADLINE_METRICS:
            metrics[str(key)][run_id] = metric_summary(reader.series(key), key)
    return {
        "reward_window": REWARD_WINDOW,
        "runs": runs,
        "config_differences": config_differences(ids),
        "metrics": {k: v for k, v in metrics.items() if any(v.values())},
    }
