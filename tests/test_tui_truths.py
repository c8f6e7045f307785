"""Screens that tell the truth: the header follows the selection (a CLI one too) and names the run's
environment, a starting run's age counts up, the logs status says how many lines are shown, and help
groups keys by pane."""

from __future__ import annotations

import asyncio

import pytest

from hermes_rl.core.envs.drafts import select_environment
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.logs import LogsPane
from hermes_rl.tui.widgets.dialogs import HelpScreen
from tests.fixtures_tui import FIXED_NOW, wait_for, write_run


def _header(app) -> str:
    return str(app.header.render())


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2])
def test_quitting_while_the_config_form_builds_ends_cleanly(hermes_home, tui_environments, delay):
    """A selection rebuilds the config form; quitting (or another rebuild) while its choice fields mount
    removed them mid-mount, and Textual's Select raised NoMatches out of the dashboard (CI: the test below)."""
    write_run("aaaa0001", environment="counting", steps=3)

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == "aaaa0001", what="run selected")
            select_environment("counting")
            await wait_for(pilot, lambda: app.header.environment == "counting", what="the CLI's selection")
            await asyncio.sleep(delay)  # somewhere in the form's build

    asyncio.run(scenario())  # run_test re-raises what ended the app


def test_the_header_names_the_runs_environment_and_follows_a_cli_selection(hermes_home, tui_environments):
    write_run("aaaa0001", environment="counting", steps=3)

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == "aaaa0001", what="run selected")
            await wait_for(pilot, lambda: "aaaa0001 counting" in _header(app), what="run in the header")
            assert "none selected" not in _header(app)
            select_environment("counting")  # as `hermes-rl select counting` does, from another process
            await wait_for(pilot, lambda: app.header.environment == "counting", what="the CLI's selection")
            assert "env counting" in _header(app) and app.selected_env == "counting"

    asyncio.run(scenario())


def test_a_selection_saved_where_the_dashboard_does_not_look_falls_back_to_the_default(hermes_home, tui_environments):
    (hermes_home / "rl" / "current.yaml").write_text("environment: hermes-vf-digits\nprofile: null\n")

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(
                pilot,
                lambda: any("hermes-vf-digits is not found here" in n.message for n in app._notifications),
                what="a one-line notice",
            )
            assert app.selected_env is None and "hermes-vf-digits" not in _header(app)

    asyncio.run(scenario())


def test_a_runs_age_counts_while_nothing_else_changes(hermes_home):
    now = [FIXED_NOW]
    write_run("aaaa0001", created_at=FIXED_NOW - 5)

    async def scenario():
        app = HermesDashboard(clock=lambda: now[0])
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#runs-table")
            await wait_for(pilot, lambda: table.row_count == 1, what="run listed")
            column = [c.key.value for c in table.ordered_columns].index("age")  # whichever columns show
            age = lambda: str(table.get_row_at(0)[column])  # noqa: E731
            assert age() == "5s"
            now[0] += 20
            await wait_for(pilot, lambda: age() == "25s", timeout=5, what="the age counted on")

    asyncio.run(scenario())


class _Lines:
    def __init__(self, count: int):
        self.line_count = count

    def lines(self, start: int, end: int) -> list[str]:
        return [f"line {i}" for i in range(start, min(end, self.line_count))]


def test_the_logs_status_counts_the_lines_shown(hermes_home):
    write_run("aaaa0001", logs={"trainer": "one\ntwo\n", "api": "", "env": ""})

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            logs = app.query_one(LogsPane)
            status = lambda: str(logs.query_one("#log-status").render())  # noqa: E731
            await wait_for(pilot, lambda: "lines" in status(), what="log status")
            logs.view.source = _Lines(12)  # lines reached the view without a growth message
            logs.view.update_size()
            await wait_for(pilot, lambda: status().startswith("12 lines"), timeout=5, what="the count")

    asyncio.run(scenario())


