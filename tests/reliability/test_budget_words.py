"""A budget that cannot stop anything is said, everywhere: on a model with no price no cost is ever
counted, so a budget stops nothing. A start already said so in its notices; a sweep, the estimate (the
CLI's `--estimate`, the dashboard's start dialog, `rl_start_training(estimate=True)`) say it the same
way, in the same words (core.runs.cost.budget_stop_warning)."""

from __future__ import annotations

import time

import pytest

from hermes_rl.core.runs import cost, sweeps
from tests.fixtures_tui import write_run

pytestmark = [pytest.mark.reliability]


def test_a_budget_on_a_model_without_a_price_is_said_by_sweep_and_estimate(hermes_home, monkeypatch):
    from hermes_rl.tui.format import estimate_summary

    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    # a run that holds the one local place, so the sweep starts nothing here
    write_run("eeee0009", status="starting", created_at=time.time(), supervisor={"pid": None})
    sweep = sweeps.create_sweep(
        {"learning_rate": ["1e-4", "3e-4"]}, env_name="toy_addition", profile="local", budget_usd=2.0
    )
    said = [n for n in sweep["notices"] if "stops nothing" in n]
    assert len(said) == 1 and "has no price" in said[0] and "prices.yaml" in said[0], sweep["notices"]
    assert [m["state"] for m in sweep["members"]] == ["queued", "queued"]

    est = cost.estimate_start("toy_addition", "local", {"budget_usd": 2.0})
    assert est["budget_warning"] == said[0]
    shown = estimate_summary(est)  # the dashboard's start dialog
    assert "stops nothing" in shown and "stops cleanly" not in shown
    assert cost.estimate_start("toy_addition", "local").get("budget_warning") is None  # no budget, nothing said
