"""How a run is going, beyond its last row: where a step's time goes (the trainer's time/… phases)
and whether its eval curve has flattened (core.base.plateau). `hermes-rl status`, rl_check_status
and the dashboard say these in the same words."""

from __future__ import annotations

import os

from ..base.plateau import PLATEAU_EVALS, plateau
from ..base.states import STEP_PHASES, STEP_TIME, Metric
from ..readers.metrics import ENV_FILE, TRAINER_FILE, RunMetrics, metric_series, recent_rows

STEP_TIME_WINDOW = 20  # steps whose phases are averaged


def step_time(folder: str | os.PathLike, window: int = STEP_TIME_WINDOW) -> dict | None:
    """step_time_of the last `window` rows of the run folder's metrics.jsonl."""
    return step_time_of(recent_rows(os.path.join(folder, TRAINER_FILE), window), window)


def step_time_of(rows: list[dict], window: int = STEP_TIME_WINDOW) -> dict | None:
    """{step_s, phases: {key: mean seconds}, dominant: {key, label, share}, steps, text} over the last
    `window` of `rows` that record phases; None when none does (a trainer older than the phases)."""
    rows = [r for r in rows if _seconds(r.get(STEP_TIME))][-window:]
    if not rows:
        return None
    phases = {key: sum(_seconds(r.get(key)) or 0.0 for r in rows) / len(rows) for key in STEP_PHASES}
    step_s = sum(_seconds(r.get(STEP_TIME)) or 0.0 for r in rows) / len(rows)
    key = max(phases, key=lambda k: phases[k])
    share = phases[key] / step_s if step_s > 0 else 0.0
    label = STEP_PHASES[key]
    return {
        "step_s": step_s,
        "phases": phases,
        "dominant": {"key": key, "label": label, "share": share},
        "steps": len(rows),
        "text": f"step {step_s:.2f} s: {share:.0%} {label}",
    }


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        return None
    return float(value)


def eval_plateau(folder: str | os.PathLike, evals: int | None = None) -> dict | None:
    """core.base.plateau of the run's greedy eval accuracy (eval/percent_correct) in env_metrics.jsonl."""
    if not os.path.exists(os.path.join(folder, ENV_FILE)):
        return None
    reader = RunMetrics(folder)
    reader.poll()
    return plateau(metric_series(reader.rows, str(Metric.EVAL_PERCENT_CORRECT)), evals or PLATEAU_EVALS)
