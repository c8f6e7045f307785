"""The dashboard driven from the keyboard over real run folders, a real supervisor and small real
processes: select an environment, edit and validate a field, save, start, watch processes, logs and
metrics appear, stop with confirmation, quit, reopen and find the run."""

from __future__ import annotations

import asyncio

import pytest
import yaml
from textual.binding import Binding
from textual.widgets import Input

from hermes_rl.core import runs
from hermes_rl.core.base.paths import drafts_dir
from hermes_rl.tui import backend
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.config_editor import ConfigPane
from hermes_rl.tui.panes.logs import LogsPane
from hermes_rl.tui.panes.metrics import ChartScreen, MetricsPane
from hermes_rl.tui.panes.processes import ProcessesPane
from hermes_rl.tui.panes.runs import RunsPane
from hermes_rl.tui.widgets.dialogs import ConfirmScreen, HelpScreen
from tests.fixtures_core import PY
from tests.fixtures_tui import fixed_clock, wait_for, write_run

pytestmark = [pytest.mark.usefixtures("run_processes_cleanup")]

CHATTY = str(__import__("pathlib").Path(__file__).parent / "procs_tui" / "chatty_trainer.py")


@pytest.fixture
def small_pipeline(monkeypatch, specs):
    """`s` starts the real supervisor over small processes instead of the training pipeline."""
    started = []

    def start_small(env_name, profile, overrides=None):
        pipeline = [
            specs.http("api"),
            specs.ProcessSpec(
                name="trainer",
                argv=[PY, CHATTY, "--run-dir", "{run_dir}", "--step-s", "0.2"],
                depends_on=[("api", "ready")],
                readiness=specs.Readiness("log", pattern=r"^ready", timeout_s=20),
                stop_timeout=3,
            ),
        ]
        run = runs.launch(pipeline, environment=env_name, profile=profile or "local", total_steps=500)
        started.append(run["run_id"])
        return run

    monkeypatch.setattr(backend, "start_run", start_small)
    return started


def table_keys(table) -> list[str]:
    return [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]


