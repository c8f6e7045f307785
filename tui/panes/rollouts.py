"""Rollouts (o): what the policy generated, step by step — steps on the left (newest first, followed
while the cursor is on the top row), the chosen step's groups and completions on the right with reward
and advantage, the step's best completion in green and its worst in red. `f` cycles a reward filter,
`/` searches the text of every kept completion. Opened at a step (a chart's cursor), it shows that
step or the nearest recorded one.

Cost while following a live run: a worker polls the run's rollouts.jsonl once a second and reads only
what was appended (core.readers.rollouts keeps a summary per step and the recent steps' groups; older
steps are read back by offset when shown). What changed marks parts of the view dirty — the steps
list, the shown step's completions, the title — and one flush (`_flush`, run once the messages already
queued are handled) redraws each dirty part once: a poll, the cursor moves it causes and a key press in
between cost one update. The steps list is rebuilt only when its rows change, the completions only when
the shown step, its groups or the filter change, the title only when its text does.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from .. import backend
from ..format import number, safe
from ..widgets.rowlist import RowList
from .prompt_history import PromptHistoryScreen

STEPS_SHOWN = 40  # steps listed before the list is laid out; then as many as fit
EDGE_ROWS = 3  # a chosen step this close to the window's edge moves the window (when there is more)
STEP_COLUMNS = [
    ("step", "step", 6),
    ("grp", "groups", 4),
    ("mean", "mean", 7),
    ("best", "best", 6),
    ("r=0", "zero", 5),  # completions that scored 0
]
TEXT_CELL = 160  # characters of a completion shown in its cell
POLL_S = 1.0  # how often the file is looked at (a stat; reading only what was appended)
# name, test on a completion's reward (None: every completion), the StepSummary count that says a step
# has such a completion (None: every step)
FILTERS = (
    ("all", None, None),
    ("zero reward", lambda r: r == 0, "zero"),
    ("reward > 0", lambda r: r is not None and r > 0, "positive"),
    ("best & worst", None, None),
)


def one_line(text: str, width: int) -> str:
    shown = safe(text.replace("\n", "⏎"))
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def step_extremes(groups: list[dict]) -> tuple[float | None, float | None]:
    rewards = [c["reward"] for g in groups for c in g["completions"] if c["reward"] is not None]
    return (max(rewards), min(rewards)) if rewards else (None, None)


def completion_matches(group: dict, item: dict, test, needle: str) -> bool:
    """Whether a completion passes the reward test and contains `needle` (lower case; in its text, its
    group's prompt, or the name of the environment that made the group: `/gsm8k` keeps one environment's)."""
    if test is not None and not test(item["reward"]):
        return False
    return (
        not needle
        or needle in item["text"].lower()
        or needle in group["prompt"].lower()
        or needle in (group.get("environment") or "").lower()
    )


class StepsList(RowList):
    """The steps, one line each: its rows shift every second while following (see RowList)."""

    BINDINGS = [Binding("enter", "select", "Completions", show=False, id="rollouts.open_step")]


class CompletionsTable(RowList):
    """The shown step's prompts and completions, a line each (a RowList: a live step changes every
    second); it scrolls when they do not all fit, texts are cut at the list's right edge."""


COMPLETION_COLUMNS = [
    ("grp", "group", 4),
    ("reward", "reward", 7),
    ("adv", "adv", 7),
    ("tok", "tokens", 4),
    ("finish", "finish", 6),
    ("completion", "text", None),
]


class TitleLine(Static):
    """One line whose updates never relayout the screen (its height is fixed)."""

    def show(self, text: str) -> None:
        if text != getattr(self, "_shown", None):
            self._shown = text
            self.update(text, layout=False)


