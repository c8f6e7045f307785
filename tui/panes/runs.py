"""[3] Runs: every run on this machine, newest first, a sweep's runs together under its newest; the
highlighted one drives the panes below. `reward` is the mean of the last REWARD_WINDOW steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable, Static

from hermes_rl.core.base.formatting import cell_duration, lineage
from hermes_rl.core.base.states import REWARD_WINDOW, run_style, status_label

from ..audit_view import reason_line, verdict_cell
from ..format import cost_cell, eval_cell, number, set_subtitle, spark, timestamp
from ..widgets.filter_box import FilterBox
from ..widgets.tables import Column, NavTable, sort_bindings

AGE_TICK_S = 1.0  # how often the age column is recounted between live updates
YOUNG_S = 86400.0  # runs younger than this are recounted every tick, the others every YOUNG_EVERY_TICKS
YOUNG_EVERY_TICKS = 60

SORTS = {
    "status": ("S", "status"),
    "environment": ("E", "environment"),
    "profile": ("P", "profile"),
    "age": ("A", "age"),
    "step": ("T", "step"),
    "eval": ("V", "eval"),
    "reward": ("R", "reward"),
}


def group_sweeps(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows in their order, except that a sweep's runs follow its first (newest) one, so a sweep reads
    as one block however other runs were started between its runs."""
    out: list[Mapping[str, Any]] = []
    placed: set[str] = set()
    for row in rows:
        sweep = row.get("sweep_id")
        if not sweep:
            out.append(row)
        elif sweep not in placed:
            placed.add(sweep)
            out.extend(r for r in rows if r.get("sweep_id") == sweep)
    return out


class RunsTable(NavTable):
    BINDINGS = sort_bindings("runs", SORTS)


