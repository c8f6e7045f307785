"""The rollouts view driven from the keyboard over a run folder holding the rollouts.jsonl a real
12-step local toy_addition run recorded, and live appends while it is open."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from textual.widgets._footer import FooterKey

from hermes_rl.core.base.paths import run_dir
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.metrics import ChartScreen, MetricsPane
from hermes_rl.tui.panes.rollouts import TEXT_CELL, CompletionsTable, RolloutsScreen, StepsList, one_line
from hermes_rl.tui.panes.runs import RunsPane
from tests.fixtures_tui import FIXED_NOW, REAL_ROLLOUTS, fixed_clock, wait_for, write_run

RUN = "7011a0c5"


def cells(table, column: str) -> list[str]:
    return table.values(column)


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
            assert app._background_screens == []  # the dashboard it covers is not composited meanwhile
            screen = app.screen
            steps = screen.query_one(StepsList)
            completions = screen.query_one(CompletionsTable)
            await wait_for(pilot, lambda: steps.row_count == 12, what="the recorded steps")
            assert steps.values("step")[0] == "12"  # newest first
            # step 12: two groups (a prompt row each) and their 16 completions, best first in each group
            assert completions.row_count == 18
            texts = cells(completions, "text")
            assert texts[0].startswith("prompt · mean") and "Q: " in texts[0]
            rewards = [float(r) for r in cells(completions, "reward")[1:9]]
            assert rewards == sorted(rewards, reverse=True)

            # the zero-reward filter, then a search for a completion's text across every step
            await pilot.press("f")
            zero_steps = [int(s) for s in steps.values("zero") if s != "0"]
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
            await wait_for(pilot, lambda: steps.values("step")[0] == "13", what="the live step")
            assert any(t.startswith("live") for t in cells(completions, "text"))
            await pilot.press("j", "j")
            await pilot.pause(0.2)
            held = screen.selected_step()
            append_step(14, [0.5, 0.25], "later")
            await wait_for(pilot, lambda: steps.values("step")[0] == "14", what="another step")
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


def texts_at(step: int) -> set[str]:
    """The completion texts a real run recorded at a step (as the view shows them, on one line)."""
    rows = [json.loads(line) for line in REAL_ROLLOUTS.read_text().splitlines()]
    return {one_line(c["text"], TEXT_CELL) for r in rows if r.get("step") == step for c in r["completions"]}


@pytest.mark.timeout(120)
def test_chart_cursor_opens_the_rollouts_view_at_its_step_or_the_nearest_recorded_one(hermes_home):
    write_run(RUN, environment="toy_addition", steps=12, total_steps=12, created_at=FIXED_NOW - 600)
    # The real run's rollouts without step 7 (past the file's bound only some steps keep groups).
    kept = [line for line in REAL_ROLLOUTS.read_text().splitlines() if json.loads(line).get("step") != 7]
    (run_dir(RUN) / "rollouts.jsonl").write_text("\n".join(kept) + "\n")

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            metrics = app.query_one(MetricsPane)
            await wait_for(pilot, lambda: app.selected_run == RUN and metrics.table.row_count, what="metrics")
            await pilot.press("6")
            metrics.table.move_cursor(row=metrics.table.get_row_index("reward/mean"))
            await pilot.press("enter")
            chart = app.screen
            assert isinstance(chart, ChartScreen) and chart.key == "reward/mean"
            # the key is in the footer and in the help, by its binding id
            assert "Rollouts at step" in [key.description for key in chart.query(FooterKey)]
            await pilot.press("question_mark")
            assert "chart.rollouts" in {row[3] for row in app.screen.rows}
            await pilot.press("escape")

            await pilot.press(*["comma"] * 5)  # from the newest step, 12, back to 7
            assert chart.cursor_step == 7
            assert "cursor step 7" in str(chart.query_one("#chart-title").render())
            await pilot.press("o")
            view = app.screen
            assert isinstance(view, RolloutsScreen)
            await wait_for(pilot, lambda: view.selected_step() == 8, what="the nearest recorded step")
            assert "step 7 not recorded: nearest 8" in str(view.query_one("#rollouts-title").render())
            completions = view.query_one(CompletionsTable)
            shown = {t for t in cells(completions, "text") if not t.startswith("prompt")}
            assert shown == texts_at(8) and shown != texts_at(12)
            assert view.query_one(StepsList).values("step")[0] == "12"  # the newest still listed on top

            await pilot.press("escape")  # back to the chart, its cursor where it was
            assert app.screen is chart and chart.cursor_step == 7
            await pilot.press("less_than_sign", "o")  # a tenth of the points back: step 6, recorded
            view = app.screen
            await wait_for(pilot, lambda: view.selected_step() == 6, what="step 6")
            assert "not recorded" not in str(view.query_one("#rollouts-title").render())
            shown = {t for t in cells(view.query_one(CompletionsTable), "text") if not t.startswith("prompt")}
            assert shown == texts_at(6)
            await pilot.press("j")  # the view stays on the chosen step's neighbours, not the newest
            await wait_for(pilot, lambda: view.selected_step() == 5, what="step 5")
            assert view.step == 5

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_a_long_run_lists_a_window_of_steps_that_follows_the_cursor_and_stays_put_while_steps_arrive(hermes_home):
    write_run(RUN, environment="toy_addition", steps=3, total_steps=400, created_at=FIXED_NOW - 600)
    for step in range(1, 301):
        append_step(step, [step % 3 / 2, 0.0], f"s{step}-")

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == RUN, what="selection")
            await pilot.press("o")
            view = app.screen
            steps = view.query_one(StepsList)
            await wait_for(pilot, lambda: steps.values("step")[:1] == ["300"], what="the newest steps")
            fit = steps.row_count
            assert 20 < fit == steps.capacity < 300  # as many as fit, no scrolling
            await pilot.press("G")  # the oldest step, listed at the bottom of its window
            await wait_for(pilot, lambda: view.selected_step() == 1, what="the oldest step")
            assert steps.values("step")[-1] == "1" and view.step == 1
            assert any(t.startswith("s1-") for t in cells(view.query_one(CompletionsTable), "text"))
            await pilot.press("g")  # back to the newest: following again
            await wait_for(pilot, lambda: view.selected_step() == 300 and view.step is None, what="following")
            await pilot.press("pagedown", "pagedown")  # past the window: it moves with the cursor
            await wait_for(pilot, lambda: view.selected_step() is not None and view.selected_step() < 300 - fit)
            chosen = view.selected_step()
            listed = steps.values("step")
            assert str(chosen) in listed and "300" not in listed
            for _ in range(3):  # j down to the window's edge and past it, one step at a time
                await pilot.press(*["j"] * (fit // 2))
            await pilot.pause(0.2)
            assert view.selected_step() == chosen - 3 * (fit // 2)
            chosen, listed = view.selected_step(), steps.values("step")
            append_step(301, [1.0, 1.0], "new")  # a new step leaves the chosen step's window alone
            await wait_for(pilot, lambda: view.reader.latest_step() == 301, what="the new step read")
            await pilot.pause(0.3)
            assert view.selected_step() == chosen and steps.values("step") == listed
            assert "steps 1–301" in str(view.query_one("#rollouts-title").render())

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_p_on_a_completion_shows_its_prompt_at_every_step_it_was_sampled(recorded_run):
    from hermes_rl.tui.panes.prompt_history import PromptHistoryScreen
    from hermes_rl.tui.widgets.rowlist import RowList

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == RUN, what="selection")
            await pilot.press("o")
            screen = app.screen
            steps = screen.query_one(StepsList)
            await wait_for(pilot, lambda: steps.row_count == 12, what="the recorded steps")
            prompt = screen.reader.groups(screen.selected_step())[0]["prompt"]
            await pilot.press("l", "p")  # to the completions (the first group's prompt row), same prompt
            await wait_for(pilot, lambda: isinstance(app.screen, PromptHistoryScreen), what="the same-prompt view")
            history = app.screen
            rows = history.query_one(RowList)
            await wait_for(pilot, lambda: rows.row_count > 0, what="its groups")
            out = history.out
            assert out["prompt"] == prompt and out["matches"] >= 1
            assert [g["step"] for g in out["groups"]] == sorted(g["step"] for g in out["groups"])
            assert rows.values("step")[0] == str(out["groups"][0]["step"])
            app.save_screenshot("prompt_history.svg", str(run_dir(RUN)))
            await pilot.press("z")  # only the groups that scored alike
            await wait_for(pilot, lambda: history.zero_variance and history.out is not out, what="the alike filter")
            assert all(g["zero_variance"] for g in history.out["groups"])
            await pilot.press("escape")
            assert isinstance(app.screen, RolloutsScreen)

    asyncio.run(scenario())