@pytest.mark.timeout(240)
def test_select_edit_start_watch_stop_quit_reopen(tui_environments, small_pipeline):
    async def scenario():
        app = HermesDashboard()
        async with app.run_test(size=(160, 48)) as pilot:
            envs = app.query_one("#environments")
            await wait_for(pilot, lambda: len(envs.environments) == 2, what="environments listed")
            broken = next(e for e in envs.environments if e.error)
            assert broken.name == "broken_env"
            # Select the environment: pane 1, first entry (good ones sort first), enter.
            await pilot.press("1", "g", "enter")
            config = app.query_one(ConfigPane)
            await wait_for(
                pilot, lambda: config.view is not None, timeout=150, what="config loaded (config_init probe)"
            )
            assert app.header.environment == "counting"
            names = [r["name"] for r in config.rows]
            assert {"group_size", "max_number", "shuffle", "temperature"} <= set(names)
            assert any(row["name"] == "max_token_length" for row in config.view.locked)
            # Pane 2 focuses the field list: a global key there is a command, never a value.
            await pilot.press("2")
            assert not isinstance(app.focused, Input)
            values = {w.id: w.value for w in config.query(Input)}
            await pilot.press("z")  # zoom, not group_size "z"
            assert app.screen.maximized is config
            await pilot.press("z")
            assert {w.id: w.value for w in config.query(Input)} == values
            # enter edits group_size: a bad value gets core.config's message inline; a good one is pending.
            await pilot.press("enter")
            field = app.focused
            assert field.id.endswith("-0") and config.rows[0]["name"] == "group_size"
            field.value = ""
            await pilot.press("1")
            await pilot.pause(0.1)
            assert "group_size must be >= 2" in str(app.query_one(f"#note-{config._generation}-0").render())
            assert config.errors and not config.pending
            await pilot.press("backspace", "4")
            await pilot.pause(0.1)
            assert config.pending == {"group_size": 4} and not config.errors
            head = str(config.query_one("#config-head").render())
            assert "1 changed from defaults (1 unsaved)" in head, head  # never "all defaults" with an edit
            # esc leaves the input on the same field; j moves to the next without editing it.
            await pilot.press("escape")
            assert not isinstance(app.focused, Input) and config.cursor == 0
            assert config.query_one(".field-row.-current").query_one(Input).id == field.id
            await pilot.press("j")
            assert config.cursor == 1 and config.pending == {"group_size": 4}
            await pilot.press("ctrl+s")
            draft = drafts_dir() / "counting.yaml"
            await wait_for(
                pilot,
                lambda: draft.exists() and yaml.safe_load(draft.read_text()).get("group_size") == 4,
                what="draft saved",
            )
            await wait_for(
                pilot,
                lambda: any(r["name"] == "group_size" and r["modified"] for r in config.rows),
                what="group_size marked modified",
            )
            # Leave the field (tab goes to the next pane) and start a run: s asks first, y confirms.
            await pilot.press("tab", "s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="start confirmation")
            # The saved edit is named, and that it stays the environment's draft for later runs.
            assert "differ from the defaults (group_size)" in app.screen.detail, app.screen.detail
            assert "later runs of it start with them too" in app.screen.detail
            await pilot.press("y")
            await wait_for(pilot, lambda: small_pipeline, what="run started")
            run_id = small_pipeline[0]
            runs_pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: app.selected_run == run_id, what="new run selected")
            procs = app.query_one(ProcessesPane)
            await wait_for(
                pilot,
                lambda: (
                    procs.run
                    and {p["name"]: p.get("state") for p in procs.run["processes"]}
                    == {"api": "ready", "trainer": "ready"}
                ),
                what="processes ready",
            )
            assert table_keys(procs.table) == ["api", "trainer"]
            logs = app.query_one(LogsPane)
            await wait_for(pilot, lambda: "trainer" in logs.names and logs.view.line_count > 3, what="log lines")
            merged = logs.view.source.lines(0, logs.view.line_count)
            assert any(line.startswith("trainer") and "step" in line for line in merged)
            assert not any("\r" in line for line in merged)  # progress bars keep their last state
            metrics = app.query_one(MetricsPane)
            await wait_for(pilot, lambda: "reward/mean" in metrics.table.keys(), what="metrics shown")
            # The chart is live: rows keep arriving while it is open (and the panes below keep updating).
            await pilot.press("6", "enter")
            assert isinstance(app.screen, ChartScreen)
            shown = len(app.screen.rows)
            await wait_for(pilot, lambda: len(app.screen.rows) > shown + 2, what="chart updates live")
            await pilot.press("escape")
            # Stop with confirmation: x asks, n keeps it running, x+y stops it.
            await pilot.press("3", "x")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("n")
            await pilot.pause(0.3)
            assert runs.get_run(run_id, sample=False)["status"] == "running"
            await pilot.press("x")
            await pilot.press("y")
            await wait_for(
                pilot, lambda: runs.get_run(run_id, sample=False)["status"] == "stopped", timeout=30, what="run stopped"
            )
            await wait_for(
                pilot,
                lambda: any(r["run_id"] == run_id and r["status"] == "stopped" for r in runs_pane.runs),
                what="runs table shows stopped",
            )
            await pilot.press("q")
        assert app.return_code == 0
        # Reopen: the run is there, with its processes and logs.
        again = HermesDashboard()
        async with again.run_test(size=(160, 48)) as pilot:
            runs_pane = again.query_one(RunsPane)
            await wait_for(pilot, lambda: run_id in table_keys(runs_pane.table), what="run listed after reopen")
            await wait_for(pilot, lambda: again.query_one(LogsPane).view.line_count > 0, what="logs after reopen")
            await pilot.press("q")

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_quit_leaves_the_run_going_and_says_so(hermes_home, specs, capfd):
    run = runs.launch([specs.sleeper("trainer")], environment="counting", profile="local")
    run_id = run["run_id"]

    async def scenario():
        app = HermesDashboard()
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == run_id, what="run selected")
            await wait_for(pilot, lambda: any(r["status"] == "running" for r in app.runs), what="running")
            await pilot.press("q")
        return app

    asyncio.run(scenario())
    assert "keep going" in capfd.readouterr().err
    assert runs.get_run(run_id, sample=False)["status"] == "running"
    runs.stop_run(run_id)


