"""The dashboard over many runs: sweep grouping and sort by eval in [3], compare smoothing, the
step-time stacked chart, and the palette's "Derive a profile from this run's values"."""

from __future__ import annotations

import asyncio
import json

import pytest

from hermes_rl.core.base.fsutil import atomic_write_json
from hermes_rl.core.base.paths import profiles_dir, run_dir, sweep_queue_flag, sweeps_dir
from hermes_rl.core.base.states import STEP_PHASES, STEP_TIME
from hermes_rl.core.envs.drafts import current_selection
from hermes_rl.core.envs.profiles import get_profile
from hermes_rl.tui import backend
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.compare import CompareScreen
from hermes_rl.tui.panes.metrics import MetricsPane
from hermes_rl.tui.panes.runs import RunsPane
from hermes_rl.tui.panes.step_time import StepTimeScreen, bucketed, phase_rows
from hermes_rl.tui.widgets.name_prompt import NamePrompt
from tests.fixtures_tui import FIXED_NOW, SNAP_SIZE, fixed_clock, wait_for, write_run

pytestmark = pytest.mark.timeout(240)


def phase_row(step: int) -> dict:
    """A trainer row whose step spends 64 % of its 0.11 s waiting for rollouts."""
    row = dict.fromkeys(STEP_PHASES, 0.0)
    row.update(
        {
            "step": step,
            "time": FIXED_NOW + step,
            "reward/mean": 0.5,
            "time/wait_batch_s": 0.0704 if step % 2 else 0.0604,
            "time/forward_backward_s": 0.0246 if step % 2 else 0.0346,
            "time/optim_step_s": 0.005,
            "time/sampler_refresh_s": 0.01,
        }
    )
    row[STEP_TIME] = sum(row[key] for key in STEP_PHASES)
    return row


def with_phases(run_id: str, steps: int = 40) -> None:
    with open(run_dir(run_id) / "metrics.jsonl", "w") as handle:
        for step in range(1, steps + 1):
            handle.write(json.dumps(phase_row(step)) + "\n")


def in_sweep(run_id: str, sweep_id: str, learning_rate: str) -> None:
    path = run_dir(run_id) / "run.json"
    record = json.loads(path.read_text())
    record["sweep"] = {"id": sweep_id, "index": 0, "config": {"learning_rate": learning_rate}, "seed": None}
    record["profile_changes"] = {"learning_rate": learning_rate}
    path.write_text(json.dumps(record))


def order(pane: RunsPane) -> list[str]:
    return [pane.table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(pane.table.row_count)]


def test_phase_rows_are_bucketed_into_at_most_sixty_bars():
    rows = [phase_row(step) for step in range(1, 301)] + [{"step": 301, "reward/mean": 0.1}]
    kept = phase_rows(rows)
    assert len(kept) == 300
    steps, phases = bucketed(kept)
    assert len(steps) == 60 and steps[0] == 5 and steps[-1] == 300
    assert phases["time/wait_batch_s"][0] == pytest.approx((0.0704 * 3 + 0.0604 * 2) / 5)


def test_sweep_runs_stay_together_sort_by_eval_and_compare_a_sweep_smoothed(hermes_home, tui_environments):
    # created newest first: other runs were started between the sweep's two runs
    write_run("aaaa0001", steps=30, created_at=FIXED_NOW - 100)
    write_run("bbbb0002", steps=10, created_at=FIXED_NOW - 200)
    write_run("cccc0003", steps=30, created_at=FIXED_NOW - 300)
    write_run("dddd0004", steps=5, created_at=FIXED_NOW - 400)
    in_sweep("aaaa0001", "5eed5eed", "3e-4")
    in_sweep("cccc0003", "5eed5eed", "1e-4")
    # two more of its runs wait for a place under the local-run limit
    members = [
        {"index": i, "config_index": i, "config": {}, "seed": None, "state": "queued", "run_id": None, "error": None}
        for i in range(2)
    ]
    atomic_write_json(sweeps_dir() / "5eed5eed" / "sweep.json", {"sweep_id": "5eed5eed", "members": members})
    sweep_queue_flag().touch()
    # The queue was just advanced (sweeps.kick_queue: at most every KICK_INTERVAL_S). Otherwise the dashboard's
    # first listing starts the queue runner, which takes these members (it cannot start them: this record
    # names no environment) — and on a loaded machine did so before the pane showed them waiting.
    (sweep_queue_flag().parent / ".kicked").touch()

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, stall_after_s=0)
        async with app.run_test(size=SNAP_SIZE) as pilot:
            pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: pane.table.row_count == 4, what="runs")
            assert order(pane) == ["aaaa0001", "cccc0003", "bbbb0002", "dddd0004"]  # the sweep as one block
            assert "⊞5eed5eed" in str(pane.table.cell("cccc0003", "environment"))
            await wait_for(pilot, lambda: "2 queued in sweeps" in str(pane.border_subtitle), what="queued count")
            # the trailing mean, not the last batch: the column says its window
            reward = next(r for r in app.runs if r["run_id"] == "aaaa0001")["reward"]
            assert str(pane.table.cell("aaaa0001", "reward")) == f"{reward:.3f}"
            await pilot.press("3", "V", "V")  # eval, best first
            await pilot.pause(0.2)
            evals = [next(r for r in app.runs if r["run_id"] == rid)["eval_last"] for rid in order(pane)]
            assert evals == sorted(evals, reverse=True), evals
            app.compare_sweep("5eed5eed")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), what="compare")
            screen = app.screen
            assert screen.run_ids == ["cccc0003", "aaaa0001"]  # in the order the sweep started them
            await wait_for(pilot, lambda: screen.comparison is not None, what="comparison")
            title = str(screen.query_one("#compare-title").render())
            assert "sweep 5eed5eed" in title and "EMA 0.6" in title  # 30 points: smoothed from the start
            await pilot.press("s")
            assert "EMA 0.9" in str(screen.query_one("#compare-title").render())
            await pilot.press("s")
            assert "(raw, s)" in str(screen.query_one("#compare-title").render())

    asyncio.run(scenario())


