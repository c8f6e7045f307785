"""Rollouts (o): what the policy generated, step by step — steps on the left (newest first, followed
while the cursor is on the top row), the chosen step's groups and completions on the right with reward
and advantage, the step's best completion in green and its worst in red. `f` cycles a reward filter,
`/` searches the text of every kept completion. Reads the run's rollouts.jsonl (core.readers.rollouts)
incrementally, in a worker, once a second."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from hermes_rl.tui import backend
from hermes_rl.tui.format import number
from hermes_rl.tui.widgets.tables import NavTable

STEPS_SHOWN = 50  # newest steps listed (a search looks at every kept step; --step in the CLI reads any)
TEXT_CELL = 160  # characters of a completion shown in its cell
POLL_S = 1.0  # each refresh rebuilds both tables: at 10 steps/s, ~9 % of a core per refresh a second
# name, test on a completion's reward (None: every completion)
FILTERS = (
    ("all", None),
    ("zero reward", lambda r: r == 0),
    ("reward > 0", lambda r: r is not None and r > 0),
    ("best & worst", None),
)


def one_line(text: str, width: int) -> str:
    shown = text.replace("\n", "⏎")
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def step_extremes(groups: list[dict]) -> tuple[float | None, float | None]:
    rewards = [c["reward"] for g in groups for c in g["completions"] if c["reward"] is not None]
    return (max(rewards), min(rewards)) if rewards else (None, None)


class StepsTable(NavTable):
    pass


class CompletionsTable(NavTable):
    pass


class RolloutsScreen(Screen):
    """A full screen, not a modal: the live dashboard underneath is not re-composited on every update."""

    BINDINGS = [
        Binding("escape,q", "close", "Close", id="rollouts.close"),
        Binding("f", "cycle_filter", "Reward filter", id="rollouts.filter"),
        Binding("slash", "search", "Search text", id="rollouts.search"),
        Binding("left,h", "focus_steps", "Steps", show=False, id="rollouts.steps"),
        Binding("right,l", "focus_completions", "Completions", show=False, id="rollouts.completions"),
    ]

    def __init__(self, run_id: str, step: int | None = None):
        super().__init__()
        self.run_id = run_id
        self.reader = backend.run_rollouts(run_id)
        self.filter_index = 0
        self.query_text = ""
        self.step: int | None = step  # the step shown; None: follow the newest
        self._shown_version = -1
        self._polling = False

    def compose(self) -> ComposeResult:
        with Vertical(id="rollouts-box"):
            yield Static("", id="rollouts-title")
            with Horizontal(id="rollouts-body"):
                steps = StepsTable(id="rollouts-steps")
                for label, key, width in (
                    ("step", "step", 6),
                    ("grp", "groups", 4),
                    ("mean", "mean", 7),
                    ("best", "best", 6),
                    ("zero", "zero", 5),
                ):
                    steps.add_column(label, key=key, width=width)
                yield steps
                table = CompletionsTable(id="rollouts-completions")
                for label, key, width in (
                    ("grp", "group", 4),
                    ("reward", "reward", 7),
                    ("adv", "adv", 7),
                    ("tok", "tokens", 4),
                    ("finish", "finish", 6),
                    ("completion", "text", None),
                ):
                    table.add_column(label, key=key, width=width)
                yield table
            yield Input(placeholder="search completions (enter: apply, esc: clear)", id="rollouts-search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#rollouts-search", Input).display = False
        self.query_one(StepsTable).focus()
        self.poll()
        self.set_interval(POLL_S, self.poll)

    # -- reading ----------------------------------------------------------------------------------
    def poll(self) -> None:
        if not self._polling:
            self._polling = True
            self._poll_worker()

    @work(thread=True, exclusive=True, group="rollouts", exit_on_error=False, description="cannot read rollouts")
    def _poll_worker(self) -> None:
        try:
            self.reader.poll()
        finally:
            self.app.call_from_thread(self._polled)

    def _polled(self) -> None:
        self._polling = False
        if self.reader.version != self._shown_version:
            self._shown_version = self.reader.version
            self.refresh_view()

    # -- showing ---------------------------------------------------------------------------------
    def _matches(self, group: dict, item: dict) -> bool:
        name, test = FILTERS[self.filter_index]
        if test is not None and not test(item["reward"]):
            return False
        if self.query_text:
            needle = self.query_text.lower()
            return needle in item["text"].lower() or needle in group["prompt"].lower()
        return True

    def visible_steps(self) -> list[int]:
        steps = self.reader.steps()
        if not self.query_text and FILTERS[self.filter_index][1] is None:
            return steps[:STEPS_SHOWN]
        shown = [s for s in steps if any(self._matches(g, c) for g in self.reader.groups(s) for c in g["completions"])]
        return shown[:STEPS_SHOWN]

    def refresh_view(self) -> None:
        steps_table = self.query_one(StepsTable)
        steps = self.visible_steps()
        rows = []
        for step in steps:
            groups = self.reader.groups(step)
            rewards = [c["reward"] for g in groups for c in g["completions"] if c["reward"] is not None]
            mean = sum(rewards) / len(rewards) if rewards else None
            rows.append(
                (
                    str(step),
                    [
                        str(step),
                        str(len(groups)),
                        number(mean, 3),
                        number(max(rewards) if rewards else None, 3),
                        str(sum(1 for r in rewards if r == 0)),
                    ],
                )
            )
        steps_table.replace_rows(rows)
        if self.step is not None and self.step in steps:
            steps_table.move_cursor(row=steps.index(self.step), animate=False)
        elif steps:
            steps_table.move_cursor(row=0, animate=False)
            self.step = None
        self.show_step(self.selected_step())
        self._update_title(steps)

    def selected_step(self) -> int | None:
        key = self.query_one(StepsTable).selected_key()
        return int(key) if key is not None else None

    def show_step(self, step: int | None) -> None:
        table = self.query_one(CompletionsTable)
        if step is None:
            table.replace_rows([])
            return
        groups = self.reader.groups(step)
        best, worst = step_extremes(groups)
        extremes_only = FILTERS[self.filter_index][0] == "best & worst"
        rows = []
        for group in groups:
            items = [c for c in group["completions"] if self._matches(group, c)]
            if extremes_only:
                items = [c for c in items if c["reward"] in (best, worst)]
            if not items:
                continue
            rewards = [c["reward"] for c in group["completions"] if c["reward"] is not None]
            mean = sum(rewards) / len(rewards) if rewards else None
            prompt = Text(f"prompt · mean {number(mean, 3)} · {one_line(group['prompt'], TEXT_CELL)}", style="bold")
            rows.append((f"p{group['group']}", [str(group["group"]), "", "", "", "", prompt]))
            order = sorted(range(len(items)), key=lambda i: -(items[i]["reward"] or 0.0))
            for rank in order:
                item = items[rank]
                style = "green" if item["reward"] == best else "red" if item["reward"] == worst else ""
                rows.append(
                    (
                        f"c{group['group']}.{rank}",
                        [
                            "",
                            Text(number(item["reward"], 3), style=style),
                            number(item["advantage"], 3),
                            str(item["tokens"]) if item["tokens"] is not None else "—",
                            item["finish"] or "—",
                            Text(one_line(item["text"], TEXT_CELL), style=style),
                        ],
                    )
                )
        table.replace_rows(rows)

    def _update_title(self, steps: list[int]) -> None:
        reader = self.reader
        parts = [f"[b]Rollouts[/b] · run {self.run_id}"]
        if reader.by_step:
            parts.append(f"steps {min(reader.by_step)}–{max(reader.by_step)}")
        else:
            parts.append("no rollouts recorded yet (the trainer writes rollouts.jsonl from its first step)")
        parts.append(f"filter: {FILTERS[self.filter_index][0]}")
        if self.query_text:
            parts.append(f"search: {self.query_text!r} ({len(steps)} steps match)")
        parts.append("following" if self.step is None else f"step {self.selected_step()}")
        if reader.capped_at is not None:
            parts.append(f"[yellow]recording capped at step {reader.capped_at}[/]")
        self.query_one("#rollouts-title", Static).update(" · ".join(parts))

    # -- events ----------------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is not self.query_one(StepsTable):
            return
        event.stop()
        step = self.selected_step()
        if step is None:
            return
        self.step = None if event.cursor_row == 0 else step
        self.show_step(step)
        self._update_title(self.visible_steps())

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table is self.query_one(StepsTable):
            self.action_focus_completions()

    def action_close(self) -> None:
        search = self.query_one("#rollouts-search", Input)
        if search.display and search.has_focus:
            self._end_search(clear=True)
            return
        self.dismiss()

    def action_cycle_filter(self) -> None:
        self.filter_index = (self.filter_index + 1) % len(FILTERS)
        self.refresh_view()

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
        self.query_one(StepsTable).focus()
        self.refresh_view()

    def action_focus_steps(self) -> None:
        self.query_one(StepsTable).focus()

    def action_focus_completions(self) -> None:
        self.query_one(CompletionsTable).focus()