class RolloutsScreen(Screen):
    """A full screen, not a modal: the live dashboard underneath is not re-composited on every update."""

    BINDINGS = [
        Binding("escape,q", "close", "Close", id="rollouts.close"),
        Binding("f", "cycle_filter", "Reward filter", id="rollouts.filter"),
        Binding("slash", "search", "Search text", id="rollouts.search"),
        Binding("p", "same_prompt", "Same prompt", id="rollouts.same_prompt"),
        Binding("left,h", "focus_steps", "Steps", show=False, id="rollouts.steps"),
        Binding("right,l", "focus_completions", "Completions", show=False, id="rollouts.completions"),
    ]

    def __init__(self, run_id: str, step: int | None = None):
        super().__init__()
        self.run_id = run_id
        self.reader = backend.run_rollouts(run_id)
        self.filter_index = 0
        self.query_text = ""
        self.step: int | None = None  # the step shown; None: follow the newest
        self.requested_step = step  # asked for (a chart's cursor), resolved to the nearest recorded step
        self.resolved_note = ""  # what the title says about that resolution
        self._resolved: int | None = None
        self.updates = {"steps": 0, "groups": 0, "title": 0}  # tables rebuilt or updated, title redrawn
        self._top: int | None = None  # the step on the window's first row; None: the window starts at the newest
        self._listed: list[int] = []  # the steps in the table, top to bottom
        self._step_rows: dict[int, tuple[int, list[str]]] = {}  # step -> (its summary's version, cells)
        self._groups_key: tuple | None = None  # what the completions table shows
        self._dirty: set[str] = set()
        self._flush_pending = False
        self._seen_version: tuple | None = None  # (the reader's version, the search criteria) last shown
        self._polling = False
        self._repoll = False
        self._search_result: tuple[tuple, dict[int, tuple[int, bool]]] = ((), {})  # (criteria, step -> (version, hit))

    def compose(self) -> ComposeResult:
        with Vertical(id="rollouts-box"):
            yield TitleLine("", id="rollouts-title")
            with Horizontal(id="rollouts-body"):
                yield StepsList(STEP_COLUMNS, id="rollouts-steps")
                yield CompletionsTable(
                    COMPLETION_COLUMNS, scrolls=True, max_auto_width=TEXT_CELL, id="rollouts-completions"
                )
            yield Input(placeholder="search completions (enter: apply, esc: clear)", id="rollouts-search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#rollouts-search", Input).display = False
        self.query_one(StepsList).focus()
        self._request("steps")
        self.poll()
        self.set_interval(POLL_S, self.poll)

    # -- reading (a worker thread) -----------------------------------------------------------------
    def _criteria(self) -> tuple[int, str]:
        return self.filter_index, self.query_text

    def poll(self) -> None:
        if self._polling:
            self._repoll = True  # the criteria changed meanwhile: poll again when this one is done
            return
        self._polling = True
        self._poll_worker(self._criteria())

    @work(thread=True, exclusive=True, group="rollouts", exit_on_error=False, description="cannot read rollouts")
    def _poll_worker(self, criteria: tuple[int, str]) -> None:
        try:
            self.reader.poll()
            if criteria[1]:
                self._search(criteria)
        finally:
            self.app.call_from_thread(self._polled)

    def _search(self, criteria: tuple[int, str]) -> None:
        """Which steps have a completion matching the search (and the reward filter): only steps new or
        changed since the last search with the same criteria are looked at."""
        filter_index, query = criteria
        previous_criteria, previous = self._search_result
        known = previous if previous_criteria == criteria else {}
        test, needle = FILTERS[filter_index][1], query.lower()
        found: dict[int, tuple[int, bool]] = {}
        for step in self.reader.steps():
            summary = self.reader.summary(step)
            if summary is None:
                continue
            seen = known.get(step)
            if seen is not None and seen[0] == summary.version:
                found[step] = seen
                continue
            groups = self.reader.groups(step, keep=False)
            hit = any(completion_matches(g, c, test, needle) for g in groups for c in g["completions"])
            found[step] = (summary.version, hit)
        self._search_result = (criteria, found)  # one assignment: the UI thread sees old or new, whole

    def _polled(self) -> None:
        self._polling = False
        if self._repoll:
            self._repoll = False
            self.poll()
        version = (self.reader.version, self._search_result[0])
        if version != self._seen_version:
            self._seen_version = version
            self._request("steps")

    # -- coalesced redraws --------------------------------------------------------------------------
    def _request(self, *parts: str) -> None:
        """Mark parts of the view dirty ("steps", "groups", "title"); the first request since the last
        flush schedules one flush after the messages already queued, so a burst of them redraws once."""
        self._dirty.update(parts)
        if not self._flush_pending:
            self._flush_pending = True
            self.call_later(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        dirty, self._dirty = self._dirty, set()
        if not self.is_mounted:
            return
        with self.app.batch_update():
            if "steps" in dirty:
                self._show_steps()
            self._show_groups()  # a no-op unless the shown step, its groups or the filter changed
            self._update_title()

    # -- showing -----------------------------------------------------------------------------------
    def visible_steps(self) -> list[int]:
        """Every step the reward filter and the search let through, newest first."""
        steps = self.reader.steps()
        _name, _test, count = FILTERS[self.filter_index]
        if self.query_text:
            criteria, found = self._search_result
            if criteria != self._criteria():
                return []  # searching: the worker is on it
            return [s for s in steps if found.get(s, (0, False))[1]]
        if count is not None:
            summaries = self.reader.summary
            return [s for s in steps if getattr(summaries(s), count, 0)]
        return steps

    def _window_size(self) -> int:
        return self.query_one(StepsList).capacity or STEPS_SHOWN

    def _window(self, steps: list[int]) -> list[int]:
        """The steps to list, as many as fit: the newest while following (or while the chosen step is
        among them), else a window around the chosen step, moved only when it nears the window's edge
        (so while a step is chosen, new steps arriving leave the list as it is)."""
        size, anchor = self._window_size(), self.step
        if len(steps) <= size or anchor is None or anchor not in steps:
            self._top = None
            return steps[:size]
        index = steps.index(anchor)
        top = 0 if self._top is None or self._top not in steps else steps.index(self._top)
        end = min(len(steps), top + size)
        inside = top <= index < end
        near_top = index - top < EDGE_ROWS and top > 0
        near_bottom = end - 1 - index < EDGE_ROWS and end < len(steps)
        if not inside or near_top or near_bottom:
            top = max(0, min(len(steps) - size, index - size // 2))
        self._top = None if top == 0 else steps[top]
        return steps[top : top + size]

    def _resolve_requested(self) -> None:
        if self.requested_step is None:
            return
        nearest = self.reader.nearest_step(self.requested_step)
        if nearest is None:
            return  # nothing recorded yet: asked again when rollouts arrive
        if nearest != self.requested_step:
            self.resolved_note = f"step {self.requested_step} not recorded: nearest {nearest}"
        self.step, self._resolved, self.requested_step = nearest, nearest, None

    def _show_steps(self) -> None:
        self._resolve_requested()
        table = self.query_one(StepsList)
        steps = self.visible_steps()
        if self.step is not None and self.step not in steps and steps:
            self.step = None  # the chosen step is filtered out: follow the newest
        listed = self._window(steps)
        rows = [(str(step), self._step_cells(step)) for step in listed]
        if rows != table.rows:
            self.updates["steps"] += 1
            table.replace_rows(rows)
        self._listed = listed
        table.move_cursor(listed.index(self.step) if self.step in listed else 0)

    def _step_cells(self, step: int) -> list[str]:
        """A step's row: from its summary, cached until the step changes (a live step gains groups)."""
        summary = self.reader.summary(step)
        cached = self._step_rows.get(step)
        if cached is None or cached[0] != summary.version:
            cells = [
                str(step),
                str(summary.groups),
                number(summary.mean, 3),
                number(summary.best, 3),
                str(summary.zero),
            ]
            cached = self._step_rows[step] = (summary.version, cells)
            if len(self._step_rows) > 4 * self._window_size():
                listed = set(self._listed)
                for old in [s for s in self._step_rows if s not in listed and s != step]:
                    del self._step_rows[old]
        return cached[1]

    def selected_step(self) -> int | None:
        key = self.query_one(StepsList).selected_key()
        return int(key) if key is not None else None

    def _show_groups(self) -> None:
        step = self.selected_step() if self._listed else None
        summary = self.reader.summary(step) if step is not None else None
        key = (step, summary.version if summary else None, self.filter_index, self.query_text)
        if key == self._groups_key:
            return
        self._groups_key = key
        self.updates["groups"] += 1
        self.query_one(CompletionsTable).replace_rows(self.completion_rows(step))

    def completion_rows(self, step: int | None) -> list[tuple[str, list]]:
        if step is None:
            return []
        groups = self.reader.groups(step)
        best, worst = step_extremes(groups)
        name, test, _count = FILTERS[self.filter_index]
        extremes_only = name == "best & worst"
        needle = self.query_text.lower()
        rows = []
        for index, group in enumerate(groups):
            items = [c for c in group["completions"] if completion_matches(group, c, test, needle)]
            if extremes_only:
                items = [c for c in items if c["reward"] in (best, worst)]
            if not items:
                continue
            rewards = [c["reward"] for c in group["completions"] if c["reward"] is not None]
            mean = sum(rewards) / len(rewards) if rewards else None
            where = f"{group['environment']} · " if group.get("environment") else ""
            prompt = Text(
                f"{where}prompt · mean {number(mean, 3)} · {one_line(group['prompt'], TEXT_CELL)}", style="bold"
            )
            label = str(group["group"]) if group["group"] is not None else "?"
            rows.append((f"p{index}", [label, "", "", "", "", prompt]))
            order = sorted(range(len(items)), key=lambda i: -(items[i]["reward"] or 0.0))
            for rank in order:
                item = items[rank]
                style = "green" if item["reward"] == best else "red" if item["reward"] == worst else ""
                rows.append(
                    (
                        f"c{index}.{rank}",
                        [
                            "",
                            Text(number(item["reward"], 3), style=style),
                            number(item["advantage"], 3),
                            str(item["tokens"]) if item["tokens"] is not None else "—",
                            safe(item["finish"]) or "—",
                            Text(one_line(item["text"], TEXT_CELL), style=style),
                        ],
                    )
                )
        return rows

    def _update_title(self) -> None:
        reader = self.reader
        parts = [f"[b]Rollouts[/b] · run {self.run_id}"]
        first, last = reader.first_step(), reader.latest_step()
        if last is not None:
            parts.append(f"steps {first}–{last}")
        else:
            parts.append("no rollouts recorded yet (the trainer writes rollouts.jsonl from its first step)")
        parts.append(f"filter: {FILTERS[self.filter_index][0]}")
        if self.query_text:
            if self._search_result[0] != self._criteria():
                parts.append(f"search: {self.query_text!r} (searching…)")
            else:
                matched = sum(1 for _version, hit in self._search_result[1].values() if hit)
                parts.append(f"search: {self.query_text!r} ({matched} steps match)")
        parts.append("following" if self.step is None else f"step {self.selected_step()}")
        if self.resolved_note:
            parts.append(self.resolved_note)
        if reader.capped_at is not None:
            parts.append(f"[yellow]recording capped at step {reader.capped_at}[/]")
        title = self.query_one("#rollouts-title", TitleLine)
        text = " · ".join(parts)
        if text != getattr(title, "_shown", None):
            self.updates["title"] += 1
        title.show(text)

    # -- events ------------------------------------------------------------------------------------
    def on_row_list_highlighted(self, event: RowList.Highlighted) -> None:
        event.stop()
        steps = self.query_one(StepsList)
        if event.row_list is not steps:
            return
        if event.row != steps.cursor_row or event.key != steps.selected_key():
            return  # stale: the cursor has moved again since (new rows, then a move to the chosen row)
        step = int(event.key)
        at_newest = event.row == 0 and self._top is None
        self.step = None if at_newest else step
        if self._resolved is not None and step != self._resolved:
            self.resolved_note, self._resolved = "", None  # moved on from the step it was opened at
        near_edge = (event.row < EDGE_ROWS and self._top is not None) or event.row >= len(self._listed) - EDGE_ROWS
        self._request("steps" if near_edge else "groups")

    def on_row_list_overflow(self, event: RowList.Overflow) -> None:
        """The cursor was pushed past the listed steps (page up/down): choose the step that far on."""
        event.stop()
        steps = self.visible_steps()
        if not steps or not self._listed:
            return
        edge = self._listed[-1] if event.rows > 0 else self._listed[0]
        index = steps.index(edge) + event.rows if edge in steps else 0
        index = max(0, min(len(steps) - 1, index))
        self.step = None if index == 0 else steps[index]
        self._request("steps")

    def on_row_list_jump(self, event: RowList.Jump) -> None:
        event.stop()
        steps = self.visible_steps()
        self.step = steps[-1] if event.where == "last" and len(steps) > 1 else None
        self._request("steps")

    def on_row_list_resized(self, event: RowList.Resized) -> None:
        event.stop()
        if isinstance(event.row_list, StepsList):
            self._request("steps")

    def on_row_list_selected(self, event: RowList.Selected) -> None:
        event.stop()
        if isinstance(event.row_list, StepsList):
            self.action_focus_completions()  # (a completion: nothing more to open)

    def action_close(self) -> None:
        search = self.query_one("#rollouts-search", Input)
        if search.display and search.has_focus:
            self._end_search(clear=True)
            return
        self.dismiss()

    def action_cycle_filter(self) -> None:
        self.filter_index = (self.filter_index + 1) % len(FILTERS)
        self._criteria_changed()

    def action_search(self) -> None:
        search = self.query_one("#rollouts-search", Input)
        search.display = True
        search.value = self.query_text
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_text = event.value.strip()
        self._end_search(clear=False)

    def _end_search(self, clear: bool) -> None:
        if clear:
            self.query_text = ""
        search = self.query_one("#rollouts-search", Input)
        search.display = False
        self.query_one(StepsList).focus()
        self._criteria_changed()

    def _criteria_changed(self) -> None:
        self._request("steps")
        if self.query_text and self._search_result[0] != self._criteria():
            self.poll()  # the search runs in the worker, now rather than at the next tick

    def action_same_prompt(self) -> None:
        """The highlighted group's prompt at every step it was sampled (tui/panes/prompt_history.py)."""
        key, step = self.query_one(CompletionsTable).selected_key(), self.selected_step()
        if not key or step is None:
            return
        groups = self.reader.groups(step)
        index = int(key[1:].split(".")[0])
        if index < len(groups):
            self.app.push_screen(PromptHistoryScreen(self.run_id, groups[index]["prompt"]))

    def action_focus_steps(self) -> None:
        self.query_one(StepsList).focus()

    def action_focus_completions(self) -> None:
        self.query_one(CompletionsTable).focus()