def test_enter_on_a_time_metric_opens_the_stacked_chart_naming_the_dominant_phase(hermes_home, tui_environments):
    write_run("aaaa0001", steps=1, created_at=FIXED_NOW - 100)
    with_phases("aaaa0001")

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, stall_after_s=0)
        async with app.run_test(size=SNAP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.selected_run == "aaaa0001", what="run selected")
            await wait_for(pilot, lambda: len(app.query_one("#metrics-table").rows) > 5, what="metrics")
            app.open_chart(STEP_TIME)
            await wait_for(pilot, lambda: isinstance(app.screen, StepTimeScreen), what="stacked chart")

            def title() -> str:
                found = app.screen.query("#steptime-title")
                return str(found.first().render()) if found else ""

            await wait_for(pilot, lambda: "step" in title(), what="the chart drawn")
            title = title()
            assert "step 0.11 s: 59% waiting for rollouts (mean of the last 20)" in title

    asyncio.run(scenario())


def test_the_palette_derives_a_profile_from_the_selected_runs_values(hermes_home, tui_environments):
    write_run("aaaa0001", steps=3, created_at=FIXED_NOW - 100)
    path = run_dir("aaaa0001") / "run.json"
    record = json.loads(path.read_text())
    record["profile_values"] = {**get_profile("local").values(), "learning_rate": 7e-4, "total_steps": 120}
    path.write_text(json.dumps(record))

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, stall_after_s=0)
        async with app.run_test(size=SNAP_SIZE) as pilot:
            await wait_for(pilot, lambda: app.selected_run == "aaaa0001", what="run selected")
            await pilot.press("colon")
            await pilot.press(*"derive a profile from this run")
            await pilot.pause(1.0)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, NamePrompt), what="the name prompt")
            await pilot.press(*"lr7", "enter")
            await wait_for(pilot, lambda: (profiles_dir() / "lr7.yaml").exists(), what="profile written")
            await wait_for(
                pilot, lambda: any("profile lr7 created" in n.message for n in app._notifications), what="note"
            )
            # the palette then offers it for the selected environment, as it does the built-ins
            app.choose_environment("counting")
            await wait_for(pilot, lambda: app.selected_env == "counting", what="environment selected")
            await pilot.press("colon")
            await pilot.press(*"use profile lr7")
            await pilot.pause(1.0)
            await pilot.press("enter")
            await wait_for(pilot, lambda: current_selection().get("profile") == "lr7", what="profile chosen")

    asyncio.run(scenario())
    derived = get_profile("lr7")
    assert derived.editable_defaults["learning_rate"] == pytest.approx(7e-4)
    assert derived.editable_defaults["total_steps"] == 120


def test_step_time_chart_snapshot(snap_compare, hermes_home, tui_environments):
    write_run("aaaa0001", steps=1, created_at=FIXED_NOW - 100)
    with_phases("aaaa0001", steps=40)

    async def run_before(pilot):
        app = pilot.app
        await wait_for(pilot, lambda: app.selected_run == "aaaa0001", what="run selected")
        on_disk = backend.run_metrics("aaaa0001")
        on_disk.poll()
        metrics = app.query_one(MetricsPane)
        await wait_for(pilot, lambda: len(metrics.rows) == len(on_disk.rows), what="every metric row")
        if app.live is not None:
            app.live.stop()
        app.open_chart(STEP_TIME)
        await pilot.pause(0.5)
        app.clear_notifications()
        await pilot.pause(0.3)

    assert snap_compare(
        HermesDashboard(clock=fixed_clock, stall_after_s=0), terminal_size=SNAP_SIZE, run_before=run_before
    )
