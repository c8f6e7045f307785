"""A sweep's budget (`hermes-rl sweep --budget-usd`): one sum of USD for all of its runs.

Each run gets its share as it starts, as its own budget_usd (the trainer stops it there, checkpoint
saved): what is left of the sweep's budget — less what its ended runs cost and what its active runs may
still spend (their own budgets) — divided among the runs not yet started. A run that ends under its
share leaves the rest to the runs after it; the runs together never pass the sweep's budget (at the
prices the trainers hold). Once nothing is left, a member does not start, saying so.
"""

from __future__ import annotations

from ..base.errors import BadInput, HermesError
from ..base.prices import usd_text
from ..base.states import RECORDED_FINAL
from .runconfig import read_run_config
from .store import list_runs

MIN_SHARE_USD = 1e-6


def check_sweep_budget(budget_usd: object, grid: dict) -> float:
    if "budget_usd" in grid:
        raise BadInput("give the budget either as --budget-usd (the whole sweep's) or in --set, not both")
    if isinstance(budget_usd, bool) or not isinstance(budget_usd, (int, float)) or not 0 < budget_usd <= 1e6:
        raise BadInput(f"the sweep's budget must be more than 0 and at most 1000000 USD, got {budget_usd!r}")
    return float(budget_usd)


def _run_budget(run_id: str) -> float | None:
    value = (read_run_config(run_id).get("tinker") or {}).get("budget_usd")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def member_budget(sweep: dict, member: dict) -> float:
    """The budget_usd `member` starts with; HermesError when the sweep's budget is spent."""
    by_id = {r["run_id"]: r for r in list_runs()}
    committed = 0.0
    for other in sweep["members"]:
        run = by_id.get(other.get("run_id") or "")
        if other is member or run is None:
            continue
        spent = float(run.get("cost_usd") or 0.0)
        if run.get("status") in RECORDED_FINAL:
            committed += spent
        else:  # active: it may spend up to its own budget
            committed += max(spent, _run_budget(run["run_id"]) or 0.0)
    # not started yet: queued, or reserved for a start (core.runs.sweeps.start_queued; this member is)
    waiting = sum(1 for m in sweep["members"] if m.get("state") in ("queued", "starting")) or 1
    left = float(sweep["budget_usd"]) - committed
    share = left / waiting
    if share < MIN_SHARE_USD:
        raise HermesError(
            f"the sweep's budget is spent: {usd_text(committed)} of {usd_text(float(sweep['budget_usd']))} "
            "used or held by its runs",
            hint="start a new sweep with a larger --budget-usd",
        )
    return round(share, 6)
