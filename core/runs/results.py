"""A run's results: final metrics, an evenly spaced history sample and its checkpoint."""

from __future__ import annotations

from pathlib import Path

from hermes_rl.core.base.fsutil import read_json
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.base.records import Results
from hermes_rl.core.base.states import Metric, RunStatus
from hermes_rl.core.runs.store import lost_reason, read_run

HISTORY_SAMPLE = 50


def _history_sample(rows: list[dict], limit: int = HISTORY_SAMPLE) -> list[dict]:
    if len(rows) <= limit:
        return list(rows)
    step = (len(rows) - 1) / (limit - 1)
    return [rows[round(i * step)] for i in range(limit)]


def _checkpoint(folder: Path) -> tuple[str | None, str | None, dict]:
    """(checkpoint path, tinker:// path, results.json) — results.json first, else the newest checkpoint folder."""
    results: dict = {}
    try:
        data = read_json(folder / "results.json")
        if isinstance(data, dict):
            results = data
    except (OSError, ValueError):
        pass
    checkpoint = results.get("final_checkpoint") or results.get("checkpoint")
    tinker_path = results.get("tinker_path")
    if not checkpoint:
        try:
            candidates = [p for p in (folder / "checkpoints").iterdir() if p.is_dir()]
        except OSError:
            candidates = []
        if candidates:
            checkpoint = str(max(candidates, key=lambda p: p.stat().st_mtime))
    return (str(checkpoint) if checkpoint else None), tinker_path, results


def get_results(run_id: str) -> Results:
    """Final metrics, an evenly spaced history sample (<= 50 rows, first and last included), checkpoint."""
    from hermes_rl.core.readers.metrics import last_values, metric_series, metric_summary, read_metrics

    run = read_run(run_id)
    folder = run_dir(run_id)
    rows = read_metrics(run_id)
    checkpoint, tinker_path, results = _checkpoint(folder)
    status = run.get("status")
    lost = lost_reason(run)
    return {
        "run_id": run_id,
        "status": RunStatus.LOST.value if lost else status,
        "reason": lost or run.get("reason"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "total_steps": run.get("total_steps"),
        "steps_done": rows[-1]["step"] if rows else 0,
        "final_metrics": last_values(rows),
        "history": _history_sample(rows),
        "eval_accuracy": metric_summary(metric_series(rows, Metric.EVAL_PERCENT_CORRECT), Metric.EVAL_PERCENT_CORRECT),
        "checkpoint": checkpoint,
        "tinker_path": tinker_path,
        "results": results,
        "wandb": run.get("wandb"),
    }