def test_keymap_file_remaps_bindings_and_help_lists_ids(hermes_home, synthetic_runs):
    (hermes_home / "rl").mkdir(exist_ok=True)
    (hermes_home / "rl" / "keymap.yaml").write_text("app.help: f1\nrun.stop: ctrl+k\nbogus: [1, 2]\n")

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(pilot, lambda: app.runs, what="runs")
            await pilot.press("question_mark")
            assert not isinstance(app.screen, HelpScreen)  # remapped away
            await pilot.press("f1")
            assert isinstance(app.screen, HelpScreen)
            ids = {row[3] for row in app.screen.rows}
            assert {"app.quit", "run.start", "run.stop", "pane.1", "logs.follow", "procs.sort.cpu", "nav.down"} <= ids
            keys = {row[3]: row[1] for row in app.screen.rows}
            assert keys["run.stop"] == app.get_key_display(Binding("ctrl+k", ""))
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.selected_run == "5ee5ee5e", what="newest run selected")
            await pilot.press("ctrl+k")  # the remapped stop: this run is already stopped, so it says so
            await wait_for(
                pilot,
                lambda: any("already stopped" in n.message for n in app._notifications),
                what="stop via remapped key",
            )

    asyncio.run(scenario())


def test_every_binding_has_an_id():
    import importlib
    import inspect
    import pkgutil

    from textual.binding import Binding

    import hermes_rl.tui as tui

    missing = []
    for info in pkgutil.walk_packages(tui.__path__, "hermes_rl.tui."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if not cls.__module__.startswith("hermes_rl.tui."):
                continue
            for binding in cls.__dict__.get("BINDINGS", []):
                if isinstance(binding, Binding) and not binding.id:
                    missing.append(f"{cls.__name__}:{binding.key}")
                elif not isinstance(binding, Binding):
                    missing.append(f"{cls.__name__}:{binding}")
    assert not missing


def test_navigation_filter_sort_chart_and_notifications(hermes_home, synthetic_runs):
    from hermes_rl.core.base.fsutil import append_jsonl
    from hermes_rl.core.base.paths import run_dir

    # The environment's last row names the step after the trainer's last (it fills the next batch's groups):
    # the metrics pane still says the run is at the trainer's step.
    append_jsonl(run_dir("a1b2c3d4") / "env_metrics.jsonl", {"step": 21, "time": 1.0, "train/percent_correct": 0.5})

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: pane.table.row_count == 3, what="runs")
            assert table_keys(pane.table) == synthetic_runs  # newest first
            # the latest eval accuracy and its direction (a1b2c3d4 evaluated 0.25 at step 5, 0.85 at 20);
            # the metrics pane names where it started
            assert str(pane.table.get_cell("a1b2c3d4", "eval")) == "0.85↑"
            await pilot.press("3", "j")
            await wait_for(pilot, lambda: app.selected_run == "a1b2c3d4", what="j selects the next run")
            metrics_pane = app.query_one(MetricsPane)
            await wait_for(
                pilot, lambda: "eval 0.85 (from 0.25)" in str(metrics_pane.border_subtitle), what="eval in metrics"
            )
            assert str(metrics_pane.border_subtitle).startswith("step 20 · eval"), metrics_pane.border_subtitle
            await pilot.press("G")
            await wait_for(pilot, lambda: app.selected_run == "0badc0de", what="G goes to the last run")
            await pilot.press("R")  # sort by reward, ascending
            rewards = [r.get("reward_mean") for r in pane._visible()]
            assert rewards == sorted(rewards)
            await pilot.press("slash")
            await pilot.press(*"fail")
            await pilot.pause(0.1)
            assert table_keys(pane.table) == ["0badc0de"]
            await pilot.press("escape")
            # Metrics of the selected run; enter opens the chart; l toggles log-y, s smoothing.
            metrics = app.query_one(MetricsPane)
            await wait_for(pilot, lambda: metrics.table.row_count > 5, what="metrics")
            await pilot.press("6", "enter")
            assert isinstance(app.screen, ChartScreen)
            key = app.screen.key
            await pilot.press("l", "s", "right")
            assert app.screen.log_y and app.screen.key != key
            await pilot.press("escape")
            # A run that fails while we watch raises a notification (a running run that ends: a final state
            # is never rewritten, and the listing re-reads finished runs only every FINAL_RECHECK_S).
            live = dict(steps=3, profile="tinker", environment="gsm8k", created_at=fixed_clock() - 60)
            write_run("f00dfeed", status="running", **live)
            await wait_for(pilot, lambda: any(r["run_id"] == "f00dfeed" for r in app.runs), what="running run listed")
            write_run("f00dfeed", status="failed", reason="env exited 2", **live)
            await wait_for(
                pilot,
                lambda: any("f00dfeed" in n.message and "failed" in n.message for n in app._notifications),
                what="failure notification",
            )

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_a_starting_run_shows_the_problem_of_the_process_it_waits_on(hermes_home):
    """An environment stuck in its setup logs a warning and never becomes ready (its readiness timeout is
    minutes away): the runs pane marks the run and says what that process logged, not a bare `starting`."""
    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    stuck = (
        "import time; print('2026-12-06 10:00:00,000 WARNING reasoning_gym: the base_conversion generator has not "
        "returned its items in 30 s', flush=True); time.sleep(3600)"
    )
    spec = ProcessSpec(name="env", argv=[PY, "-c", stuck], readiness=Readiness("log", pattern="^ready", timeout_s=300))
    run_id = runs.launch([spec], environment="counting", profile="local")["run_id"]
    try:

        async def scenario():
            app = HermesDashboard()
            async with app.run_test(size=(160, 40)) as pilot:
                pane = app.pane(RunsPane)
                line = app.query_one("#runs-health")
                await wait_for(
                    pilot,
                    lambda: "env not ready yet" in str(line.render()) and "base_conversion" in str(line.render()),
                    timeout=30,
                    what="the waiting process's problem under the runs table",
                )
                row = str(pane.table.get_row(run_id))
                assert "⚠" in row and "starting" in row, row
                assert "hermes-rl logs" in str(line.render())  # the tip

        asyncio.run(scenario())
    finally:
        runs.stop_run(run_id)


