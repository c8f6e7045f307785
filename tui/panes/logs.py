"""[5] Logs: a tab per process plus a merged view; follow, wrap, search, markers.

The view renders only the visible lines, read on demand from a `core.readers.logs.LogReader` (or the
bounded merged buffer), so a log of any size costs the same to show. ANSI colours are kept
(`Text.from_ansi`); search matches on the plain text and highlights every hit on screen.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static, Tab, Tabs
from textual.worker import Worker, WorkerState

from .. import backend

MERGED = "all"
RESIZE_EVERY_S = 15.0  # while following: the view draws from the bottom, only the scrollbar thumb lags
_MARKER_STYLE = Style(color="black", bgcolor="yellow", bold=True)
_MATCH_STYLE = Style(color="black", bgcolor="yellow")
_CURRENT_MATCH_BG = Style(bgcolor="grey23")
# Lines by severity, in the words Python's logging, uvicorn and tracebacks use.
ERROR_LINE = re.compile(
    r"\b(?:ERROR|CRITICAL|FATAL)\b"  # logging levels
    r"|^(?:.*│ )?Traceback \(most recent call last\)"  # a traceback's first line (merged view: after the name)
    r"|^(?:.*│ )?[\w.]*(?:Error|Exception)\b:?"  # its last line
)
WARNING_LINE = re.compile(r"\bWARN(?:ING)?\b")
_SEVERITY_STYLE = {"error": Style(color="red"), "warning": Style(color="yellow")}
# The line naming an exception, at the end of a traceback: `RuntimeError: boom`, `KeyError`.
EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$")


def severity(plain: str) -> str | None:
    """ "error", "warning" or None for one line of text."""
    if ERROR_LINE.search(plain):
        return "error"
    if WARNING_LINE.search(plain):
        return "warning"
    return None


def last_exception(lines: list[str]) -> str | None:
    """The last line of `lines` that names an exception (what a failed process died of)."""
    for line in reversed(lines):
        plain = backend.strip_ansi(line).strip()
        if EXCEPTION_LINE.match(plain):
            return plain
    return None


class LogView(ScrollView, can_focus=True):
    """Line-API view over anything with `line_count` and `lines(start, end)`."""

    BINDINGS = [
        Binding("up,k", "line_up", "Up", show=False, id="logs.up"),
        Binding("down,j", "line_down", "Down", show=False, id="logs.down"),
        Binding("pageup", "page_up", "Page up", show=False, id="logs.page_up"),
        Binding("pagedown,space", "page_down", "Page down", show=False, id="logs.page_down"),
        Binding("g,home", "top", "Top", show=False, id="logs.top"),
        Binding("G,end", "bottom", "Bottom/follow", show=False, id="logs.bottom"),
        Binding("left,h", "scroll_left", "Left", show=False, id="logs.left"),
        Binding("right,l", "scroll_right", "Right", show=False, id="logs.right"),
    ]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.source = None
        self.follow = True
        self.wrap = False
        self.search: str | None = None
        self.match_line: int | None = None
        self.markers: list[tuple[int, str]] = []  # (after line, label)
        self._widest = 0
        self._layout_key = None
        self._layout_rows: list[Strip] = []
        self._search_re: re.Pattern | None = None
        self._last_resize = 0.0
        self._resize_pending = False
        self._resize_timer = None
        self._strip_cache: dict[int, tuple[str, list[Strip]]] = {}
        self._strip_cache_key = None

    # -- state changes ----------------------------------------------------------------------
    def set_source(self, source) -> None:
        self.source = source
        self.follow = True
        self.match_line = None
        self._widest = 0
        self.markers = []
        self.update_size()

    @property
    def line_count(self) -> int:
        return self.source.line_count if self.source is not None else 0

    def update_size(self, throttle: bool = False) -> bool:
        """The source grew (or changed): resize the virtual area and keep the tail in view when following.

        Resizing relayouts the screen (scrollbars), so a growing log does it at most once per
        RESIZE_EVERY_S; in between a following view only repaints (it draws from the bottom anyway)."""
        if throttle and self.follow:
            now = time.monotonic()
            wait = self._last_resize + RESIZE_EVERY_S - now
            if wait > 0:
                self._layout_key = None
                self.refresh()
                if not self._resize_pending:
                    # Normally the next growth after the deadline resizes inline, in the frame it
                    # paints anyway; this timer only catches a log that stopped growing.
                    self._resize_pending = True
                    self._resize_timer = self.set_timer(wait + RESIZE_EVERY_S, self._deferred_resize)
                return False
        if self._resize_pending:
            self._resize_pending = False
            self._resize_timer.stop()
        self._last_resize = time.monotonic()
        # No-wrap: as wide as the widest line seen, so a horizontal scrollbar appears only when needed.
        virtual_width = 0 if self.wrap else self._widest
        self.virtual_size = Size(virtual_width, self.line_count)
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self._layout_key = None
        self.refresh()
        return True

    def _deferred_resize(self) -> None:
        self._resize_pending = False
        if self.virtual_size.height != self.line_count:  # not resized inline meanwhile
            self.update_size()
            if isinstance(self.parent, LogsPane):
                self.parent.update_status()

    def set_search(self, pattern: str | None) -> None:
        self.search = pattern or None
        self._search_re = re.compile(re.escape(pattern), re.IGNORECASE) if pattern else None
        self._layout_key = None
        self.refresh()

    def jump_to(self, line: int) -> None:
        self.follow = False
        self.match_line = line
        height = self.scrollable_content_region.height
        self.scroll_to(y=max(0, line - height // 3), animate=False, immediate=True)
        self._layout_key = None
        self.refresh()

    def add_marker(self, label: str | None = None) -> None:
        after = self.line_count - 1
        self.markers.append((after, label or time.strftime("%H:%M:%S")))
        self._layout_key = None
        self.refresh()

    def toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self.update_size()

    def toggle_follow(self) -> None:
        self.follow = not self.follow
        self.update_size()

    # -- actions --------------------------------------------------------------------------------
    def _manual(self) -> None:
        if self.follow and self.virtual_size.height != self.line_count:
            self.update_size()  # catch up the throttled size first, so scrolling starts from the tail
        self.follow = False

    def action_line_up(self) -> None:
        self._manual()
        self.scroll_to(y=self.scroll_y - 1, animate=False)

    def action_line_down(self) -> None:
        self.scroll_to(y=self.scroll_y + 1, animate=False)
        self._resume_follow_at_end()

    def action_page_up(self) -> None:
        self._manual()
        self.scroll_to(y=self.scroll_y - self.scrollable_content_region.height, animate=False)

    def action_page_down(self) -> None:
        self.scroll_to(y=self.scroll_y + self.scrollable_content_region.height, animate=False)
        self._resume_follow_at_end()

    def action_top(self) -> None:
        self._manual()
        self.scroll_to(y=0, animate=False)

    def action_bottom(self) -> None:
        self.follow = True
        self.update_size()

    def action_scroll_left(self) -> None:
        if not self.wrap:
            self.scroll_to(x=self.scroll_x - 8, animate=False)

    def action_scroll_right(self) -> None:
        if not self.wrap:
            self.scroll_to(x=self.scroll_x + 8, animate=False)

    def _resume_follow_at_end(self) -> None:
        if self.scroll_y >= self.max_scroll_y:
            self.follow = True

    def on_mouse_scroll_up(self, _event) -> None:
        self._manual()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._layout_key = None

    def watch_scroll_x(self, old: float, new: float) -> None:
        super().watch_scroll_x(old, new)
        self._layout_key = None

    # -- rendering ----------------------------------------------------------------------------------
    def _to_text(self, line_no: int, raw: str) -> Text:
        text = Text.from_ansi(raw, no_wrap=not self.wrap, end="")
        level = severity(text.plain)
        if level is not None:
            text.stylize_before(_SEVERITY_STYLE[level])  # a line's own colours win
        if self._search_re is not None:
            plain = text.plain
            for match in self._search_re.finditer(plain):
                text.stylize(_MATCH_STYLE, match.start(), match.end())
        if line_no == self.match_line:
            text.stylize(_CURRENT_MATCH_BG)
        return text

    def _marker_strip(self, label: str, width: int) -> Strip:
        title = f" ── marker {label} "
        return Strip([Segment(title + "─" * max(0, width - len(title)), _MARKER_STYLE)]).crop_extend(0, width, None)

    def _layout(self) -> list[Strip]:
        region = self.scrollable_content_region
        width, height = region.width, region.height
        count = self.line_count
        key = (
            self.follow,
            int(self.scroll_y),
            int(self.scroll_x),
            width,
            height,
            count,
            self.wrap,
            self.search,
            self.match_line,
            len(self.markers),
            id(self.source),
        )
        if key == self._layout_key:
            return self._layout_rows
        rows: list[Strip] = []
        if self.source is not None and width > 0 and height > 0:
            console = self.app.console
            first = max(0, count - height) if self.follow else int(self.scroll_y)
            lines = self.source.lines(first, first + height)
            marker_at: dict[int, list[str]] = {}
            for after, label in self.markers:
                marker_at.setdefault(after, []).append(label)
            base_style = self.rich_style
            x = 0 if self.wrap else int(self.scroll_x)
            # Rendered lines are cached while width, wrap, search and scroll_x stay the same, so a
            # growing log renders only its new lines.
            cache_key = (width, self.wrap, self.search, x, id(self.source), self.match_line)
            if cache_key != self._strip_cache_key:
                self._strip_cache_key = cache_key
                self._strip_cache = {}
            cache = self._strip_cache
            for offset, raw in enumerate(lines):
                line_no = first + offset
                cached = cache.get(line_no)
                if cached is not None and cached[0] == raw:
                    rows.extend(cached[1])
                else:
                    text = self._to_text(line_no, raw)
                    if self.wrap:
                        pieces = text.wrap(console, width, overflow="fold", no_wrap=False) or [Text("")]
                    else:
                        if text.cell_len > self._widest:
                            self._widest = text.cell_len
                            self.call_later(self.update_size)
                        pieces = [text]
                    strips = [
                        Strip(list(piece.render(console))).crop_extend(x, x + width, base_style) for piece in pieces
                    ]
                    cache[line_no] = (raw, strips)
                    rows.extend(strips)
                for label in marker_at.get(line_no, []):
                    rows.append(self._marker_strip(label, width))
            if len(cache) > 4 * height:  # keep only what is near the screen
                for stale in [n for n in cache if n < first or n >= first + height]:
                    del cache[stale]
            if self.follow:
                rows = rows[-height:]
            else:
                rows = rows[:height]
        self._layout_key = key
        self._layout_rows = rows
        return rows

    def render_line(self, y: int) -> Strip:
        rows = self._layout()
        width = self.scrollable_content_region.width
        if y < len(rows):
            return rows[y].apply_style(self.rich_style)
        return Strip.blank(width, self.rich_style)


class LogsPane(Vertical):
    """[5] Logs of the selected run."""

    ALLOW_MAXIMIZE = True

    BINDINGS = [
        Binding("f", "toggle_follow", "Follow", id="logs.follow"),
        Binding("w", "toggle_wrap", "Wrap", id="logs.wrap"),
        Binding("m", "marker", "Marker", id="logs.marker"),
        Binding("n", "next_match", "Next match", id="logs.next"),
        Binding("N", "prev_match", "Prev match", id="logs.prev"),
        Binding("[", "prev_tab", "Prev log", id="logs.prev_tab"),
        Binding("]", "next_tab", "Next log", id="logs.next_tab"),
        Binding("E", "load_earlier", "Load earlier", show=False, id="logs.earlier"),
        Binding("a", "toggle_access", "Access lines", id="logs.access"),
        Binding("e", "next_error", "Next error", id="logs.next_error"),
        Binding("p", "prev_error", "Prev error", id="logs.prev_error"),
    ]

    class WorkFailed(Message):
        """A search or a load of earlier lines failed. Textual tells only the widget that started a
        worker how it went: this hands the failure to the app, which reports it like any other."""

        def __init__(self, worker: Worker) -> None:
            super().__init__()
            self.worker = worker

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[5] Logs"
        self.run_id: str | None = None
        self.names: list[str] = []
        self._tab_names: dict[str, str] = {}  # tab id -> process name
        self._status = ""
        self._tab_serial = 0
        self._states: dict[str, str | None] = {}  # process name -> its state in the last sample
        self._counted = 0  # the line count the status line says

    def on_mount(self) -> None:
        # The status is redrawn with the (throttled) resize; lines can reach the view by other paths
        # (a tab's first read, a merged stream taking a new process), so its count is checked each second.
        self.set_interval(1.0, self._recount)

    def _recount(self) -> None:
        if self.view.line_count != self._counted:
            self._update_status()

    def compose(self) -> ComposeResult:
        yield Tabs(Tab("all", id="tab-all"), id="log-tabs")
        yield Static("", id="log-problem", classes="hidden")
        yield LogView(id="log-view")
        yield Input(placeholder="search logs (enter: find, esc: close)", id="log-search", classes="hidden")
        yield Static("", id="log-status")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def _run_view(self):
        live = getattr(self.app, "live", None)
        view = live.view if live is not None else None
        if view is None or view.run_id != self.run_id:
            return None
        return view

    def show_run(self, run_id: str | None) -> None:
        if run_id == self.run_id:
            return
        tabs = self.query_one(Tabs)
        for tab_id in list(self._tab_names):
            tabs.remove_tab(tab_id)
        self._tab_names.clear()
        self.run_id = run_id
        self.names = []
        tabs.active = "tab-all"
        self.view.set_source(None)
        # A search belongs to the run whose logs it ran over: another run's status never shows its hit.
        self.view.set_search(None)
        search = self.query_one("#log-search", Input)
        if not search.has_focus:
            search.value = ""
            search.add_class("hidden")
        self._update_status()

    def sync_processes(self, run: Mapping[str, Any]) -> None:
        names = [p.get("name") for p in run.get("processes") or [] if p.get("name")]
        states = {p.get("name"): p.get("state") for p in run.get("processes") or [] if p.get("name")}
        if states != self._states:
            self._states = states
            self.call_later(self._show_problem)
        tabs = self.query_one(Tabs)
        for name in names:
            if name not in self.names:
                self.names.append(name)
                # Ids are unique per run: removing a tab is asynchronous, the next run may reuse the name.
                self._tab_serial += 1
                tab_id = f"tab-{self._tab_serial}"
                self._tab_names[tab_id] = name
                tabs.add_tab(Tab(name, id=tab_id))
        if self.view.source is None:
            self._attach_source()

    def _selected_name(self) -> str:
        return self._tab_names.get(self.query_one(Tabs).active or "", MERGED)

    def _attach_source(self) -> None:
        run_view = self._run_view()
        if run_view is None:
            self.view.set_source(None)
            return
        name = self._selected_name()
        source = run_view.merged if name == MERGED else run_view.readers.get(name)
        if source is not self.view.source:
            self.view.set_source(source)
            self.view.set_search(self.view.search)
        self._show_problem()
        self._update_status()

    def _show_problem(self) -> None:
        """Above a failed process's tab: the exception it died of (the last one in its log)."""
        banner = self.query_one("#log-problem", Static)
        name = self._selected_name()
        source = self.view.source
        text = None
        if name != MERGED and self._states.get(name) == "failed" and source is not None:
            count = source.line_count
            found = last_exception(source.lines(max(0, count - 200), count))
            text = f"{name} failed: {found}" if found else f"{name} failed (no exception line in its last 200 lines)"
        if text is None:
            banner.add_class("hidden")
        else:
            banner.update(Text(text, style="bold red"))
            banner.remove_class("hidden")

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        event.stop()
        self._attach_source()

    def logs_grew(self, names: tuple[str, ...]) -> None:
        if self.view.source is None:
            self._attach_source()
        name = self._selected_name()
        if name == MERGED or name in names:
            # The line count in the status line moves with the (throttled) resize: one repaint, not two.
            if self.view.update_size(throttle=True):
                self._update_status()

    def update_status(self) -> None:
        self._update_status()

    def _update_status(self) -> None:
        view = self.view
        self._counted = view.line_count
        parts = [
            f"{view.line_count:,} lines",
            "following" if view.follow else "paused (G: follow)",
            "wrap" if view.wrap else "no wrap",
        ]
        source = view.source
        if getattr(source, "hidden", None) is not None:
            state = "shown" if source.show_access else "hidden"
            parts.append(f"{source.hidden:,} access line{'' if source.hidden == 1 else 's'} {state} (a)")
        if source is not None and getattr(source, "has_earlier", False):
            parts.append(f"opened at tail, {source.unindexed_bytes / 1e6:.0f} MB earlier (E: load)")
        if getattr(source, "rotations", 0):
            parts.append(f"restarted {source.rotations}× (rotation/truncation)")
        if view.search:
            found = f" @ line {view.match_line + 1}" if view.match_line is not None else " (no match)"
            parts.append(f"search: {view.search!r}{found}")
        if self.run_id is None:
            parts = ["select a run to see its logs"]
        text = " · ".join(parts)
        if text != self._status:
            self._status = text
            self.query_one("#log-status", Static).update(text, layout=False)  # one fixed line: no relayout

    # -- actions ------------------------------------------------------------------------------
    def action_toggle_follow(self) -> None:
        self.view.toggle_follow()
        self._update_status()

    def action_toggle_access(self) -> None:
        source = self.view.source
        if getattr(source, "hidden", None) is None:
            self.notify("access lines are hidden in the merged view (all) only", timeout=2)
            return
        source.show_access = not source.show_access
        search = self.view.search
        self.view.set_source(source)  # line numbers differ between the two views
        self.view.set_search(search)
        self._update_status()

    def action_next_error(self) -> None:
        start = (self.view.match_line + 1) if self.view.match_line is not None else int(self.view.scroll_y)
        self._find_error(start, backwards=False)

    def action_prev_error(self) -> None:
        view = self.view
        if view.match_line is not None:
            start = view.match_line - 1
        else:
            start = view.line_count - 1 if view.follow else int(view.scroll_y)
        self._find_error(start, backwards=True)

    @work(thread=True, exclusive=True, group="log-search", exit_on_error=False, description="cannot search the log")
    def _find_error(self, start: int, backwards: bool) -> None:
        source = self.view.source
        if source is None:
            return
        found = _scan_lines(source, lambda plain: severity(plain) == "error", start, backwards)
        self.app.call_from_thread(self._found, "errors", found)

    def action_toggle_wrap(self) -> None:
        self.view.toggle_wrap()
        self._update_status()

    def action_marker(self) -> None:
        now = getattr(self.app, "clock", time.time)()
        self.view.add_marker(time.strftime("%H:%M:%S UTC", time.gmtime(now)))

    def action_next_tab(self) -> None:
        self.query_one(Tabs).action_next_tab()

    def action_prev_tab(self) -> None:
        self.query_one(Tabs).action_previous_tab()

    def start_filter(self) -> None:
        search = self.query_one("#log-search", Input)
        search.remove_class("hidden")
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        event.stop()
        self.view.set_search(event.value)
        top = self.view.line_count - 1 if self.view.follow else int(self.view.scroll_y)
        self._find(event.value, top, backwards=self.view.follow)
        self.view.focus()

    def on_key(self, event) -> None:
        search = self.query_one("#log-search", Input)
        if event.key == "escape" and search.has_focus:
            search.add_class("hidden")
            self.view.focus()
            event.stop()

    def action_next_match(self) -> None:
        if self.view.search:
            start = (self.view.match_line + 1) if self.view.match_line is not None else int(self.view.scroll_y)
            self._find(self.view.search, start, backwards=False)

    def action_prev_match(self) -> None:
        if self.view.search:
            start = (self.view.match_line - 1) if self.view.match_line is not None else self.view.line_count - 1
            self._find(self.view.search, start, backwards=True)

    @work(thread=True, exclusive=True, group="log-search", exit_on_error=False, description="cannot search the log")
    def _find(self, pattern: str, start: int, backwards: bool) -> None:
        source = self.view.source
        if source is None:
            return
        if hasattr(source, "search"):
            found = source.search(pattern, start, backwards=backwards)
        else:
            found = _scan(source, pattern, start, backwards)
        self.app.call_from_thread(self._found, pattern, found)

    def _found(self, pattern: str, line: int | None) -> None:
        if line is None:
            self.notify(f"no more matches for {pattern!r}", timeout=2)
            self.view.match_line = None
            self.view.refresh()
        else:
            self.view.jump_to(line)
        self._update_status()

    @work(
        thread=True, exclusive=True, group="log-earlier", exit_on_error=False, description="cannot load earlier lines"
    )
    def action_load_earlier(self) -> None:
        source = self.view.source
        if source is None or not getattr(source, "has_earlier", False):
            return
        added = source.load_earlier()
        self.app.call_from_thread(self._after_earlier, added)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self.post_message(self.WorkFailed(event.worker))

    def _after_earlier(self, added: int) -> None:
        view = self.view
        if added and not view.follow:
            view.scroll_to(y=view.scroll_y + added, animate=False, immediate=True)
        view.update_size()
        self._update_status()


def _scan(source, pattern: str, start: int, backwards: bool) -> int | None:
    needle = pattern.lower()
    return _scan_lines(source, lambda plain: needle in plain.lower(), start, backwards)


def _scan_lines(source, matches, start: int, backwards: bool, chunk: int = 512) -> int | None:
    """The first line from `start` (either way) whose plain text `matches`, read in chunks."""
    total = source.line_count
    first = getattr(source, "first_line", 0)
    if backwards:
        end = min(start, total - 1) + 1
        while end > first:
            begin = max(first, end - chunk)
            lines = source.lines(begin, end)
            for offset in range(len(lines) - 1, -1, -1):
                if matches(backend.strip_ansi(lines[offset])):
                    return begin + offset
            end = begin
        return None
    begin = max(first, start)
    while begin < total:
        lines = source.lines(begin, min(total, begin + chunk))
        if not lines:
            return None
        for offset, line in enumerate(lines):
            if matches(backend.strip_ansi(line)):
                return begin + offset
        begin += len(lines)
    return None
