"""The hermes-rl dashboard: environments, config, runs, processes, logs and metrics in one screen.

It is a view over core, reached through tui/backend.py: it never owns a run; quitting leaves every
run going. The panes (tui/panes/) post messages that the app handles here; all slow work (config_init
probes, starting and stopping runs, psutil sampling, reads of whole files) happens in workers, whose
failures all reach the user through `on_worker_state_changed`. Live updates come from one background
loop (tui/live.py), one batch per cycle.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.base.paths import cli_command
from hermes_rl.core.base.states import FINAL, RECORDED_FINAL, STEP_PHASES, STEP_TIME, RunStatus

from . import backend
from .format import UntrustedTextFilter, cost_cell, error_line, estimate_summary
from .keymap import keymap_path, load_keymap
from .palette import HermesCommands
from .panes.config_editor import ConfigPane
from .panes.environments import EnvironmentsPane
from .panes.logs import LogsPane
from .panes.metrics import ChartScreen, MetricsPane
from .panes.processes import ProcessesPane
from .panes.runs import RunsPane
from .panes.step_time import StepTimeScreen
from .textual_compat import add_line_filter, background_screens, shutting_down
from .widgets.dialogs import ConfirmScreen, HelpScreen, binding_rows
from .widgets.header import HeaderBar

if TYPE_CHECKING:
    from .live import LiveUpdater


def live_handler(method):
    """Live updates may still arrive while the app shuts down and its panes are gone: drop them."""

    @functools.wraps(method)
    def wrapper(self, message):
        try:
            return method(self, message)
        except NoMatches:
            if shutting_down(self):
                return None  # widgets are being removed
            raise

    return wrapper


# How a run's end is announced: failures as errors, the rest as information.
END_SEVERITY = {RunStatus.FAILED: "error", RunStatus.LOST: "error"}
PANES = ("environments", "config", "runs", "processes", "logs", "metrics")
# The dashboard's own keys: on any other screen (the inference or rollouts screen, a dialog, the palette,
# also while it is still opening and nothing there has focus yet) what is typed is that screen's, never these.
NARROW_COLUMNS = 100  # below this width the top row's panes shrink to their narrow minimums (app.tcss)
START_SUMMARY_FIELDS = ("total_steps", "learning_rate", "lora_rank", "group_size", "batch_size")
DASHBOARD_ONLY_ACTIONS = {"start_run", "stop_run", "test_inference", "rollouts", "zoom", "filter", "focus_pane"}


class HermesDashboard(App):
    TITLE = "hermes-rl"
    CSS_PATH = Path(__file__).parent / "app.tcss"  # absolute: subclasses elsewhere (bench, tests) find it
    COMMANDS = {HermesCommands}
    COMMAND_PALETTE_BINDING = "ctrl+p"
    exit_deadline_s: float | None = None  # set by run_dashboard: quit then ends the process by this deadline
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("colon", "command_palette", "Commands", id="app.palette"),
        Binding("slash", "filter", "Filter/search", id="app.filter"),
        Binding("tab", "next_pane", "Next pane", show=False, priority=True, id="pane.next"),
        Binding("shift+tab", "prev_pane", "Prev pane", show=False, priority=True, id="pane.prev"),
        *[
            Binding(str(n), f"focus_pane({n})", f"Pane {n}: {name}", show=False, id=f"pane.{n}")
            for n, name in enumerate(PANES, 1)
        ],
        Binding("s", "start_run", "Start run", id="run.start"),
        Binding("x", "stop_run", "Stop run", id="run.stop"),
        Binding("t", "test_inference", "Test inference", id="app.inference"),
        Binding("z", "zoom", "Zoom pane", id="app.zoom"),
        Binding("o", "rollouts", "Rollouts", id="app.rollouts"),
    ]

    def __init__(
        self,
        *,
        run_id: str | None = None,
        clock=time.time,
        live: bool = True,
        stall_after_s: float | None = None,
        sample_hz: float = 1.0,
    ):
        super().__init__()
        add_line_filter(self, UntrustedTextFilter())
        self.clock = clock
        self.initial_run_id = run_id
        self.live_enabled = live
        self.stall_after_s = stall_after_s  # None: core.runs' threshold ($HERMES_RL_STALL_S, default 900 s)
        self.sample_hz = sample_hz
        self.environments: list = []
        self.runs: list[dict] = []
        self.selected_run: str | None = None
        self.selected_env: str | None = None
        self._statuses: dict[str, str] = {}
        self.live = None
        self.closing = False  # set at quit/unmount: a first frame that comes later starts no live thread
        self.first_frame_at: float | None = None
        self._selection_seen: tuple | None = None  # the selection file as last seen (backend.selection_signature)

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HeaderBar(self.clock, id="header")
        with Horizontal(id="top"):
            yield EnvironmentsPane(id="environments", classes="pane")
            yield ConfigPane(id="config", classes="pane")
            yield RunsPane(self.clock, id="runs", classes="pane")
        with Horizontal(id="middle"):
            yield ProcessesPane(id="processes", classes="pane")
            yield MetricsPane(id="metrics", classes="pane")
        yield LogsPane(id="logs", classes="pane")
        yield Footer()

    @property
    def _background_screens(self) -> list:
        """Screens that show through the top one: none under a full (opaque) screen such as the rollouts
        view, so the dashboard it covers is not composited on each live update (tui/textual_compat)."""
        return background_screens(self)

    def pane(self, selector, expect_type=None):
        """A widget of the dashboard screen, whatever screen (help, chart, dialog) is on top of it."""
        if not self.screen_stack:  # shutting down: callers treat it as a widget already gone
            raise NoMatches(f"no screen to find {selector!r} on")
        main = self.screen_stack[0]
        return main.query_one(selector, expect_type) if expect_type else main.query_one(selector)

    @property
    def header(self) -> HeaderBar:
        return self.pane(HeaderBar)

    def on_resize(self, event) -> None:
        if self.screen_stack:
            self.screen_stack[0].set_class(event.size.width < NARROW_COLUMNS, "-narrow")

    def on_mount(self) -> None:
        keymap, problem = load_keymap()
        if keymap:
            self.set_keymap(keymap)
        if problem:
            self.notify(problem, severity="warning")
        header = self.header
        header.keys = backend.keys_present()
        self.set_interval(5.0, header.update_text)  # the clock shows minutes
        self._selection_seen = backend.selection_signature()
        self.set_interval(1.0, self._follow_selection)
        self.pane("#runs RunsTable").focus()
        self.screen.set_class(self.size.width < NARROW_COLUMNS, "-narrow")
        # Paint the first frame before the workers start competing for the GIL.
        self.call_after_refresh(self._first_frame)

    def _first_frame(self) -> None:
        if self.closing:  # quit before the first frame: a live thread started now would never be stopped
            return
        self.first_frame_at = time.perf_counter()
        self._load_start_state()
        if self.live_enabled and self.live is None:
            from .live import LiveUpdater

            self.live = LiveUpdater(self, sample_hz=self.sample_hz, stall_after_s=self.stall_after_s, clock=self.clock)
            self._live_worker()

    @work(thread=True, exclusive=True, group="live", exit_on_error=False, description="live updates stopped")
    def _live_worker(self) -> None:
        self.live.run()

    @work(thread=True, group="load", exit_on_error=False, description="cannot load the selection")
    def _load_start_state(self) -> None:
        selection = backend.current_selection()
        try:
            profile, _notice = backend.resolve_profile(selection.get("profile"))
            profile_name, default_env = profile.name, profile.default_environment
        except Exception:  # a bad profile must not keep the dashboard from opening: the header shows "?"
            profile_name, default_env = selection.get("profile") or "local", None
        try:
            environments = backend.discover_environments()
        except HermesError as exc:  # still open, with no environments listed
            environments = []
            self.call_from_thread(self.notify, error_line(exc), severity="error")
        self.call_from_thread(self._start_state, selection, profile_name, environments, default_env)

    def _start_state(self, selection: dict, profile_name: str, environments: list, default_env: str | None) -> None:
        self.header.profile = profile_name
        self.selected_env = selection.get("environment")
        known = {key for e in environments for key in (e.id, e.name, *e.aliases)}
        if self.selected_env and environments and self.selected_env not in known:
            # saved where this dashboard does not look (an interpreter only another shell named): the default
            self.notify(
                f"the selected environment {self.selected_env} is not found here; showing the default "
                f"{default_env} (`hermes-rl envs --add-python/--add-folder` saves where it lives)",
                severity="warning",
                timeout=8,
            )
            self.selected_env = None
        self.header.environment = self.selected_env
        self.header.update_text()
        self.environments = environments
        self.pane(EnvironmentsPane).show(environments, self.selected_env)
        if self.selected_env:
            self.load_config(self.selected_env)
        else:
            self.pane(ConfigPane).show_unselected(default_env, profile_name)
            if self.selected_run:
                self._run_config_worker(self.selected_run)

    async def action_quit(self) -> None:
        self.closing = True
        if self.exit_deadline_s:
            _exit_by_deadline(self.exit_deadline_s, self)
        if self.live is not None:
            self.live.stop()
        active = [r["run_id"] for r in self.runs if r.get("status") not in FINAL]
        if active:
            cli = cli_command()
            message = (
                f"Dashboard closed. {len(active)} run(s) keep going: {', '.join(active)}. "
                f"Reopen with `{cli}`; stop with `{cli} stop {active[0] if len(active) == 1 else 'RUN_ID'}`."
            )
        else:
            message = "Dashboard closed. No run is active."
        self.exit(message=message)

    def on_unmount(self) -> None:
        self.closing = True
        if self.live is not None:
            self.live.stop()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self._report_failure(event.worker)

    def on_logs_pane_work_failed(self, message: LogsPane.WorkFailed) -> None:
        self._report_failure(message.worker)

    def _report_failure(self, worker: Worker) -> None:
        """Every worker's failure reaches the user here, as one line: what failed (the worker's
        description) and why (the error's message and hint)."""
        self.notify(f"{worker.description}: {error_line(worker.error)}", severity="error", timeout=10)

    # -- panes and focus --------------------------------------------------------------------------
    def _pane_target(self, index: int):
        pane = self.pane(f"#{PANES[index - 1]}")
        targets = {1: "EnvList", 3: "RunsTable", 4: "ProcessTable", 5: "LogView", 6: "MetricsTable"}
        return pane, targets.get(index)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in DASHBOARD_ONLY_ACTIONS and self.screen_stack and self.screen is not self.screen_stack[0]:
            return False
        return True

    def action_focus_pane(self, index: int) -> None:
        if self.screen is not self.screen_stack[0]:
            return
        pane, target = self._pane_target(index)
        if target is None:
            pane.focus_first()
        else:
            pane.query_one(target).focus()

    def _current_pane(self) -> int:
        node = self.focused
        while node is not None:
            if node.id in PANES:
                return PANES.index(node.id) + 1
            node = node.parent
        return 0

    def action_next_pane(self) -> None:
        if self.screen is not self.screen_stack[0]:
            self.screen.focus_next()
            return
        self.action_focus_pane(self._current_pane() % len(PANES) + 1)

    def action_prev_pane(self) -> None:
        if self.screen is not self.screen_stack[0]:
            self.screen.focus_previous()
            return
        current = self._current_pane() or 1
        self.action_focus_pane((current - 2) % len(PANES) + 1)

    def action_filter(self) -> None:
        pane = self._current_pane()
        target = {1: EnvironmentsPane, 3: RunsPane, 5: LogsPane}.get(pane)
        if target is None:
            # Filter the runs from anywhere else; the logs pane searches.
            target = RunsPane
        self.pane(target).start_filter()

    def action_zoom(self) -> None:
        screen = self.screen
        if screen is not self.screen_stack[0]:
            return
        if screen.maximized is not None:
            screen.minimize()
            return
        pane = self._current_pane()
        if pane:
            screen.maximize(self.pane(f"#{PANES[pane - 1]}"), container=False)

    def action_help(self) -> None:
        note = (
            f"Remap any key by its binding id in {keymap_path()} (YAML, e.g. `run.start: ctrl+r`). "
            "Digits/letters typed into a field go to the field: press esc first."
        )
        self.push_screen(HelpScreen(binding_rows(self), note))

    def on_live_updater_batch(self, batch: LiveUpdater.Batch) -> None:
        """One live cycle's updates, handled in one go (one frame): each by its own handler below."""
        for message in batch.updates:
            getattr(self, message.handler_name)(message)

    # -- environments and config ----------------------------------------------------------------
    @live_handler
    def on_live_updater_environments_changed(self, message: LiveUpdater.EnvironmentsChanged) -> None:
        self.environments = message.environments
        self.pane(EnvironmentsPane).show(message.environments)

    def action_rescan_environments(self) -> None:
        """Discover again now: environments added where no folder was watched (a folder made or saved
        since, a taskset installed into an environment interpreter) show up."""
        self.live.rescan_environments()
        self.notify("rescanning environments…", timeout=2)

    def on_environments_pane_selected(self, message: EnvironmentsPane.Selected) -> None:
        self.choose_environment(message.name)

    @work(
        thread=True,
        exclusive=True,
        group="select-env",
        exit_on_error=False,
        description="cannot select the environment",
    )
    def choose_environment(self, name: str, profile: str | None = None) -> None:
        selected = backend.select_environment(name, profile)
        if selected.get("notice"):  # where it lives was saved for every client
            self.call_from_thread(self.notify, selected["notice"], timeout=6)
        self.call_from_thread(self._environment_chosen, name)

    def choose_profile(self, profile: str) -> None:
        if not self.selected_env:
            self.notify("select an environment first", severity="warning")
            return
        self.choose_environment(self.selected_env, profile)

    def _follow_selection(self) -> None:
        """A selection made elsewhere (`hermes-rl select`, an agent's tool) shows here too: the header,
        the environments pane and the config follow it."""
        seen = backend.selection_signature()
        if seen == self._selection_seen or self.closing:
            return
        self._selection_seen = seen
        selection = backend.current_selection()
        env, profile = selection.get("environment"), selection.get("profile")
        if profile and profile != self.header.profile:
            self.header.profile = profile
            self.header.update_text()
            if env and env == self.selected_env:
                self.load_config(env)  # the same environment under another profile: other defaults
        if env and env != self.selected_env:
            self._environment_chosen(env)

    def _environment_chosen(self, name: str) -> None:
        self.selected_env = name
        self.header.environment = name
        self.header.update_text()
        envs = self.pane(EnvironmentsPane)
        envs.selected = name
        envs.show(self.environments)
        self.load_config(name)
        self.notify(f"selected {name}", timeout=2)

    def load_config(self, name: str) -> None:
        self.pane(ConfigPane).load(name)

    @live_handler
    def on_config_pane_loaded(self, message: ConfigPane.Loaded) -> None:
        self.header.profile = message.view.profile
        self.header.update_text()

    def on_config_pane_save_requested(self, _message: ConfigPane.SaveRequested) -> None:
        self.save_config()

    def on_config_pane_reset_requested(self, message: ConfigPane.ResetRequested) -> None:
        self.reset_config(message.environment)

    def save_config(self, then_start: bool = False) -> None:
        pane = self.pane(ConfigPane)
        pending, errors = pane.unsaved()
        if errors:
            name, error = next(iter(errors.items()))
            self.notify(f"fix {name} first: {error}", severity="error")
            return
        if not pending:
            if then_start:
                self._start(pane.environment, None)
            else:
                self.notify("nothing to save", timeout=2)
            return
        self._save(pane.environment, pane.profile, pending, then_start)

    @work(thread=True, exclusive=True, group="config-save", exit_on_error=False, description="not saved")
    def _save(self, env: str, profile: str | None, pending: dict, then_start: bool) -> None:
        result = backend.set_fields(pending, env, profile)
        changed = ", ".join(f"{k}={v['value']!r}" for k, v in result.get("changed", {}).items())
        said = f"{env}'s draft saved: {changed} (later runs of it start with these values)"
        self.call_from_thread(self.notify, said, timeout=4)
        self.call_from_thread(self.load_config, env)
        if then_start:
            self.call_from_thread(self._start, env, None)

    @work(thread=True, exclusive=True, group="config-save", exit_on_error=False, description="cannot reset the draft")
    def reset_config(self, env: str) -> None:
        backend.reset_draft(env)
        self.call_from_thread(self.load_config, env)

    # -- runs --------------------------------------------------------------------------------------
    def action_start_run(self) -> None:
        pane = self.pane(ConfigPane)
        env = pane.environment or self.selected_env
        if not env:
            self.notify("select an environment first: [1], then enter", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.save_config(then_start=True)

        pending = pane.unsaved()[0] if pane.view is not None and pane.view.environment == env else {}

        def estimated() -> str:  # what the run would cost: the values _start resolves (edits saved first)
            return estimate_summary(backend.estimate_start(env, None, pending))

        self.push_screen(
            ConfirmScreen(
                f"Start a run of {env}?",
                self._start_summary(pane, env),
                more=estimated,
                more_waiting="estimating its tokens and cost…",
            ),
            answered,
        )

    def _start_summary(self, pane: ConfigPane, env: str) -> str:
        """What `s` would start: the profile and the training values (unsaved edits included)."""
        view = pane.view if pane.view is not None and pane.view.environment == env else None
        if view is None:
            return f"profile {self.header.profile or '?'} · the environment's saved config · a new run's processes"
        pending, _errors = pane.unsaved()
        values = {**view.values(), **pending}
        shown = [f"{k} {values[k]}" for k in START_SUMMARY_FIELDS if values.get(k) is not None]
        defaults = {row["name"]: row.get("default") for row in view.editable}
        edited = sorted(k for k, v in values.items() if k in defaults and v != defaults[k])
        draft = ""
        if edited:  # the draft outlives this run: said here, so it is never silently every later run's default
            unsaved = f"{len(pending)} unsaved, saved first; " if pending else ""
            draft = (
                f"\n{len(edited)} value(s) differ from the defaults ({', '.join(edited[:4])}"
                f"{', …' if len(edited) > 4 else ''}): {unsaved}kept as {env}'s draft, so later runs of it "
                "start with them too (ctrl+d in [2] resets)"
            )
        return f"profile {view.profile} · " + " · ".join(shown) + draft

    def _start(self, env: str | None, profile: str | None) -> None:
        self.notify(f"starting {env}…", timeout=2)
        self._start_worker(env, profile)

    @work(thread=True, group="start-run", exit_on_error=False, description="cannot start")
    def _start_worker(self, env: str | None, profile: str | None) -> None:
        run = backend.start_run(env, profile)
        self.call_from_thread(self._started, run)

    def _started(self, run: dict) -> None:
        run_id = run.get("run_id")
        self.notify(f"run {run_id} started ({run.get('environment')}, {run.get('profile')})")
        self.initial_run_id = run_id  # select it as soon as the list shows it
        if self.live is not None:
            self.live.poke()

    def action_resume_run(self) -> None:
        """A new run continuing the selected ended run from its saved state (core.runs.resume_run)."""
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        self.notify(f"resuming {run_id}…", timeout=2)
        self._resume_worker(run_id)

    @work(thread=True, group="start-run", exit_on_error=False, description="cannot resume")
    def _resume_worker(self, run_id: str) -> None:
        run = backend.resume_run(run_id)
        self.call_from_thread(self._started, run)

    def _cursor_run(self) -> str | None:
        """The run under the runs pane's cursor: what the user sees chosen, even when a key moved the
        cursor a moment ago and the panes below have not caught up (selected_run follows by message)."""
        try:
            return self.pane(RunsPane).table.selected_key() or self.selected_run
        except NoMatches:
            return self.selected_run

    def action_stop_run(self) -> None:
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        run = next((r for r in self.runs if r["run_id"] == run_id), {})
        if run.get("status") in RECORDED_FINAL:  # a lost run can still be stopped (its leftovers)
            self.notify(f"run {run_id} is already {run.get('status')}", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop_worker(run_id)

        detail = (
            f"{run.get('environment', '')} · {run.get('status', '')} · "
            "its processes get SIGTERM, then SIGKILL after their timeout"
        )
        self.push_screen(ConfirmScreen(f"Stop run {run_id}?", detail), answered)

    @work(thread=True, group="stop-run", exit_on_error=False, description="cannot stop the run")
    def _stop_worker(self, run_id: str) -> None:
        self.call_from_thread(self.notify, f"stopping {run_id}…", timeout=2)
        result = backend.stop_run(run_id)
        self.call_from_thread(self.notify, f"run {run_id}: {result.get('status', RunStatus.STOPPED)}")
        if self.live is not None:
            self.live.poke()

    def on_processes_pane_restart_requested(self, message: ProcessesPane.RestartRequested) -> None:
        self.confirm_restart_process(message.run_id, message.name)

    def confirm_restart_process(self, run_id: str | None, name: str) -> None:
        if not run_id:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._restart_worker(run_id, name)

        self.push_screen(
            ConfirmScreen(
                f"Restart {name} of run {run_id}?",
                "the supervisor stops its process group and starts it again; the other processes keep running",
            ),
            answered,
        )

    @work(thread=True, group="restart", exit_on_error=False, description="cannot restart the process")
    def _restart_worker(self, run_id: str, name: str) -> None:
        self.call_from_thread(self.notify, f"restarting {name} of {run_id}…", timeout=2)
        run = backend.restart_process(run_id, name)
        proc = next((p for p in run.get("processes") or [] if p.get("name") == name), {})
        self.call_from_thread(
            self.notify,
            f"{name} restarted: pid {proc.get('pid')}, {proc.get('state')}, {proc.get('restarts', 0)} restart(s)",
        )
        if self.live is not None:
            self.live.poke()

    def open_run(self, run_id: str) -> None:
        if self.pane(RunsPane).select(run_id):
            self.action_focus_pane(3)

    @live_handler
    def on_live_updater_alerts_arrived(self, message: LiveUpdater.AlertsArrived) -> None:
        """An alert rule fired (alerts.yaml): a toast and the terminal's bell, whichever run it is about."""
        for alert in message.alerts[-5:]:  # a burst (many runs ending at once) shows its newest few
            urgent = alert.get("event") in ("failed", "stalled")
            self.notify(
                f"{alert.get('message')}",
                title=f"alert: {alert.get('title')}",
                severity="error" if urgent else "warning",
                timeout=30 if urgent else 15,
                markup=False,  # the text comes from run files: shown as written
            )
        self.bell()

    @live_handler
    def on_live_updater_runs_updated(self, message: LiveUpdater.RunsUpdated) -> None:
        self.runs = message.runs
        for run in message.runs:
            status, previous = run.get("status"), self._statuses.get(run["run_id"])
            if previous is not None and previous != status and status in FINAL:
                reason = f": {run['reason']}" if run.get("reason") else ""
                self.notify(
                    f"run {run['run_id']} ({run.get('environment')}) {status}{reason}",
                    severity=END_SEVERITY.get(status, "information"),
                    timeout=10,
                )
            self._statuses[run["run_id"]] = status
        pane = self.pane(RunsPane)
        pane.update_runs(message.runs, message.sparks, message.stalled, message.queued)
        self.pane(EnvironmentsPane).show_running(
            {r["environment"] for r in message.runs if r.get("environment") and r.get("status") not in FINAL}
        )
        self.header.stalled = sorted(message.stalled)
        self.header.unhealthy = [
            (r["run_id"], r["health"]["reason"]) for r in message.runs if (r.get("health") or {}).get("reason")
        ]
        self.header.stall_after_s = message.stall_after_s
        self._update_run_line()
        if self.initial_run_id and pane.select(self.initial_run_id):
            self.initial_run_id = None

    @live_handler
    def on_runs_pane_selected(self, message: RunsPane.Selected) -> None:
        if message.run_id == self.selected_run:
            return
        self.selected_run = message.run_id
        self.pane(LogsPane).show_run(message.run_id)
        self.pane(MetricsPane).show(message.run_id, [])
        self.pane(ProcessesPane).show(None)
        self._update_run_line()
        if self.live is not None:
            self.live.select(message.run_id)
        if message.run_id and not self.selected_env:
            self._run_config_worker(message.run_id)

    @work(thread=True, exclusive=True, group="run-config", exit_on_error=False, description="cannot read the config")
    def _run_config_worker(self, run_id: str) -> None:
        rows = backend.run_config_rows(run_id)
        self.call_from_thread(self._show_run_config, run_id, rows)

    def _show_run_config(self, run_id: str, rows: list) -> None:
        if self.screen_stack and run_id == self.selected_run and not self.selected_env:
            self.pane(ConfigPane).show_run(run_id, rows)

    def _update_run_line(self, run: dict | None = None) -> None:
        if self.selected_run is None:
            self.header.run_line = None
        else:
            run = run or next((r for r in self.runs if r["run_id"] == self.selected_run), {})
            step, total = run.get("step"), run.get("total_steps")
            self.header.run_line = f"{self.selected_run} {run.get('environment') or ''} {run.get('status', '')}" + (
                f" step {step}/{total}" if step is not None else ""
            )
            if run.get("tokens"):  # docs/cost.md
                self.header.run_line += f" cost {cost_cell(run)}"
        self.header.update_text()

    @live_handler
    def on_live_updater_run_sampled(self, message: LiveUpdater.RunSampled) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(ProcessesPane).show(message.run)
        self.pane(LogsPane).sync_processes(message.run)
        self.pane(MetricsPane).show_audit(message.run.get("audit"))

    @live_handler
    def on_live_updater_metrics_updated(self, message: LiveUpdater.MetricsUpdated) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(MetricsPane).show(message.run_id, message.rows, message.trainer_step)
        if isinstance(self.screen, (ChartScreen, StepTimeScreen)):
            self.screen.update_rows(message.rows)

    @live_handler
    def on_live_updater_logs_grew(self, message: LiveUpdater.LogsGrew) -> None:
        if message.run_id == self.selected_run:
            self.pane(LogsPane).logs_grew(message.names)

    def on_metrics_pane_chart_requested(self, message: MetricsPane.ChartRequested) -> None:
        self.open_chart(message.key)

    def open_chart(self, key: str) -> None:
        if key == STEP_TIME or key in STEP_PHASES:  # a step's phases read best together, stacked
            self.action_step_time()
            return
        self.push_screen(ChartScreen(key, self.pane(MetricsPane).rows))

    def action_step_time(self) -> None:
        """Where the selected run's step time goes: its time/… phases stacked per step."""
        self.push_screen(StepTimeScreen(self.pane(MetricsPane).rows))

    def compare_sweep(self, sweep_id: str) -> None:
        """The comparison of every run a sweep has started (core.runs.sweeps), with its configurations."""
        ids = [
            r["run_id"]
            for r in sorted(self.runs, key=lambda r: r.get("created_at") or 0)
            if r.get("sweep_id") == sweep_id
        ]
        if len(ids) < 2:
            self.notify(f"sweep {sweep_id} has {len(ids)} run(s) started: nothing to compare yet", severity="warning")
            return
        from .panes.compare import CompareScreen

        self.push_screen(CompareScreen(ids, title=f"sweep {sweep_id}"))

    def action_derive_profile(self) -> None:
        """Ask for a name, then write a profile holding the selected run's values (core.runs.profile_of_run)."""
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        from .widgets.name_prompt import NamePrompt

        def chosen(name: str | None) -> None:
            if name:
                self._derive_worker(run_id, name)

        self.push_screen(
            NamePrompt(f"A new profile with the values run {run_id} trained with", placeholder="profile name"),
            chosen,
        )

    @work(thread=True, group="derive-profile", exit_on_error=False, description="cannot derive the profile")
    def _derive_worker(self, run_id: str, name: str) -> None:
        profile = backend.profile_from_run(run_id, name)
        self.call_from_thread(
            self.notify, f"profile {profile.name} created ({profile.overrides_file}): use it with the palette"
        )

    def on_runs_pane_compare_requested(self, message: RunsPane.CompareRequested) -> None:
        from .panes.compare import CompareScreen

        self.push_screen(CompareScreen(message.run_ids))

    def action_rollouts(self, step: int | None = None) -> None:
        if self.screen is not self.screen_stack[0] and not isinstance(self.screen, ChartScreen):
            return
        if not self.selected_run:
            self.notify("select a run first: [3], then a row", severity="warning")
            return
        from .panes.rollouts import RolloutsScreen

        self.push_screen(RolloutsScreen(self.selected_run, step))

    # -- test inference -------------------------------------------------------------------------
    def action_test_inference(self) -> None:
        from .panes.inference import InferenceScreen

        self.push_screen(InferenceScreen(self.selected_env, self.selected_run))

    # -- data out ---------------------------------------------------------------------------------
    def action_write_report(self) -> None:
        if not self.selected_run:
            self.notify("select a run first: [3], then a row", severity="warning")
            return
        self._write_report(self.selected_run)

    @work(thread=True, group="report", exit_on_error=False, description="cannot write the report")
    def _write_report(self, run_id: str) -> None:
        path = backend.write_report(run_id)
        self.call_from_thread(self.notify, f"report of run {run_id}: {path}", timeout=15, markup=False)


QUIT_DEADLINE_S = 5.0


def _exit_by_deadline(seconds: float, app: App) -> None:
    """Quit always exits: a thread stuck in a system call (a read on a dead mount, a worker that never
    returns) cannot hold the dashboard open. Past `seconds`, the terminal is given back and the
    process ends, whatever is still running."""

    def expire() -> None:
        with contextlib.suppress(Exception):
            if app._driver is not None:
                app._driver.stop_application_mode()
        os._exit(0)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def run_dashboard(run_id: str | None = None) -> None:
    """Entry point of `hermes-rl` with no arguments."""
    backend.keep_probes_warm()  # the environments screen probes one environment after another
    app = HermesDashboard(run_id=run_id)
    app.exit_deadline_s = QUIT_DEADLINE_S
    app.run()