@pytest.mark.timeout(120)
def test_stall_warning_in_header_for_a_silent_running_run(hermes_home, specs, capfd):
    run = runs.launch([specs.sleeper("trainer")], environment="counting", profile="local")
    run_id = run["run_id"]

    async def scenario():
        app = HermesDashboard(stall_after_s=1.5)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: any(r["status"] == "running" for r in app.runs), what="running")
            # The sleeper printed one line at start and nothing since: after 1.5 s the run is stalled.
            await wait_for(pilot, lambda: app.header.stalled == [run_id], timeout=15, what="stall warning")
            assert "stalled" in str(app.header.render())
            assert "stalled" in str(app.pane(RunsPane).table.get_row(run_id))
            await pilot.press("q")
        return app

    asyncio.run(scenario())
    said = capfd.readouterr().err
    assert "keep going" in said and run_id in said  # quitting says the run goes on ...
    assert runs.get_run(run_id, sample=False)["status"] == "running"  # ... and it does
    runs.stop_run(run_id)


def test_palette_opens_a_run_and_new_environment_files_appear(tui_environments, synthetic_runs, tmp_path):
    from hermes_rl.core.base.paths import user_environments_dir
    from hermes_rl.core.envs import envsettings
    from hermes_rl.tui.palette import HermesCommands
    from tests.fixtures_tui import TUI_ENV_SOURCE

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.pane(RunsPane).table.row_count == 3, what="runs")
            await wait_for(pilot, lambda: len(app.environments) == 2, what="environments")
            await pilot.press("colon")
            await pilot.press(*"open run 0badc0de")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.selected_run == "0badc0de", what="palette opened the run")
            # A new environment file is picked up by the file watcher, no restart needed.
            (user_environments_dir() / "later_env.py").write_text(
                TUI_ENV_SOURCE.replace('name = "counting"', 'name = "later_env"')
            )
            await wait_for(
                pilot,
                lambda: any(e.name == "later_env" for e in app.environments),
                timeout=15,
                what="new environment listed",
            )
            # A folder saved after the dashboard opened (no watcher on it): the palette's rescan finds it.
            saved = tmp_path / "saved_later"
            saved.mkdir()
            (saved / "saved_env.py").write_text(TUI_ENV_SOURCE.replace('name = "counting"', 'name = "saved_env"'))
            envsettings.add("folders", str(saved))
            await pilot.press("colon")
            await pilot.press(*"rescan environments")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await wait_for(
                pilot,
                lambda: any(e.name == "saved_env" for e in app.environments),
                timeout=15,
                what="rescanned environment listed",
            )
            # Every action a key has is in the palette, by what it does ("compare" finds c in the runs pane).
            names = [name for name, _, _ in HermesCommands(app.screen)._commands()]
            assert any(name.startswith("Compare marked (") and name.endswith(": c)") for name in names), names
            assert any(name.startswith("Restart process (") for name in names), names

    asyncio.run(scenario())


