"""[3] Runs: every run on this machine, newest first; the highlighted one drives the panes below."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Input

from hermes_rl.tui.format import set_subtitle, STATUS_STYLE, duration, number, spark, timestamp
from hermes_rl.tui.messages import RunSelected
from hermes_rl.tui.tables import NavTable, sort_bindings

SORTS = {"status": ("S", "status"), "environment": ("E", "environment"), "profile": ("P", "profile"),
         "age": ("A", "age"), "step": ("T", "step"), "reward": ("R", "reward")}


class RunsTable(NavTable):
    BINDINGS = sort_bindings("runs", SORTS)

    def action_sort(self, column: str) -> None:
        self.toggle_sort(column)
        self.parent.render_rows()


class RunsPane(Vertical):
    ALLOW_MAXIMIZE = True

    def __init__(self, clock, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[3] Runs"
        self.clock = clock
        self.runs: list[dict] = []
        self.sparks: dict[str, list[float]] = {}
        self.stalled: set[str] = set()
        self.filter_text = ""
        self._selected: str | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter runs (id, environment, status, profile)", id="runs-filter", classes="hidden")
        table = RunsTable(id="runs-table")
        for label, key in (("", "icon"), ("run", "run"), ("status", "status"), ("environment", "environment"),
                           ("profile", "profile"), ("age", "age"), ("step", "step"), ("reward", "reward")):
            table.add_column(label, key=key)
        table.add_column("reward trend", key="spark", width=12)
        yield table

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    def update_runs(self, runs: list[dict], sparks: dict, stalled: set[str]) -> None:
        self.runs, self.sparks, self.stalled = runs, sparks, stalled
        self.render_rows()

    def _visible(self) -> list[dict]:
        needle = self.filter_text.lower()
        rows = self.runs
        if needle:
            rows = [r for r in rows if needle in " ".join(str(r.get(k, "")) for k in
                                                            ("run_id", "environment", "status", "profile")).lower()]
        sorts = {
            "status": lambda r: r.get("status"),
            "environment": lambda r: r.get("environment"),
            "profile": lambda r: r.get("profile"),
            "age": lambda r: -(timestamp(r.get("created_at")) or 0),
            "step": lambda r: r.get("step"),
            "reward": lambda r: r.get("reward_mean"),
        }
        return self.table.sorted_rows(rows, sorts)

    def render_rows(self) -> None:
        now = self.clock()
        rows = []
        for run in self._visible():
            status = run.get("status") or "?"
            icon, colour = STATUS_STYLE.get(status, ("?", "white"))
            if run.get("run_id") in self.stalled:
                icon, colour, status = "⚠", "orange1", f"{status} (stalled)"
            created = timestamp(run.get("created_at"))
            step, total = run.get("step"), run.get("total_steps")
            step_text = f"{step if step is not None else '—'}/{total if total else '?'}"
            rows.append((run["run_id"], [
                Text(icon, style=colour), run["run_id"], Text(status, style=colour),
                run.get("environment") or "—", run.get("profile") or "—",
                duration(now - created) if created else "—", step_text,
                number(run.get("reward_mean"), 3), Text(spark(self.sparks.get(run["run_id"], []), 12), style="cyan"),
            ]))
        self.table.replace_rows(rows)
        set_subtitle(self, f"{len(rows)}/{len(self.runs)}" + (f" · filter {self.filter_text!r}" if self.filter_text else ""))
        self._announce()

    def _announce(self) -> None:
        key = self.table.selected_key()
        if key != self._selected:
            self._selected = key
            self.post_message(RunSelected(key))

    def select(self, run_id: str) -> bool:
        for index in range(self.table.row_count):
            if self.table.coordinate_to_cell_key((index, 0)).row_key.value == run_id:
                self.table.move_cursor(row=index)
                return True
        return False

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._announce()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._announce()

    def start_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "runs-filter":
            event.stop()
            self.filter_text = event.value.strip()
            self.render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "runs-filter":
            event.stop()
            self.table.focus()

    def on_key(self, event) -> None:
        box = self.query_one("#runs-filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            if not box.value:
                box.add_class("hidden")
            self.table.focus()