def test_help_groups_keys_by_pane_not_by_class(hermes_home):
    write_run("aaaa0001")

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.3)
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
            areas = {row[0] for row in app.screen.rows}
            assert {"everywhere", "[3] Runs", "[5] Logs"} <= areas, areas
            assert not any(area.endswith(("Dashboard", "List", "Table", "Pane", "View")) for area in areas), areas
            by_id = {row[3]: row[0] for row in app.screen.rows}
            assert by_id["run.start"] == "everywhere" and by_id["logs.follow"] == "[5] Logs"

    asyncio.run(scenario())


def test_at_80_by_24_the_runs_pane_shows_status_and_eval(hermes_home):
    write_run("aaaa0001", steps=30)
    # a run its budget ended is shown as such, not plainly completed
    budget = "budget reached: $1.02 of $1.00 (stopped at step 9)"
    write_run("aaaa0002", steps=9, created_at=FIXED_NOW - 7200, reason=budget)

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one("#runs-table")
            await wait_for(pilot, lambda: table.row_count == 2, what="runs listed")
            await pilot.pause(0.3)
            labels = [str(column.label) for column in table.columns.values()]
            assert {"run", "status", "eval"} <= set(labels), labels
            rows = {str(r[1]): [str(c) for c in r] for r in (table.get_row_at(i) for i in range(2))}
            row = rows["aaaa0001"]
            assert "completed" in row and any("↑" in cell or "." in cell for cell in row[3:]), row
            assert "completed (budget)" in rows["aaaa0002"], rows["aaaa0002"]

    asyncio.run(scenario())


def test_compare_shows_whole_numbers_at_80_columns_and_at_160(hermes_home):
    """Side by side, the config and metric tables clipped 'first → best → last' at 80 columns: under
    120 they stack, so every cell of the metric table fits its width at either size."""
    from textual.widgets import DataTable

    from hermes_rl.tui.panes.compare import CompareScreen
    from tests.fixtures_tui import write_run_config

    write_run("a1b2c3d4", steps=20, created_at=FIXED_NOW - 7200)
    write_run("0badc0de", status="failed", steps=7, created_at=FIXED_NOW - 86400)
    write_run_config("a1b2c3d4", 8, 5e-4)
    write_run_config("0badc0de", 4, 1e-3)

    async def scenario(size):
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=size) as pilot:
            table = app.query_one("#runs-table")
            await wait_for(pilot, lambda: table.row_count == 2, what="runs listed")
            await pilot.press("3", "space", "G", "space", "c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), what="compare")
            metrics = app.screen.query_one("#compare-metrics", DataTable)
            await wait_for(pilot, lambda: metrics.row_count > 2, what="metric rows")
            await pilot.pause(0.3)
            assert metrics.virtual_size.width <= metrics.content_region.width, (size, metrics.virtual_size)

    asyncio.run(scenario((80, 24)))
    asyncio.run(scenario((160, 48)))


def test_the_config_form_survives_rebuilds_in_quick_succession(hermes_home, tui_environments):
    """A load landing while the previous form still mounts (a CLI selection right after the dashboard's own)
    replaced a Select mid-mount and crashed the app; now the newest form is shown, whole."""
    from hermes_rl.tui import backend
    from hermes_rl.tui.panes.config_editor import ConfigPane

    async def scenario():
        app = HermesDashboard(clock=lambda: FIXED_NOW)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(ConfigPane)
            view = backend.get_config("counting")
            assert any(row.get("type") == "enum" for row in view.editable), "the form needs a Select to test"
            for delay in (0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05) * 3:
                pane.show(view)
                await asyncio.sleep(delay)
            await wait_for(pilot, lambda: len(pane.query(".field-row")) == len(view.editable), what="one whole form")
            await pilot.pause(0.2)
            assert len(pane.query(".field-row")) == len(view.editable)

    asyncio.run(scenario())
