"""The hermes-rl dashboard: environments, config, runs, processes, logs and metrics in one screen.

It is a view over core, reached through tui/backend.py: it never owns a run; quitting leaves every
run going. This module lays the screen out, binds the keys and opens and closes the dashboard; its
parts are mixed in below it: the shared state (tui/dashboard_state.py), moving about and the views
over it (tui/navigation.py), the selected environment and its config (tui/selection.py), what it does
to runs (tui/run_control.py), and the routing of the panes' and the live loop's messages
(tui/routing.py). All slow work (config_init probes, starting and stopping runs, psutil sampling,
reads of whole files) happens in workers, whose failures all reach the user as one line. Live updates
come from one background loop (tui/live.py), one batch per cycle.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer

from hermes_rl.core.base.paths import cli_command
from hermes_rl.core.base.states import FINAL

from . import backend
from .keymap import load_keymap
from .navigation import PANES
from .palette import HermesCommands
from .panes.config_editor import ConfigPane
from .panes.environments import EnvironmentsPane
from .panes.logs import LogsPane
from .panes.metrics import MetricsPane
from .panes.processes import ProcessesPane
from .panes.runs import RunsPane
from .routing import MessageRouting
from .textual_compat import background_screens
from .widgets.header import HeaderBar

if TYPE_CHECKING:
    from .live import LiveUpdater

NARROW_COLUMNS = 100  # below this width the top row's panes shrink to their narrow minimums (app.tcss)
# The dashboard's own keys: on any other screen (the inference or rollouts screen, a dialog, the palette,
# also while it is still opening and nothing there has focus yet) what is typed is that screen's, never these.
DASHBOARD_ONLY_ACTIONS = {"start_run", "stop_run", "test_inference", "rollouts", "zoom", "filter", "focus_pane"}


class HermesDashboard(MessageRouting):
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
    def _background_screens(self) -> list[Screen]:
        """Screens that show through the top one: none under a full (opaque) screen such as the rollouts
        view, so the dashboard it covers is not composited on each live update (tui/textual_compat)."""
        return background_screens(self)

    def on_resize(self, event: Resize) -> None:
        if self.screen_stack:
            self.screen_stack[0].set_class(event.size.width < NARROW_COLUMNS, "-narrow")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in DASHBOARD_ONLY_ACTIONS and self.screen_stack and self.screen is not self.screen_stack[0])

    # -- open and close ---------------------------------------------------------------------------
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
            # The live loop (and the file watcher it imports) loads after the first frame is painted.
            from .live import LiveUpdater

            self.live = LiveUpdater(self, sample_hz=self.sample_hz, stall_after_s=self.stall_after_s, clock=self.clock)
            self._live_worker(self.live)

    @work(thread=True, exclusive=True, group="live", exit_on_error=False, description="live updates stopped")
    def _live_worker(self, live: LiveUpdater) -> None:
        live.run()

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
