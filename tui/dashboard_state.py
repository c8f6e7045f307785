"""The state every part of the dashboard shares (what is selected, the runs and environments shown, the
live updater) and how a part finds a pane whatever screen is on top. The parts (tui/navigation.py,
tui/selection.py, tui/run_control.py, tui/routing.py) build on it; tui/app.py composes them."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from textual.app import App
from textual.css.query import NoMatches
from textual.widget import Widget

from .format import UntrustedTextFilter
from .panes.config_editor import ConfigPane
from .panes.runs import RunsPane
from .textual_compat import add_line_filter, shutting_down
from .widgets.header import HeaderBar

if TYPE_CHECKING:
    from hermes_rl.core.base.records import RunSummary

    from .live import LiveUpdater

PaneT = TypeVar("PaneT", bound=Widget)
StateT = TypeVar("StateT", bound="DashboardState")
Args = ParamSpec("Args")


def dropped_when_closing(
    method: Callable[Concatenate[StateT, Args], None],
) -> Callable[Concatenate[StateT, Args], None]:
    """A callback that may still run while the app shuts down and its panes are removed (a live update, a
    timer): a pane it finds gone then is no error, and the callback is dropped."""

    @functools.wraps(method)
    def wrapper(self: StateT, *args: Args.args, **kwargs: Args.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except NoMatches:
            if shutting_down(self):
                return
            raise

    return wrapper


class DashboardState(App):
    """State and lookups every part of the dashboard shares; the parts add actions and message routing."""

    def __init__(
        self,
        *,
        run_id: str | None = None,
        clock: Callable[[], float] = time.time,
        live: bool = True,
        stall_after_s: float | None = None,
        sample_hz: float = 1.0,
    ):
        super().__init__()
        add_line_filter(self, UntrustedTextFilter())  # text from run files is shown, never obeyed
        self.clock = clock
        self.initial_run_id = run_id
        self.live_enabled = live
        self.stall_after_s = stall_after_s  # None: core.runs' threshold ($HERMES_RL_STALL_S, default 900 s)
        self.sample_hz = sample_hz
        self.environments: list[Any] = []  # core's environment records (backend.discover_environments)
        self.runs: list[RunSummary] = []
        self.selected_run: str | None = None
        self.selected_env: str | None = None
        self._statuses: dict[str, Any] = {}
        self.live: LiveUpdater | None = None
        self.closing = False  # set at quit/unmount: a first frame that comes later starts no live thread
        self.first_frame_at: float | None = None
        self._selection_seen: tuple | None = None  # the selection file as last seen (backend.selection_signature)

    @overload
    def pane(self, selector: type[PaneT]) -> PaneT: ...

    @overload
    def pane(self, selector: str) -> Widget: ...

    def pane(self, selector: str | type[Widget]) -> Widget:
        """A widget of the dashboard screen, whatever screen (help, chart, dialog) is on top of it."""
        if not self.screen_stack:  # shutting down: callers treat it as a widget already gone
            raise NoMatches(f"no screen to find {selector!r} on")
        return self.screen_stack[0].query_one(selector)

    @property
    def header(self) -> HeaderBar:
        return self.pane(HeaderBar)

    def on_main_screen(self) -> bool:
        """Whether the dashboard itself is on top (no dialog, chart or other view over it)."""
        return bool(self.screen_stack) and self.screen is self.screen_stack[0]

    def load_config(self, name: str) -> None:
        self.pane(ConfigPane).load(name)

    def _cursor_run(self) -> str | None:
        """The run under the runs pane's cursor: what the user sees chosen, even when a key moved the
        cursor a moment ago and the panes below have not caught up (selected_run follows by message)."""
        try:
            return self.pane(RunsPane).table.selected_key() or self.selected_run
        except NoMatches:
            return self.selected_run

    def poke_live(self) -> None:
        """Have the live loop look again now (a run started, stopped or restarted)."""
        if self.live is not None:
            self.live.poke()
