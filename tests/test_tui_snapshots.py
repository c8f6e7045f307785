"""Snapshots of every pane over deterministic run folders (fixed clock, fixed size, no cursor blink).

Regenerate after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import functools
import json
import shutil

import pytest
from textual.widgets import DataTable, Input, Static

from hermes_rl.core.base.paths import logs_dir, run_dir
from hermes_rl.tui import backend
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.config_editor import ConfigPane
from hermes_rl.tui.panes.logs import LogsPane
from hermes_rl.tui.panes.metrics import MetricsPane
from hermes_rl.tui.panes.processes import ProcessesPane
from hermes_rl.tui.panes.runs import RunsPane
from hermes_rl.tui.widgets.charts import ChartGrid
from tests.fixtures_tui import REAL_ROLLOUTS, SNAP_SIZE, fixed_clock, wait_for, write_run_config

pytestmark = pytest.mark.timeout(240)


wait_for_fast = functools.partial(wait_for, poll=0.05)


def _log_lines_written(run_id: str) -> int:
    return sum(path.read_bytes().count(b"\n") for path in logs_dir().glob(f"*_{run_id}.log"))


async def settle(pilot, select_run: str | None = "a1b2c3d4"):
    """Wait until the live worker has delivered everything the run folders hold: the runs, the selected
    run's config, processes, every metric and every log line, and the log view sized to them. A picture
    taken earlier differs from run to run on a loaded machine (a threshold such as "10 log lines" let a
    snapshot catch the merged log or the config pane half-filled)."""
    app = pilot.app
    await wait_for_fast(pilot, lambda: app.query_one(RunsPane).table.row_count == 3, what="runs")
    await wait_for_fast(pilot, lambda: len(app.query_one("#environments").environments) == 2, what="environments")
    if not select_run:
        return
    run = json.loads((run_dir(select_run) / "run.json").read_text())
    on_disk = backend.run_metrics(select_run)
    on_disk.poll()
    app.query_one(RunsPane).select(select_run)
    await wait_for_fast(pilot, lambda: app.selected_run == select_run, what="selection")
    config_head = app.query_one("#config-head", Static)
    await wait_for_fast(
        pilot, lambda: str(config_head.content).startswith(f"run {select_run} config"), what="run config"
    )
    procs = app.query_one(ProcessesPane).table
    await wait_for_fast(pilot, lambda: procs.row_count == len(run["processes"]), what="processes")
    await wait_for_fast(pilot, lambda: len(app.query_one(LogsPane).names) == len(run["processes"]), what="log tabs")
    metrics = app.query_one(MetricsPane)
    await wait_for_fast(
        pilot,
        lambda: (
            len(metrics.rows) == len(on_disk.rows) and metrics.table.row_count == len(backend.metric_keys(on_disk.rows))
        ),
        what="every metric row",
    )
    written = _log_lines_written(select_run)
    logs = app.query_one(LogsPane).view

    def logs_read():  # access lines are counted, hidden
        return logs.line_count + app.live.view.merged.hidden == written and logs.virtual_size.height == logs.line_count

    await wait_for_fast(pilot, logs_read, what=f"all {written} log lines")


async def freeze(pilot):
    """Stop live updates (the picture is settled) and anything that blinks or times out."""
    app = pilot.app
    if app.live is not None:
        app.live.stop()
        await pilot.pause(0.3)
    await pilot.pause(0.3)  # let focus settle (a pushed screen focuses its first input)
    for screen in app.screen_stack:
        for widget in screen.query(Input):
            widget.cursor_blink = False
    app.clear_notifications()
    await pilot.pause(0.3)


def make_app():
    return HermesDashboard(clock=fixed_clock, stall_after_s=0)


@pytest.fixture
def snapshot_world(tui_environments, synthetic_runs):
    return synthetic_runs


def test_dashboard_overview(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_dashboard_overview_at_100x30(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=run_before)


HEADLINE_COLUMNS = {
    # size: (runs, processes, metrics) columns that must show
    # at 160x48 the runs pane says whether each run learns and what it cost (the trend gives way first)
    (160, 48): (
        {"run", "status", "eval", "reward", "audit", "cost"},
        {"name", "state", "restarts", "exit"},
        {"last", "step"},
    ),
    (100, 30): ({"run", "status", "eval"}, {"name", "state", "restarts", "exit"}, {"metric", "last"}),
}


@pytest.mark.parametrize("size", list(HEADLINE_COLUMNS), ids=lambda s: f"{s[0]}x{s[1]}")
def test_each_pane_keeps_its_headline_columns(snapshot_world, size):
    """What the snapshots show, as assertions: the columns that give way are the ones of least news."""
    import asyncio

    runs_cols, procs_cols, metrics_cols = HEADLINE_COLUMNS[size]

    async def scenario():
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await settle(pilot, select_run="0badc0de")
            procs = app.query_one(ProcessesPane)
            await wait_for_fast(pilot, lambda: procs.table.row_count == 3, what="processes")
            await pilot.pause(0.3)
            assert runs_cols <= set(app.query_one(RunsPane).table.shown_column_keys())
            assert procs_cols <= set(procs.table.shown_column_keys())
            table = app.query_one(MetricsPane).table
            keys = [c[1] for c in table.columns]
            assert metrics_cols <= {keys[i] for i in table.shown_columns()}
            # the columns shown fit: nothing is cut at the pane's right edge
            for pane_table in (app.query_one(RunsPane).table, procs.table):
                assert pane_table.virtual_size.width <= pane_table.scrollable_content_region.width

    asyncio.run(scenario())


def test_at_80x24_a_filter_never_hides_the_row_it_selects(snapshot_world):
    """The filter line above the runs and the highlighted run's audit reason below them (a no_signal run's
    runs to three lines) leave the table its header and the selected row; the reason is cut to what fits."""
    import asyncio

    problem = {"message": "Scores are the same in a group, skipping...", "level": "warning", "count": 48}
    (run_dir("5ee5ee5e") / "health.json").write_text(json.dumps({"processes": {"env": {"problems": [problem]}}}))

    async def scenario():
        app = make_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, select_run=None)
            pane = app.query_one(RunsPane)
            await pilot.press("3", "slash", *"5ee", "enter")
            await wait_for_fast(pilot, lambda: pane.table.selected_key() == "5ee5ee5e", what="the filtered run")
            await wait_for_fast(pilot, lambda: app.query_one("#runs-health").display, what="its audit reason")
            await pilot.pause(0.3)
            table = pane.table
            assert table.row_count == 1 and table.size.height >= 2  # the header and the row
            assert table.cursor_row - table.scroll_offset.y < table.size.height - 1

    asyncio.run(scenario())


def test_environments_pane_filter_and_parse_error(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot, select_run=None)
        await pilot.press("1", "slash", *"env", "enter")
        await pilot.press("G")
        await pilot.press("z")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_config_editor_validation_locked_and_modified(snap_compare, snapshot_world):
    async def run_before(pilot):
        app = pilot.app
        await settle(pilot, select_run=None)
        await pilot.press("1", "g", "enter")
        config = app.query_one(ConfigPane)
        await wait_for_fast(pilot, lambda: config.view is not None, timeout=180, what="config probe")
        await pilot.press("2", "enter")  # the field list, then edit its first field
        app.focused.value = ""
        await pilot.press("1")  # group_size 1: invalid, message inline
        await pilot.press("down", "ctrl+u", *"16")  # batch_size 16: valid, unsaved
        await pilot.press("escape", "z")  # back on the list at batch_size, zoomed
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_processes_pane_sorted(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot, select_run="0badc0de")
        await pilot.press("4", "X", "X")  # exit code, descending
        await pilot.press("z")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_logs_pane_trainer_tab_search_marker(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await pilot.press("5", "]", "]")  # all -> api -> trainer
        logs = pilot.app.query_one(LogsPane)
        await wait_for_fast(pilot, lambda: logs._selected_name() == "trainer", what="trainer tab")
        await pilot.press("m")
        await pilot.press("slash", *"reward=0.7", "enter")
        await wait_for_fast(pilot, lambda: logs.view.match_line is not None, what="search hit")
        await pilot.press("z")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_metrics_chart(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)  # the dashboard underneath is settled before the chart covers it
        await pilot.press("6", "enter")
        await pilot.press("s")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_help_screen(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)  # the dashboard underneath is settled before the help covers it
        await pilot.press("question_mark")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_inference_screen(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot, select_run=None)
        await freeze(pilot)
        await pilot.press("t")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_rollouts_view_over_a_real_runs_rollouts(snap_compare, snapshot_world):
    shutil.copyfile(REAL_ROLLOUTS, run_dir("a1b2c3d4") / "rollouts.jsonl")

    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)
        await pilot.press("o")
        await wait_for_fast(pilot, lambda: pilot.app.screen.query_one("#rollouts-steps").row_count == 12, what="steps")
        await pilot.press("j")  # step 11, not following
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_metrics_chart_grid(snap_compare, snapshot_world):
    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)
        await pilot.press("6", "z")
        metrics = pilot.app.query_one(MetricsPane)
        grid = metrics.query_one(ChartGrid)

        def grid_drawn():  # zoomed to the screen, charts laid out for that size, subtitle counted from them
            return (
                metrics.zoomed
                and grid.display
                and grid.size.width >= SNAP_SIZE[0] - 4
                and bool(grid.series)
                and str(metrics.border_subtitle).startswith(f"charts page 1/{grid.pages} ")
            )

        await wait_for_fast(pilot, grid_drawn, what="chart grid")
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)


def test_compare_two_runs(snap_compare, snapshot_world):
    write_run_config("a1b2c3d4", 8, 5e-4)
    write_run_config("0badc0de", 4, 1e-3)

    async def run_before(pilot):
        await settle(pilot)
        await freeze(pilot)
        await pilot.press("3", "space", "G", "space", "c")
        await wait_for_fast(pilot, lambda: getattr(pilot.app.screen, "comparison", None) is not None, what="comparison")
        # the tables size their columns to the cells on an idle tick, which a loaded machine delays
        tables = pilot.app.screen.query(DataTable)
        await wait_for_fast(
            pilot, lambda: not any(t._require_update_dimensions for t in tables), what="compare table widths"
        )
        await freeze(pilot)

    assert snap_compare(make_app(), terminal_size=SNAP_SIZE, run_before=run_before)
