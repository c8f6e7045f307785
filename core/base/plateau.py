"""When an eval curve has stopped improving: "eval flat for N evals since step S".

One rule for `status`, the runs listing and the trainer's optional `stop_on_plateau`: the evals since
the best one (the first to reach it, within `min_delta`) have not beaten it by more than `min_delta`.
"""

from __future__ import annotations

PLATEAU_EVALS = 3  # flat evals before status calls a curve a plateau
PLATEAU_MIN_DELTA = 0.01  # an eval accuracy gain smaller than this is no gain (1 % of the eval set)


def plateau(
    series: list[tuple[int, float]], evals: int = PLATEAU_EVALS, min_delta: float = PLATEAU_MIN_DELTA
) -> dict | None:
    """{flat_evals, since_step, best, text} when the last `evals` (or more) evals of a (step, value)
    series came after its best without beating it by more than min_delta; None otherwise."""
    if evals < 1 or len(series) <= evals:
        return None
    best_index = 0
    for index, (_step, value) in enumerate(series):
        if value > series[best_index][1] + min_delta:
            best_index = index
    flat = len(series) - 1 - best_index
    if flat < evals:
        return None
    since_step, best = series[best_index]
    return {
        "flat_evals": flat,
        "since_step": since_step,
        "best": best,
        "text": f"eval flat for {flat} evals since step {since_step} (best {best:.3f})",
    }
