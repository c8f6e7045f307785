"""The zoomed metrics pane: every metric a chart (eval accuracy from env_metrics.jsonl included),
paged when they do not fit, x by step or by wall time."""

from __future__ import annotations

import asyncio

import pytest

from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.metrics import ChartScreen, MetricsPane
from hermes_rl.tui.widgets.charts import ChartGrid, block_rows, resample
from tests.fixtures_tui import fixed_clock, wait_for, write_run


def test_block_chart_rises_with_the_values_and_spans_its_rows():
    rows, low, high = block_rows(resample([(1, 0.0), (2, 0.5), (3, 1.0)], 3), 4)
    assert (low, high) == (0.0, 1.0)
    assert rows[-1][0] != " " and rows[0][0] == " " and rows[0][2] == "█"  # low left, full right
    # a series sampled more rarely (eval every 5 steps) is drawn over the same x range as the others
    sparse = resample([(5, 0.2), (10, 0.4)], 10, x_range=(1, 10))
    assert sparse[:4] == [None] * 4 and sparse[4] == 0.2 and sparse[-1] == 0.4


@pytest.mark.timeout(120)
def test_metrics_list_scrolls_to_its_cursor_says_which_rows_it_shows_and_a_click_opens_a_chart(hermes_home):
    write_run("a1b2c3d4", steps=12)

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(120, 30)) as pilot:  # a short terminal: the metrics do not all fit
            pane = app.query_one(MetricsPane)
            table = pane.table
            await wait_for(pilot, lambda: table.row_count == 10, what="metrics")
            assert 0 < table.capacity < table.row_count and table.top == 0
            header = table.render_line(0).text
            assert f"1–{table.capacity}/10" in header
            await pilot.press("6", "G")  # the last metric: the list scrolls to show it
            assert table.cursor_row == 9 and table.top == 10 - table.capacity
            assert table.selected_key() in table.render_line(table.capacity).text
            assert f"{table.top + 1}–10/10" in table.render_line(0).text
            await pilot.press("g")
            assert table.cursor_row == 0 and table.top == 0
            second = table.keys()[1]
            await pilot.click(table, offset=(3, 2))  # the second row (the header is line 0)
            assert isinstance(app.screen, ChartScreen) and app.screen.key == second

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_zoomed_metrics_pane_is_a_grid_of_every_metric_with_paging_and_wall_time(hermes_home):
    write_run("a1b2c3d4", steps=20)

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(100, 30)) as pilot:
            pane = app.query_one(MetricsPane)
            await wait_for(pilot, lambda: pane.table.row_count > 5, what="metrics")
            await pilot.press("6", "z")
            grid = pane.query_one(ChartGrid)
            await wait_for(pilot, lambda: grid.display and grid.series, what="the chart grid")
            names = [name for name, _ in grid.series]
            assert names[0] == "reward/mean" and "eval/percent_correct" in names
            assert len(names) == pane.table.row_count
            assert grid.pages > 1  # 100x30 holds a few charts per page
            first = str(grid.render())
            assert "reward/mean" in first
            await pilot.press("right_square_bracket")
            await wait_for(pilot, lambda: grid.page == 1, what="the next page")
            assert str(grid.render()) != first
            assert "charts page 2/" in pane.border_subtitle
            await pilot.press("w")
            await wait_for(pilot, lambda: grid.wall, what="wall time")
            assert "x: wall time" in pane.border_subtitle
            await pilot.press("z")
            await wait_for(pilot, lambda: not grid.display and pane.table.display, what="the table again")

    asyncio.run(scenario())


def test_processes_pane_keeps_cpu_and_rss_trends_per_process_and_starts_anew_on_restart():
    from hermes_rl.tui.panes.processes import ProcessesPane

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(220, 60)) as pilot:  # wide enough for both trends (they give way first)
            pane = app.query_one(ProcessesPane)
            for i in range(5):
                proc = {"name": "trainer", "pid": 10, "state": "ready", "alive": True, "cpu_percent": 10.0 * i,
                        "rss": 100e6 * (1 + 0.1 * i)}  # fmt: skip
                pane.show({"run_id": "a1b2c3d4", "processes": [proc]})
            await pilot.pause(0.1)
            cells = pane.table.get_row_at(0)
            columns = list(pane.table.columns)
            cpu_trend = str(cells[columns.index("cpu_trend")])
            rss_trend = str(cells[columns.index("rss_trend")])
            assert len(cpu_trend) == 5 and cpu_trend[0] < cpu_trend[-1]  # rising CPU
            assert rss_trend[0] < rss_trend[-1]  # a leak climbs
            pane.show({"run_id": "a1b2c3d4", "processes": [{**proc, "pid": 11}]})  # restarted
            await pilot.pause(0.1)
            assert len(str(pane.table.get_row_at(0)[columns.index("cpu_trend")])) == 1

    asyncio.run(scenario())
