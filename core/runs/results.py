"""A run's results: final metrics, an evenly spaced history sample and its checkpoint."""

from __future__ import annotations

from pathlib import Path

from ..base.fsutil import read_json
from ..base.paths import run_dir
from ..base.records import Results
from ..base.states import Metric, RunStatus
from ..readers.metrics import run_metrics_summary
from .store import lost_reason, read_run

HISTORY_SAMPLE = 50


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


def checkpoint_paths(run_id: str) -> tuple[str | None, str | None]:
    """(checkpoint path, tinker:// path) of a run, without reading its metrics."""
    checkpoint, tinker_path, _ = _checkpoint(run_dir(run_id))
    return checkpoint, tinker_path


def get_results(run_id: str) -> Results:
    """Final metrics, an evenly spaced history sample (<= 50 rows, first and last included), checkpoint.
    Read in one streaming pass, so a results summary of a days-long run costs little memory."""
    run = read_run(run_id)
    folder = run_dir(run_id)
    metrics = run_metrics_summary(folder, HISTORY_SAMPLE, series_key=Metric.EVAL_PERCENT_CORRECT)
    checkpoint, tinker_path, results = _checkpoint(folder)
    status = run.get("status")
    lost = lost_reason(run)
    return {
        "run_id": run_id,
        "status": RunStatus.LOST.value if lost else str(status),
        "reason": lost or run.get("reason"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "total_steps": run.get("total_steps"),
        "steps_done": metrics["steps_done"],
        "final_metrics": metrics["final"],
        "history": metrics["history"],
        "eval_accuracy": metrics["series"],
        "checkpoint": checkpoint,
        "tinker_path": tinker_path,
        "results": results,
        "wandb": run.get("wandb"),
    }
