"""`hermes-rl compare`: the config values that differ between runs and first/best/last of their
headline metrics, over run folders as the trainer and supervisor write them."""

from __future__ import annotations

import json

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.clients import cli
from hermes_rl.core.runs.compare import compare_runs
from tests.fixtures_tui import write_run, write_run_config


@pytest.fixture
def two_runs(hermes_home):
    write_run("aaaa0001", steps=20)
    write_run("bbbb0002", steps=7, status="failed", reason="trainer exited 1")
    write_run_config("aaaa0001", 8, 5e-4)
    write_run_config("bbbb0002", 4, 5e-4)
    return ["aaaa0001", "bbbb0002"]


def test_compare_lists_only_real_config_differences_and_metric_summaries(two_runs):
    out = compare_runs(two_runs)
    assert [r["run_id"] for r in out["runs"]] == two_runs
    assert [r["steps"] for r in out["runs"]] == [20, 7]
    assert out["config_differences"] == [{"key": "env.group_size", "values": {"aaaa0001": 8, "bbbb0002": 4}}]
    reward = out["metrics"]["reward/mean"]
    assert reward["aaaa0001"]["last_step"] == 20 and reward["bbbb0002"]["last_step"] == 7
    assert reward["aaaa0001"]["best"] >= reward["aaaa0001"]["last"]
    assert out["metrics"]["train/loss"]["aaaa0001"]["best"] is None  # no direction: first and last only


def test_steps_done_are_the_trainers_even_when_the_environment_logged_the_next_step(two_runs):
    """An environment logs its train metrics under the step whose batch it is filling, so at the end of a
    run its last row can name total_steps + 1: compare and the report still say the trainer's steps."""
    from hermes_rl.core.base.fsutil import append_jsonl
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.runs.export import html_report

    append_jsonl(run_dir("aaaa0001") / "env_metrics.jsonl", {"step": 21, "time": 1.0, "train/percent_correct": 1.0})
    assert [r["steps"] for r in compare_runs(two_runs)["runs"]] == [20, 7]
    assert ">steps</span><b>20 /" in html_report("aaaa0001")


def test_compare_cli_json_text_and_bad_input(two_runs, capsys):
    assert cli.main(["compare", *two_runs, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config_differences"][0]["key"] == "env.group_size"
    assert cli.main(["compare", *two_runs]) == 0
    text = capsys.readouterr().out
    assert "env.group_size" in text and "reward/mean" in text
    with pytest.raises(BadInput):
        compare_runs(["aaaa0001"])
    assert cli.main(["compare", "aaaa0001", "cccc0003"]) == 1
    assert "no run cccc0003" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_dashboard_marks_two_runs_and_overlays_them_with_their_config_differences(two_runs):
    import asyncio
    import time

    from textual.widgets import DataTable

    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.compare import CompareScreen
    from hermes_rl.tui.panes.runs import RunsPane
    from tests.fixtures_tui import fixed_clock

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(RunsPane)
            deadline = time.monotonic() + 20
            while pane.table.row_count < 2 and time.monotonic() < deadline:
                await pilot.pause(0.1)
            await pilot.press("3", "c")  # one run is not a comparison
            assert not isinstance(app.screen, CompareScreen)
            await pilot.press("space", "j", "space")
            assert len(pane.marked) == 2 and "2 marked" in pane.border_subtitle
            await pilot.press("c")
            assert isinstance(app.screen, CompareScreen)
            screen = app.screen
            deadline = time.monotonic() + 20
            while screen.comparison is None and time.monotonic() < deadline:
                await pilot.pause(0.1)
            config = screen.query_one("#compare-config", DataTable)
            assert [str(config.get_row_at(i)[0]) for i in range(config.row_count)] == ["env.group_size"]
            assert sorted(screen.rows) == sorted(two_runs) and all(screen.rows.values())
            title = str(screen.query_one("#compare-title").render())
            assert "reward/mean" in title and "2/2 runs have it" in title
            await pilot.press("n")
            assert screen.key != "reward/mean"
            await pilot.press("escape", "space")  # unmark one
            assert len(pane.marked) == 1

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_config_pane_shows_the_selected_runs_config_read_only_without_a_selected_environment(two_runs):
    import asyncio
    import time

    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.config_editor import ConfigPane
    from tests.fixtures_tui import fixed_clock

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            head = app.query_one(ConfigPane).query_one("#config-head")
            deadline = time.monotonic() + 20
            while "config (read-only)" not in str(head.render()) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            text = str(head.render())
            assert f"run {app.selected_run} config (read-only)" in text
            assert "group_size" in text and "lora_rank 8" in text
            assert "lora_rank 8 🔒" not in text  # a training value is the run's own, not locked by the profile
            assert "rollout_server_url" not in text  # per-run plumbing is not config

    asyncio.run(scenario())
