"""The hermes-rl dashboard: environments, config, runs, processes, logs and metrics in one screen.

It is a view over `core`: it reads run folders and logs, and calls core.runs to start and stop runs.
It never owns a run; quitting leaves every run going. All slow work (config_init probes, starting and
stopping runs, psutil sampling, file reads of whole files) happens in workers.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer

from hermes_rl.core.base.errors import HermesError

from hermes_rl.tui import backend
from hermes_rl.tui.config_editor import ConfigPane
from hermes_rl.tui.dialogs import ConfirmScreen, HelpScreen, binding_rows
from hermes_rl.tui.environments import EnvironmentsPane
from hermes_rl.tui.format import FINAL_STATUSES
from hermes_rl.tui.header import HeaderBar
from hermes_rl.tui.keymap import keymap_path, load_keymap
from hermes_rl.tui.logs import LogsPane
from hermes_rl.tui.messages import (ConfigLoaded, EnvironmentsChanged, EnvironmentSelected, LiveBatch, LogsGrew, MetricsUpdated,
                       RunSampled, RunSelected, RunsUpdated)
from hermes_rl.tui.metrics import ChartScreen, MetricsPane
from hermes_rl.tui.palette import HermesCommands
from hermes_rl.tui.processes import ProcessesPane
from hermes_rl.tui.runs import RunsPane



def live_handler(method):
    """Live updates may still arrive while the app shuts down and its panes are gone: drop them."""
    import functools

    from textual.css.query import NoMatches

    @functools.wraps(method)
    def wrapper(self, message):
        try:
            return method(self, message)
        except NoMatches:
            main = self.screen_stack[0] if self.screen_stack else None
            if self._exit or not self._running or main is None or main._closing or main._closed:
                return None     # shutting down: widgets are being removed
            raise

    return wrapper
PANES = ("environments", "config", "runs", "processes", "logs", "metrics")


class HermesDashboard(App):
    TITLE = "hermes-rl"
    CSS_PATH = Path(__file__).parent / "app.tcss"   # absolute: subclasses elsewhere (bench, tests) find it
    COMMANDS = {HermesCommands}
    COMMAND_PALETTE_BINDING = "ctrl+p"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("colon", "command_palette", "Commands", id="app.palette"),
        Binding("slash", "filter", "Filter/search", id="app.filter"),
        Binding("tab", "next_pane", "Next pane", show=False, priority=True, id="pane.next"),
        Binding("shift+tab", "prev_pane", "Prev pane", show=False, priority=True, id="pane.prev"),
        *[Binding(str(n), f"focus_pane({n})", f"Pane {n}: {name}", show=False, id=f"pane.{n}")
          for n, name in enumerate(PANES, 1)],
        Binding("s", "start_run", "Start run", id="run.start"),
        Binding("x", "stop_run", "Stop run", id="run.stop"),
        Binding("t", "test_inference", "Test inference", id="app.inference"),
        Binding("z", "zoom", "Zoom pane", id="app.zoom"),
    ]

    def __init__(self, *, run_id: str | None = None, clock=time.time, live: bool = True,
                 stall_after_s: float | None = None, sample_hz: float = 1.0):
        super().__init__()
        self.clock = clock
        self.initial_run_id = run_id
        self.live_enabled = live
        self.stall_after_s = stall_after_s     # None: core.runs' threshold ($HERMES_RL_STALL_S, default 900 s)
        self.sample_hz = sample_hz
        self.environments: list = []
        self.runs: list[dict] = []
        self.selected_run: str | None = None
        self.selected_env: str | None = None
        self._statuses: dict[str, str] = {}
        self.live = None
        self.first_frame_at: float | None = None

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

    def pane(self, selector, expect_type=None):
        """A widget of the dashboard screen, whatever screen (help, chart, dialog) is on top of it."""
        main = self.screen_stack[0] if self.screen_stack else self.screen
        return main.query_one(selector, expect_type) if expect_type else main.query_one(selector)

    @property
    def header(self) -> HeaderBar:
        return self.pane(HeaderBar)

    def on_mount(self) -> None:
        keymap, problem = load_keymap()
        if keymap:
            self.set_keymap(keymap)
        if problem:
            self.notify(problem, severity="warning")
        header = self.header
        header.keys = backend.keys_present()
        self.set_interval(5.0, header.update_text)   # the clock shows minutes
        self.pane("#runs RunsTable").focus()
        # Paint the first frame before the workers start competing for the GIL.
        self.call_after_refresh(self._first_frame)

    def _first_frame(self) -> None:
        self.first_frame_at = time.perf_counter()
        self._load_start_state()
        if self.live_enabled and self.live is None:
            from hermes_rl.tui.live import LiveUpdater

            self.live = LiveUpdater(self, sample_hz=self.sample_hz, stall_after_s=self.stall_after_s, clock=self.clock)
            self._live_worker()

    @work(thread=True, exclusive=True, group="live")
    def _live_worker(self) -> None:
        self.live.run()

    @work(thread=True, group="load")
    def _load_start_state(self) -> None:
        selection = backend.current_selection()
        try:
            profile, _notice = backend.resolve_profile(selection.get("profile"))
            profile_name, default_env = profile.name, profile.default_environment
        except Exception:
            profile_name, default_env = selection.get("profile") or "local", None
        try:
            environments = backend.discover_environments()
        except HermesError as exc:
            environments = []
            self.call_from_thread(self.notify, str(exc), severity="error")
        self.call_from_thread(self._start_state, selection, profile_name, environments, default_env)

    def _start_state(self, selection: dict, profile_name: str, environments: list, default_env: str | None) -> None:
        self.header.profile = profile_name
        self.selected_env = selection.get("environment")
        self.header.environment = self.selected_env
        self.header.update_text()
        self.environments = environments
        self.pane(EnvironmentsPane).show(environments, self.selected_env)
        if self.selected_env:
            self.load_config(self.selected_env)
        else:
            self.pane(ConfigPane).show_unselected(default_env, profile_name)

    async def action_quit(self) -> None:
        if self.live is not None:
            self.live.stop()
        active = [r["run_id"] for r in self.runs if r.get("status") not in FINAL_STATUSES]
        if active:
            message = (f"Dashboard closed. {len(active)} run(s) keep going: {', '.join(active)}. "
                       "Reopen with `hermes-rl`; stop with `hermes-rl stop RUN_ID`.")
        else:
            message = "Dashboard closed. No run is active."
        self.exit(message=message)

    def on_unmount(self) -> None:
        if self.live is not None:
            self.live.stop()

    # -- panes and focus --------------------------------------------------------------------------
    def _pane_target(self, index: int):
        pane = self.pane(f"#{PANES[index - 1]}")
        targets = {1: "EnvList", 3: "RunsTable", 4: "ProcessTable", 5: "LogView", 6: "MetricsTable"}
        return pane, targets.get(index)

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
        note = (f"Remap any key by its binding id in {keymap_path()} (YAML, e.g. `run.start: ctrl+r`). "
                "Digits/letters typed into a field go to the field: press esc first.")
        self.push_screen(HelpScreen(binding_rows(self), note))

    def on_live_batch(self, batch: LiveBatch) -> None:
        handlers = {RunsUpdated: self.on_runs_updated, RunSampled: self.on_run_sampled,
                    MetricsUpdated: self.on_metrics_updated, LogsGrew: self.on_logs_grew,
                    EnvironmentsChanged: self.on_environments_changed}
        for message in batch.updates:
            handlers[type(message)](message)

    # -- environments and config ----------------------------------------------------------------
    @live_handler
    def on_environments_changed(self, message: EnvironmentsChanged) -> None:
        self.environments = message.environments
        self.pane(EnvironmentsPane).show(message.environments)

    def on_environment_selected(self, message: EnvironmentSelected) -> None:
        if message.name:
            self.choose_environment(message.name)

    @work(thread=True, exclusive=True, group="select-env")
    def choose_environment(self, name: str, profile: str | None = None) -> None:
        try:
            backend.select_environment(name, profile)
        except HermesError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.call_from_thread(self._environment_chosen, name)

    def choose_profile(self, profile: str) -> None:
        if not self.selected_env:
            self.notify("select an environment first", severity="warning")
            return
        self.choose_environment(self.selected_env, profile)

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
        self.pane(ConfigPane).show_loading(name)
        self._load_config(name)

    @work(thread=True, exclusive=True, group="config")
    def _load_config(self, name: str) -> None:
        try:
            view = backend.get_config(name)
            self.post_message(ConfigLoaded(name, view))
        except HermesError as exc:
            self.post_message(ConfigLoaded(name, None, str(exc)))
        except Exception as exc:
            self.post_message(ConfigLoaded(name, None, f"{type(exc).__name__}: {exc}"))

    @live_handler
    def on_config_loaded(self, message: ConfigLoaded) -> None:
        pane = self.pane(ConfigPane)
        if message.view is None:
            pane.show_error(message.environment, message.error or "cannot load the config")
            return
        pane.show(message.view)
        self.header.profile = message.view.profile
        self.header.update_text()

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

    @work(thread=True, exclusive=True, group="config-save")
    def _save(self, env: str, profile: str | None, pending: dict, then_start: bool) -> None:
        try:
            result = backend.set_fields(pending, env, profile)
        except HermesError as exc:
            self.call_from_thread(self.notify, f"not saved: {exc}", severity="error")
            return
        changed = ", ".join(f"{k}={v['value']!r}" for k, v in result.get("changed", {}).items())
        self.call_from_thread(self.notify, f"draft saved: {changed}", timeout=3)
        self.call_from_thread(self.load_config, env)
        if then_start:
            self.call_from_thread(self._start, env, None)

    @work(thread=True, exclusive=True, group="config-save")
    def reset_config(self, env: str) -> None:
        try:
            backend.reset_draft(env)
        except HermesError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error")
            return
        self.call_from_thread(self.load_config, env)

    # -- runs --------------------------------------------------------------------------------------
    def action_start_run(self) -> None:
        pane = self.pane(ConfigPane)
        env = pane.environment or self.selected_env
        if not env:
            self.notify("select an environment first: [1], then enter", severity="warning")
            return
        self.save_config(then_start=True)

    def _start(self, env: str | None, profile: str | None) -> None:
        self.notify(f"starting {env}…", timeout=2)
        self._start_worker(env, profile)

    @work(thread=True, group="start-run")
    def _start_worker(self, env: str | None, profile: str | None) -> None:
        try:
            run = backend.start_run(env, profile)
        except HermesError as exc:
            self.call_from_thread(self.notify, f"cannot start: {exc}", severity="error", timeout=10)
            return
        except Exception as exc:
            self.call_from_thread(self.notify, f"cannot start: {type(exc).__name__}: {exc}", severity="error", timeout=10)
            return
        self.call_from_thread(self._started, run)

    def _started(self, run: dict) -> None:
        run_id = run.get("run_id")
        self.notify(f"run {run_id} started ({run.get('environment')}, {run.get('profile')})")
        self.initial_run_id = run_id     # select it as soon as the list shows it
        if self.live is not None:
            self.live.poke()

    def action_stop_run(self) -> None:
        run_id = self.selected_run
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        run = next((r for r in self.runs if r["run_id"] == run_id), {})
        if run.get("status") in FINAL_STATUSES - {"lost"}:
            self.notify(f"run {run_id} is already {run.get('status')}", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop_worker(run_id)

        self.push_screen(ConfirmScreen(f"Stop run {run_id}?", f"{run.get('environment', '')} · {run.get('status', '')} · "
                                       "its processes get SIGTERM, then SIGKILL after their timeout"), answered)

    @work(thread=True, group="stop-run")
    def _stop_worker(self, run_id: str) -> None:
        self.call_from_thread(self.notify, f"stopping {run_id}…", timeout=2)
        try:
            result = backend.stop_run(run_id)
        except HermesError as exc:
            self.call_from_thread(self.notify, f"cannot stop {run_id}: {exc}", severity="error")
            return
        self.call_from_thread(self.notify, f"run {run_id}: {result.get('status', 'stopped')}")
        if self.live is not None:
            self.live.poke()

    def confirm_restart_process(self, run_id: str | None, name: str) -> None:
        if not run_id:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._restart_worker(run_id, name)

        self.push_screen(ConfirmScreen(f"Restart {name} of run {run_id}?",
                                       "the supervisor stops its process group and starts it again; "
                                       "the other processes keep running"), answered)

    @work(thread=True, group="restart")
    def _restart_worker(self, run_id: str, name: str) -> None:
        self.call_from_thread(self.notify, f"restarting {name} of {run_id}…", timeout=2)
        try:
            run = backend.restart_process(run_id, name)
        except HermesError as exc:
            self.call_from_thread(self.notify, f"cannot restart {name}: {exc}", severity="error")
            return
        except Exception as exc:
            self.call_from_thread(self.notify, f"cannot restart {name}: {type(exc).__name__}: {exc}", severity="error")
            return
        proc = next((p for p in run.get("processes") or [] if p.get("name") == name), {})
        self.call_from_thread(self.notify, f"{name} restarted: pid {proc.get('pid')}, {proc.get('state')}, "
                                           f"{proc.get('restarts', 0)} restart(s)")
        if self.live is not None:
            self.live.poke()

    def open_run(self, run_id: str) -> None:
        if self.pane(RunsPane).select(run_id):
            self.action_focus_pane(3)

    @live_handler
    def on_runs_updated(self, message: RunsUpdated) -> None:
        self.runs = message.runs
        for run in message.runs:
            status, previous = run.get("status"), self._statuses.get(run["run_id"])
            if previous is not None and previous != status and status in ("failed", "completed", "lost", "stopped"):
                reason = f": {run['reason']}" if run.get("reason") else ""
                severity = {"failed": "error", "lost": "error", "completed": "information"}.get(status, "information")
                self.notify(f"run {run['run_id']} ({run.get('environment')}) {status}{reason}", severity=severity,
                            timeout=10)
            self._statuses[run["run_id"]] = status
        pane = self.pane(RunsPane)
        pane.update_runs(message.runs, message.sparks, message.stalled)
        self.header.stalled = sorted(message.stalled)
        self.header.stall_after_s = message.stall_after_s
        self._update_run_line()
        if self.initial_run_id and pane.select(self.initial_run_id):
            self.initial_run_id = None

    @live_handler
    def on_run_selected(self, message: RunSelected) -> None:
        if message.run_id == self.selected_run:
            return
        self.selected_run = message.run_id
        self.pane(LogsPane).show_run(message.run_id)
        self.pane(MetricsPane).show(message.run_id, [])
        self.pane(ProcessesPane).show(None)
        self._update_run_line()
        if self.live is not None:
            self.live.select(message.run_id)

    def _update_run_line(self, run: dict | None = None) -> None:
        if self.selected_run is None:
            self.header.run_line = None
        else:
            run = run or next((r for r in self.runs if r["run_id"] == self.selected_run), {})
            step, total = run.get("step"), run.get("total_steps")
            self.header.run_line = f"{self.selected_run} {run.get('status', '')}" + (
                f" step {step}/{total}" if step is not None else "")
        self.header.update_text()

    @live_handler
    def on_run_sampled(self, message: RunSampled) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(ProcessesPane).show(message.run)
        self.pane(LogsPane).sync_processes(message.run)

    @live_handler
    def on_metrics_updated(self, message: MetricsUpdated) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(MetricsPane).show(message.run_id, message.rows)
        if isinstance(self.screen, ChartScreen):
            self.screen.update_rows(message.rows)

    @live_handler
    def on_logs_grew(self, message: LogsGrew) -> None:
        if message.run_id == self.selected_run:
            self.pane(LogsPane).logs_grew(message.names)

    def open_chart(self, key: str) -> None:
        self.push_screen(ChartScreen(key, self.pane(MetricsPane).rows))

    # -- test inference -------------------------------------------------------------------------
    def action_test_inference(self) -> None:
        from hermes_rl.tui.inference import InferenceScreen

        self.push_screen(InferenceScreen(self.selected_env))


def run_dashboard(run_id: str | None = None) -> None:
    """Entry point of `hermes-rl` with no arguments."""
    app = HermesDashboard(run_id=run_id)
    app.run()