class RunsPane(Vertical):
    ALLOW_MAXIMIZE = True
    BINDINGS = [
        Binding("space", "mark", "Mark run", id="runs.mark"),
        Binding("c", "compare", "Compare marked", id="runs.compare"),
    ]

    class CompareRequested(Message):
        """c with runs marked: the app opens the comparison of these runs (in marking order)."""

        def __init__(self, run_ids: list[str]) -> None:
            super().__init__()
            self.run_ids = run_ids

    class Selected(Message):
        """The highlighted run changed (None: no run shown). Posted once per change: live updates that
        repaint the table with the cursor on the same run post nothing."""

        def __init__(self, run_id: str | None) -> None:
            super().__init__()
            self.run_id = run_id

    def __init__(self, clock, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[3] Runs"
        self.clock = clock
        self.runs: Sequence[Mapping[str, Any]] = []
        self.sparks: dict[str, list[float]] = {}
        self.stalled: set[str] = set()
        self.filter_text = ""
        self._selected: str | None = None
        self.marked: list[str] = []  # runs to compare, in the order they were marked
        self.queued = 0  # sweep runs waiting for a place under the local-run limit

    def compose(self) -> ComposeResult:
        yield FilterBox("filter runs (id, environment, status, profile)", id="runs-filter")
        table = RunsTable(id="runs-table")
        table.define_columns(
            [
                Column("", "icon"),
                Column("run", "run"),
                Column("status", "status"),
                # Whether the numbers mean learning (audit) and what they cost stay before the trend, age
                # and environment: at 160x48 the dashboard's runs pane shows both without zoom.
                Column("environment", "environment", drop=4),
                Column("profile", "profile", drop=7),  # the first to give way
                Column("age", "age", drop=5),
                Column("step", "step", drop=2),
                Column("eval", "eval", drop=1),
                Column(f"reward ({REWARD_WINDOW})", "reward", drop=1),
                Column("reward trend", "spark", drop=6, width=12),
                Column("audit", "audit", drop=2, width=9),  # is it learning (tui/audit_view.py)
                Column("cost", "cost", drop=3),  # docs/cost.md
            ]
        )
        yield table
        health = Static("", id="runs-health")  # why the highlighted run does not progress, and what to do
        health.display = False
        yield health

    def on_mount(self) -> None:
        # The live worker posts the runs when they change; a run that is starting changes nothing for
        # seconds, so its age is counted here (a frozen "0s" over a 25 s start is not so).
        self._ages_shown: list[str] = []
        self._young: list[tuple[int, float]] = []  # (index in runs, created_at) of the runs under YOUNG_S
        self._age_ticks = 0
        self.set_interval(AGE_TICK_S, self._tick_ages)

    def _ages(self) -> list[str]:
        now = self.clock()
        return [cell_duration(now - c) if (c := timestamp(r.get("created_at"))) else "—" for r in self.runs]

    def _tick_ages(self) -> None:
        # Every second only the runs younger than a day (their age shows seconds, minutes or hours); all
        # of them once a minute: thousands of old runs would otherwise cost the idle dashboard CPU.
        self._age_ticks += 1
        if not self.runs:
            return
        if self._age_ticks % YOUNG_EVERY_TICKS and len(self._ages_shown) == len(self.runs):
            now = self.clock()
            if all(cell_duration(now - created) == self._ages_shown[i] for i, created in self._young):
                return
        if self._ages() != self._ages_shown:
            self.render_rows()

    def _show_health(self) -> None:
        """The highlighted run's health reason and tip under the table (hidden when work flows)."""
        key = self.table.selected_key()
        run = next((r for r in self.runs if r.get("run_id") == key), {})
        health = run.get("health") or {}
        line = self.query_one("#runs-health", Static)
        audit = reason_line(run.get("audit"))
        if health.get("reason"):
            text = Text(f"⚠ {health['reason']}", style="bold orange1")
            if health.get("tip"):
                text.append(f"\n  tip: {health['tip']}", style="orange1")
            if audit is not None:
                text.append("\n").append_text(audit)
            line.update(text)
        elif audit is not None:
            line.update(audit)
        line.display = bool(health.get("reason")) or audit is not None

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    def update_runs(self, runs: Sequence[Mapping[str, Any]], sparks: dict, stalled: set[str], queued: int = 0) -> None:
        self.runs, self.sparks, self.stalled, self.queued = runs, sparks, stalled, queued
        self.render_rows()

    def _visible(self) -> list[Mapping[str, Any]]:
        needle = self.filter_text.lower()
        rows = self.runs
        if needle:
            rows = [
                r
                for r in rows
                if needle
                in " ".join(
                    str(r.get(k, "")) for k in ("run_id", "environment", "status", "profile", "sweep_id")
                ).lower()
            ]
        sorts = {
            "status": lambda r: r.get("status"),
            "environment": lambda r: r.get("environment"),
            "profile": lambda r: r.get("profile"),
            "age": lambda r: -(timestamp(r.get("created_at")) or 0),
            "step": lambda r: r.get("step"),
            "eval": lambda r: r.get("eval_last"),
            "reward": lambda r: r.get("reward"),
            "cost": lambda r: r.get("cost_usd"),
        }
        if self.table.sort_column is None:
            return group_sweeps(rows)
        return self.table.sorted_rows(rows, sorts)

    def render_rows(self) -> None:
        now = self.clock()
        self._ages_shown = self._ages()
        self._young = [
            (i, c) for i, r in enumerate(self.runs) if (c := timestamp(r.get("created_at"))) and now - c < YOUNG_S
        ]
        rows = []
        resumed = lineage(self.runs)
        for run in self._visible():
            status = status_label(run.get("status") or "?", run.get("reason"))  # "completed (budget)"
            icon, colour = run_style(status)
            if run.get("run_id") in self.stalled:
                icon, colour, status = "⚠", "orange1", f"{status} (stalled)"
            elif (run.get("health") or {}).get("reason"):
                icon, colour = "⚠", "orange1"
                state = run["health"].get("state")  # None: a starting run waiting on a process that logged a problem
                status = f"{status} ({state.replace('_', ' ')})" if state else status
            if run["run_id"] in self.marked:
                icon, colour = "◆", "bold magenta"
            created = timestamp(run.get("created_at"))
            step, total = run.get("step"), run.get("total_steps")
            step_text = f"{step if step is not None else '—'}/{total if total else '?'}"
            rows.append(
                (
                    run["run_id"],
                    [
                        Text(icon, style=colour),
                        run["run_id"],
                        Text(status, style=colour),
                        (run.get("environment") or "—")
                        + (f" {resumed[run['run_id']]}" if run["run_id"] in resumed else "")  # resumed from
                        + (f" ⊞{run['sweep_id']}" if run.get("sweep_id") else ""),  # one of a sweep's runs
                        run.get("profile") or "—",
                        cell_duration(now - created) if created else "—",
                        step_text,
                        eval_cell(run.get("eval_first"), run.get("eval_last")),
                        number(run.get("reward"), 3),
                        Text(spark(self.sparks.get(run["run_id"], []), 12), style="cyan"),
                        verdict_cell(run.get("audit")),
                        cost_cell(run),
                    ],
                )
            )
        self.table.replace_rows(rows)
        set_subtitle(
            self,
            f"{len(rows)}/{len(self.runs)}"
            + (f" · filter {self.filter_text!r}" if self.filter_text else "")
            + (f" · {len(self.marked)} marked (c: compare)" if self.marked else "")
            + (f" · {self.queued} queued in sweeps" if self.queued else ""),
        )
        self._announce()

    def _announce(self) -> None:
        self._show_health()
        key = self.table.selected_key()
        if key != self._selected:
            self._selected = key
            self.post_message(self.Selected(key))

    def select(self, run_id: str) -> bool:
        for index in range(self.table.row_count):
            if self.table.coordinate_to_cell_key(Coordinate(index, 0)).row_key.value == run_id:
                self.table.move_cursor(row=index)
                return True
        return False

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._announce()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._announce()

    def on_nav_table_sorted(self, event: NavTable.Sorted) -> None:
        event.stop()
        self.render_rows()

    def action_mark(self) -> None:
        key = self.table.selected_key()
        if key is None:
            return
        if key in self.marked:
            self.marked.remove(key)
        else:
            self.marked.append(key)
        self.render_rows()

    def action_compare(self) -> None:
        chosen = list(self.marked)
        if len(chosen) < 2:
            current = self.table.selected_key()
            if current and current not in chosen:
                chosen.append(current)
        if len(chosen) < 2:
            self.notify("mark two or more runs with space, then c", severity="warning")
            return
        self.post_message(self.CompareRequested(chosen))

    def start_filter(self) -> None:
        self.query_one(FilterBox).open()

    def on_filter_box_changed(self, event: FilterBox.Changed) -> None:
        event.stop()
        self.filter_text = event.control.text
        self.render_rows()

    def on_filter_box_left(self, event: FilterBox.Left) -> None:
        event.stop()
        self.table.focus()