def test_resume_action_reports_why_and_the_runs_list_shows_the_chain(hermes_home, synthetic_runs):
    import json

    from hermes_rl.core.base.paths import run_dir

    record = run_dir("0badc0de") / "run.json"
    record.write_text(json.dumps(json.loads(record.read_text()) | {"parent_run_id": "a1b2c3d4"}))

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.pane(RunsPane).table.row_count == 3, what="runs")
            assert "counting ↳ a1b2c3d4" in str(app.pane(RunsPane).table.get_row("0badc0de"))
            app.selected_run = "5ee5ee5e"  # stopped, but it saved no training state
            app.action_resume_run()
            await wait_for(
                pilot,
                lambda: any("saved no training state" in n.message for n in app._notifications),
                what="the reason the run cannot be resumed",
            )

    asyncio.run(scenario())


@pytest.mark.timeout(300)
def test_inference_screen_shows_each_models_result_as_it_arrives(arith_env, openai_stub):
    """The test-inference screen over core.runs.trial, against a local OpenAI-protocol server."""
    from textual.widgets import DataTable, Input

    from hermes_rl.tui.panes.inference import InferenceScreen

    async def scenario():
        app = HermesDashboard()
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_env == arith_env, what="selection loaded")
            await pilot.press("t")
            screen = app.screen
            assert isinstance(screen, InferenceScreen)
            screen.query_one("#inf-steps", Input).value = "1"
            screen.query_one("#inf-models", Input).value = "always-right, always-wrong"
            screen.query_one("#inf-url", Input).value = openai_stub.base_url
            await pilot.press("ctrl+r")
            table = screen.query_one(DataTable)

            def cell(model, column):
                return str(table.get_cell(model, column)) if model in screen.models else ""

            # The first model's result shows while the second is still waiting or running.
            await wait_for(pilot, lambda: cell("always-right", "status") == "done", timeout=200, what="first result")
            assert cell("always-wrong", "status") in ("waiting", "running")
            assert cell("always-right", "accuracy") == "100.0%"
            await wait_for(pilot, lambda: cell("always-wrong", "status") == "done", timeout=200, what="second result")
            assert cell("always-wrong", "accuracy") == "0.0%"
            await pilot.press("escape")
            assert not isinstance(app.screen, InferenceScreen)

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_restart_one_process_from_the_processes_pane_with_confirmation(hermes_home, specs):
    run = runs.launch(
        [specs.sleeper("api"), specs.sleeper("trainer", stop_timeout=3)], environment="counting", profile="local"
    )
    run_id = run["run_id"]

    def proc(name: str) -> dict:
        return next(p for p in runs.get_run(run_id, sample=False)["processes"] if p["name"] == name)

    async def scenario():
        app = HermesDashboard(run_id=run_id)
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one(ProcessesPane)
            await wait_for(
                pilot,
                lambda: (
                    app.selected_run == run_id
                    and pane.table.row_count == 2
                    and all(p.get("state") == "ready" for p in (pane.run or {}).get("processes", []))
                ),
                what="both processes running",
            )
            api_pid, trainer_pid = proc("api")["pid"], proc("trainer")["pid"]
            await pilot.press("4")
            while pane.table.selected_key() != "trainer":
                await pilot.press("j")
            # r asks first; n declines and nothing restarts.
            await pilot.press("r")
            assert isinstance(app.screen, ConfirmScreen) and "trainer" in app.screen.question
            await pilot.press("n")
            await pilot.pause(0.5)
            assert proc("trainer")["pid"] == trainer_pid and proc("trainer")["restarts"] == 0
            # r, y: the supervisor restarts the trainer (new pid, one restart); the api keeps running.
            await pilot.press("r")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await wait_for(
                pilot,
                lambda: any("trainer restarted" in n.message for n in app._notifications),
                timeout=30,
                what="restart notification",
            )
            after = proc("trainer")
            assert after["pid"] != trainer_pid and after["restarts"] == 1 and after["state"] in ("starting", "ready")
            assert proc("api")["pid"] == api_pid and proc("api")["restarts"] == 0
            # The processes pane shows the new pid and the restart count.
            await wait_for(
                pilot,
                lambda: str(pane.table.cell("trainer", "pid")) == str(after["pid"]),
                what="new pid in the processes pane",
            )
            assert str(pane.table.cell("trainer", "restarts")) == "1"
            assert {"pid", "restarts"} <= set(pane.table.shown_column_keys())
            # Restarting a process of a finished run says why it cannot, without a traceback.
            runs.stop_run(run_id)
            app.confirm_restart_process(run_id, "trainer")
            await pilot.pause(0.1)
            await pilot.press("y")
            await wait_for(
                pilot,
                lambda: any("cannot restart trainer" in n.message for n in app._notifications),
                what="refusal for a stopped run",
            )

    asyncio.run(scenario())


