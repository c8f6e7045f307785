"""The selection follows the run (process, environment, step) it names, whatever reorders the rows
under it: live re-sorting, a filter, a refresh. What `x` asks about and stops is that run."""

from __future__ import annotations

import asyncio
import json

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.logs import LogsPane
from hermes_rl.tui.panes.runs import RunsPane
from hermes_rl.tui.widgets.dialogs import ConfirmScreen
from tests.fixtures_tui import wait_for

pytestmark = [pytest.mark.usefixtures("run_processes_cleanup")]


def write_reward(run_id: str, reward: float, steps: int) -> None:
    with open(run_dir(run_id) / "metrics.jsonl", "a") as handle:
        for step in range(steps):
            handle.write(json.dumps({"step": step + 1, "reward/mean": reward}) + "\n")


@pytest.mark.timeout(180)
def test_live_resort_keeps_the_selected_run_and_x_stops_that_run(hermes_home, specs):
    first = runs.launch([specs.sleeper("trainer", stop_timeout=3)], environment="counting", profile="local")
    second = runs.launch([specs.sleeper("trainer", stop_timeout=3)], environment="gsm8k", profile="local")
    low, high = first["run_id"], second["run_id"]
    write_reward(low, 0.1, 1)
    write_reward(high, 0.9, 1)

    async def scenario():
        app = HermesDashboard()
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(RunsPane)
            await wait_for(
                pilot,
                lambda: sum(r.get("reward_mean") is not None and r["status"] == "running" for r in pane.runs) == 2,
                timeout=60,
                what="both runs running with rewards",
            )
            await pilot.press("3", "R", "R")  # reward, descending: high first
            await wait_for(pilot, lambda: pane.table.selected_key() is not None, what="rows")
            while pane.table.selected_key() != low:
                await pilot.press("j")
            assert pane.table.cursor_row == 1
            await wait_for(pilot, lambda: app.selected_run == low, what="low selected")
            # The selected run's reward overtakes (the headline reward is a trailing mean of 20 steps,
            # so 20 steps of it): the live listing re-sorts it to the top.
            write_reward(low, 0.99, 20)
            await wait_for(pilot, lambda: pane.table.cursor_row == 0, timeout=20, what="the selected row moved up")
            await pilot.pause(0.5)
            assert pane.table.selected_key() == low and app.selected_run == low
            # A key that moves the cursor and `x` right after it (before the app has heard of the move):
            # the dialog names the run under the cursor.
            pane.table.action_cursor_down()
            app.action_stop_run()
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            assert high in app.screen.question and low not in app.screen.question
            await pilot.press("n", "k")
            await wait_for(pilot, lambda: app.selected_run == low, what="back on low")
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmScreen)
            assert low in app.screen.question and high not in app.screen.question
            await pilot.press("y")
            await wait_for(
                pilot, lambda: runs.get_run(low, sample=False)["status"] == "stopped", timeout=30, what="low stopped"
            )
            assert runs.get_run(high, sample=False)["status"] == "running"

    try:
        asyncio.run(scenario())
    finally:
        runs.stop_run(high)


def test_a_log_search_does_not_follow_into_another_runs_logs(hermes_home, synthetic_runs):
    from tests.fixtures_tui import fixed_clock

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: pane.table.row_count == 3, what="runs")
            pane.select("a1b2c3d4")
            logs = app.query_one(LogsPane)
            await wait_for(pilot, lambda: logs.view.line_count > 10, what="a1b2c3d4's logs")
            await pilot.press("5", "slash", *"reward=0.7", "enter")
            await wait_for(pilot, lambda: logs.view.match_line is not None, what="search hit")
            assert "search: 'reward=0.7' @ line" in logs._status
            await pilot.press("3", "j")  # the next run: 0badc0de
            await wait_for(pilot, lambda: app.selected_run == "0badc0de", what="another run")
            await pilot.pause(0.3)
            assert "search" not in logs._status and logs.view.search is None

    asyncio.run(scenario())
