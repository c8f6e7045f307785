"""[4] Processes of the selected run, as the supervisor reports them (the UI only renders the model),
with CPU and RSS trends from the samples the live loop takes, so a leak or a stuck process shows."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message

from hermes_rl.core.base.formatting import cell_duration, cell_size, exit_text, process_id_text, process_place_text
from hermes_rl.core.base.states import PROC_ALIVE, proc_style

from ..format import number, set_subtitle, spark
from ..widgets.tables import Column, NavTable, sort_bindings

SORTS = {
    "name": ("N", "name"),
    "pid": ("I", "pid"),
    "state": ("S", "state"),
    "health": ("H", "health"),
    "uptime": ("U", "uptime"),
    "cpu": ("C", "CPU %"),
    "rss": ("M", "memory"),
    "restarts": ("R", "restarts"),
    "exit": ("X", "exit code"),
}


class ProcessTable(NavTable):
    BINDINGS = sort_bindings("procs", SORTS) + [
        Binding("r", "restart", "Restart process", id="procs.restart"),
    ]

    class RestartAsked(Message):
        """r on a process: the pane asks the app to restart it."""

    def action_restart(self) -> None:
        self.post_message(self.RestartAsked())


TREND_POINTS = 12  # samples in a trend sparkline (about 12 s at the default 1 Hz sampling)
HEALTHY_STYLE = {"ok": "green", "healthy": "green", "ready": "green"}


def _port(proc: dict, ports: dict) -> str:
    port = proc.get("port")
    if isinstance(port, str) and port in ports:
        port = ports[port]
    if port is None and proc.get("name") in ports:
        port = ports[proc["name"]]
    return str(port) if port else ""


def _rss_spark(samples) -> str:
    """RSS trend on a scale from 90 % of its lowest sample: allocator jitter stays flat, a growth of
    a few percent climbs visibly."""
    values = list(samples)
    if not values:
        return ""
    return spark([0.9 * min(values), *values], TREND_POINTS + 1)[1:]


class ProcessesPane(Vertical):
    ALLOW_MAXIMIZE = True

    class RestartRequested(Message):
        """Restart one process of a run (the app asks for confirmation first)."""

        def __init__(self, run_id: str, name: str) -> None:
            super().__init__()
            self.run_id = run_id
            self.name = name

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[4] Processes"
        self.run: Mapping[str, Any] | None = None
        # (name, pid) -> (cpu samples, rss samples) of the shown run; a restarted process starts anew
        self.history: dict[tuple, tuple[deque, deque]] = {}
        self._history_run: str | None = None

    def compose(self) -> ComposeResult:
        table = ProcessTable(id="procs-table")
        table.define_columns(
            [
                Column("", "icon"),
                Column("name", "name"),
                Column("pid", "pid", drop=3),
                Column("state", "state"),
                Column("health", "health", drop=6),
                Column("uptime", "uptime", drop=3),
                Column("cpu%", "cpu", drop=2),
                Column("cpu trend", "cpu_trend", drop=4),
                Column("rss", "rss", drop=2),
                Column("rss trend", "rss_trend", drop=5),
                Column("restarts", "restarts", drop=1),
                Column("exit", "exit", drop=1),
                Column("port", "port", drop=7),
            ]
        )
        yield table

    @property
    def table(self) -> ProcessTable:
        return self.query_one(ProcessTable)

    def show(self, run: Mapping[str, Any] | None) -> None:
        self.run = run
        run_id = (run or {}).get("run_id")
        if run_id != self._history_run:
            self.history, self._history_run = {}, run_id
        for proc in (run or {}).get("processes") or []:
            cpu, rss = proc.get("cpu_percent"), proc.get("rss")
            if isinstance(cpu, (int, float)) and isinstance(rss, (int, float)) and proc.get("pid"):
                key = (proc.get("name"), proc.get("pid"))
                samples = self.history.get(key)
                if samples is None:
                    samples = self.history[key] = (deque(maxlen=TREND_POINTS), deque(maxlen=TREND_POINTS))
                samples[0].append(float(cpu))
                samples[1].append(float(rss))
        self.render_rows()

    def render_rows(self) -> None:
        run = self.run or {}
        procs = list(run.get("processes") or [])
        ports = run.get("ports") or {}
        procs = self.table.sorted_rows(
            procs,
            {
                "name": lambda p: p.get("name"),
                "pid": lambda p: p.get("pid"),
                "state": lambda p: p.get("state"),
                "health": lambda p: str(p.get("health")),
                "uptime": lambda p: p.get("uptime_s"),
                "cpu": lambda p: p.get("cpu_percent"),
                "rss": lambda p: p.get("rss"),
                "restarts": lambda p: p.get("restarts"),
                "exit": lambda p: p.get("exit_code"),
            },
        )
        rows = []
        for proc in procs:
            state = proc.get("state") or "?"
            icon, colour = proc_style(state)
            health = proc.get("health")
            health_style = HEALTHY_STYLE.get(str(health), "yellow" if health else "")
            health_text = Text(str(health) if health is not None else "—", style=health_style)
            alive = proc.get("alive", state in PROC_ALIVE)
            cpu = proc.get("cpu_percent")
            exit_code = proc.get("exit_code")
            cpu_history, rss_history = self.history.get((proc.get("name"), proc.get("pid")), ((), ()))
            rows.append(
                (
                    proc.get("name") or "?",
                    [
                        Text(icon, style=colour),
                        proc.get("name") or "?",
                        _where(proc),
                        Text(state, style=colour),
                        health_text,
                        cell_duration(proc.get("uptime_s")) if alive else "—",
                        f"{cpu:3.0f}" if isinstance(cpu, (int, float)) and alive else "—",
                        Text(spark(list(cpu_history), TREND_POINTS) if alive else "", style="cyan"),
                        cell_size(proc.get("rss")) if alive and proc.get("rss") else "—",
                        Text(_rss_spark(rss_history) if alive else "", style="magenta"),
                        number(proc.get("restarts") or 0),
                        Text(exit_text(exit_code, "—"), style="red" if exit_code not in (0, None) else ""),
                        _port(proc, ports),
                    ],
                )
            )
        self.table.replace_rows(rows)
        if run:
            set_subtitle(
                self,
                f"{run.get('run_id', '')} · {run.get('status', '')}"
                + (f" · {run['reason']}" if run.get("reason") else ""),
            )
        else:
            set_subtitle(self, "no run selected")

    def on_nav_table_sorted(self, event: NavTable.Sorted) -> None:
        event.stop()
        self.render_rows()

    def on_process_table_restart_asked(self, event: ProcessTable.RestartAsked) -> None:
        event.stop()
        name = self.table.selected_key()
        if self.run and self.run.get("run_id") and name:
            self.post_message(self.RestartRequested(self.run["run_id"], name))


def _where(proc: dict) -> str:
    """Its pid here; a job elsewhere by its id and where it runs, in its launcher's words (as `status`)."""
    if (proc.get("launcher") or "local") == "local":
        return process_id_text(proc, "—")
    return f"{process_id_text(proc, '—')} {process_place_text(proc, '')}".strip()
