"""The rollouts view driven from the keyboard over a run folder holding the rollouts.jsonl a real
12-step local toy_addition run recorded, and live appends while it is open."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from hermes_rl.core.base.paths import run_dir
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.rollouts import CompletionsTable, RolloutsScreen, StepsTable
from hermes_rl.tui.panes.runs import RunsPane
from tests.fixtures_tui import FIXED_NOW, REAL_ROLLOUTS, fixed_clock, wait_for, write_run

RUN = "7011a0c5"


def cells(table, column: str) -> list[str]:
    index = list(table.columns).index(column)
    return [str(table.get_row_at(i)[index]) for i in range(table.row_count)]


@pytest.fixture
def recorded_run(hermes_home):
    write_run(RUN, environment="toy_addition", steps=12, total_steps=12, created_at=FIXED_NOW - 600)
    shutil.copyfile(REAL_ROLLOUTS, run_dir(RUN) / "rollouts.jsonl")
    return RUN


def append_step(step: int, rewards: list[float], text: str) -> None:
    mean = sum(rewards) / len(rewards)
    line = {
        "step": step,
        "time": FIXED_NOW,
        "group": 0,
        "prompt": "Q: 9+9=\nA:",
        "completions": [
            {"text": f"{text}{i}", "reward": r, "advantage": r - mean, "tokens": 3, "finish": "length"}
            for i, r in enumerate(rewards)
        ],
    }
    with open(run_dir(RUN) / "rollouts.jsonl", "a") as handle:
        handle.write(json.dumps(line) + "\n")


@pytest.mark.timeout(120)
def test_rollouts_view_steps_completions_filter_search_and_live_follow(recorded_run):
    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            runs_pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: runs_pane.table.row_count == 1, what="the run")
            await wait_for(pilot, lambda: app.selected_run == RUN, what="selection")
            await pilot.press("o")
            assert isinstance(app.screen, RolloutsScreen)
            screen = app.screen
            steps = screen.query_one(StepsTable)
            completions = screen.query_one(CompletionsTable)
            await wait_for(pilot, lambda: steps.row_count == 12, what="the recorded steps")
            assert cells(steps, "step")[0] == "12"  # newest first
            # step 12: two groups (a prompt row each) and their 16 completions, best first in each group
            assert completions.row_count == 18
            texts = cells(completions, "text")
            assert texts[0].startswith("prompt · mean") and "Q: " in texts[0]
            rewards = [float(r) for r in cells(completions, "reward")[1:9]]
            assert rewards == sorted(rewards, reverse=True)

            # the zero-reward filter, then a search for a completion's text across every step
            await pilot.press("f")
            zero_steps = [int(s) for s in cells(steps, "zero") if s != "0"]
            assert steps.row_count == len(zero_steps)
            await pilot.press("f", "f", "f")  # back to all
            await wait_for(pilot, lambda: steps.row_count == 12, what="filter reset")
            await pilot.press("slash", *" 4", "enter")
            await pilot.pause(0.2)
            shown = [t for t in cells(completions, "text") if not t.startswith("prompt")]
            assert shown and all(" 4" in t for t in shown)
            await pilot.press("slash")
            await pilot.press("escape")  # clears the search
            await wait_for(pilot, lambda: steps.row_count == 12, what="search cleared")

            # following: a new step appears on top and is shown; after moving down, the view stays put
            append_step(13, [0.0, 1.0], "live")
            await wait_for(pilot, lambda: cells(steps, "step")[0] == "13", what="the live step")
            assert any(t.startswith("live") for t in cells(completions, "text"))
            await pilot.press("j", "j")
            await pilot.pause(0.2)
            held = screen.selected_step()
            append_step(14, [0.5, 0.25], "later")
            await wait_for(pilot, lambda: cells(steps, "step")[0] == "14", what="another step")
            assert screen.selected_step() == held
            await pilot.press("escape")
            assert not isinstance(app.screen, RolloutsScreen)

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_a_run_without_rollouts_says_so(hermes_home):
    write_run(RUN, steps=3)

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == RUN, what="selection")
            await pilot.press("o")
            await pilot.pause(0.5)
            title = str(app.screen.query_one("#rollouts-title").render())
            assert "no rollouts recorded yet" in title

    asyncio.run(scenario())