def test_the_dashboard_door_opens_core_lazily():
    """tui/backend.py is the one door into core (an import-linter contract in pyproject.toml says so); it
    imports core beyond core.base only inside its functions, so the first frame does not wait for core."""
    import ast
    from pathlib import Path

    import hermes_rl.tui as tui

    tree = ast.parse((Path(tui.__file__).parent / "backend.py").read_text())
    eager = [
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("hermes_rl.core")
        and not (node.module or "").startswith("hermes_rl.core.base")
    ]
    assert not eager, eager


def test_a_failing_worker_is_reported_once_as_one_line(hermes_home, synthetic_runs, monkeypatch):
    """Workers do not catch errors themselves: the app's one handler shows what failed and why."""
    from hermes_rl.core.base.errors import BadInput

    def refuse(env_name):
        raise BadInput(f"no draft for {env_name}", hint="select it first")

    monkeypatch.setattr(backend, "reset_draft", refuse)

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(140, 40)) as pilot:
            app.reset_config("counting")
            await wait_for(
                pilot,
                lambda: any("cannot reset the draft" in n.message for n in app._notifications),
                what="failure toast",
            )
            said = [n.message for n in app._notifications if "cannot reset the draft" in n.message]
            assert said == ["cannot reset the draft: no draft for counting (select it first)"]

    asyncio.run(scenario())
