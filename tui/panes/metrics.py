"""[6] Metrics: a sparkline, last value and trend per key; enter opens a full chart (textual-plotext).
Zoomed (z), the pane is a grid of charts, every metric at a glance ([ and ] page, w: x by wall time)."""

from __future__ import annotations

import bisect

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from hermes_rl.core.base.states import Metric

from .. import backend
from ..audit_view import panel
from ..format import metric_scale, number, set_subtitle, spark, trend, trend_style
from ..widgets.charts import ChartGrid
from ..widgets.rowlist import RowList

SMOOTHING = (0.0, 0.6, 0.9)
SPARK_WIDTH = 20
METRIC_NAME_WIDTH = 28  # longer names are cut: the last value and step stay in view


class MetricsTable(RowList):
    """A line per metric (a RowList: its sparklines change a few times a second while a run is live)."""

    BINDINGS = [Binding("enter", "select", "Chart", id="metrics.chart")]


RECENT_ROWS = 400
EVAL_KEY = str(Metric.EVAL_PERCENT_CORRECT)


def wall_series(rows: list[dict], key: str) -> list[tuple[float, float]]:
    """(seconds since the first row, value) of `key`, for an x axis by wall time."""
    start = next((r["time"] for r in rows if isinstance(r.get("time"), (int, float))), None)
    steps = dict(backend.metric_series(rows, key))
    if start is None:
        return []
    return [
        (r["time"] - start, steps[r["step"]])
        for r in rows
        if isinstance(r.get("time"), (int, float)) and r.get("step") in steps
    ]


class MetricsPane(Vertical):
    ALLOW_MAXIMIZE = True
    BINDINGS = [
        Binding("right_square_bracket", "grid_page(1)", "Next charts", id="metrics.grid_next"),
        Binding("left_square_bracket", "grid_page(-1)", "Prev charts", id="metrics.grid_prev"),
        Binding("w", "wall_time", "x: step/time", id="metrics.wall_time"),
    ]

    class ChartRequested(Message):
        """Enter (or a click) on a metric: the app opens its chart over the current rows."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[6] Metrics"
        self.rows: list[dict] = []
        self.run_id: str | None = None
        self._known_keys: set[str] = set()  # every metric the shown run ever logged
        self._first_eval: float | None = None  # the shown run's first eval accuracy (its baseline)
        self._older: dict[str, list[tuple[int, float]]] = {}  # last values of keys not in the recent rows
        self.wall = False

    def compose(self) -> ComposeResult:
        columns = [
            ("metric", "metric", None),
            ("history", "spark", SPARK_WIDTH, 1),  # gives way first: the last value and step are the news
            ("last", "last", 10),
            ("", "trend", 1),
            ("step", "step", None),
        ]
        audit = Static("", id="metrics-audit")  # is it learning, and if not why (tui/audit_view.py)
        audit.display = False
        yield audit
        yield MetricsTable(columns, scrolls=True, max_auto_width=METRIC_NAME_WIDTH, id="metrics-table")
        yield ChartGrid(id="metrics-grid", classes="hidden")

    @property
    def zoomed(self) -> bool:
        return self.screen.maximized is self

    def on_resize(self, _event) -> None:
        grid = self.query_one(ChartGrid)
        zoomed = self.zoomed
        if zoomed == grid.has_class("hidden"):
            had_focus = self.table.has_focus or grid.has_focus
            grid.set_class(not zoomed, "hidden")
            self.table.set_class(zoomed, "hidden")
            if had_focus:  # focus stays in the pane, so its keys (and the zoom) stay with it
                (grid if zoomed else self.table).focus()
        if zoomed:
            self._show_grid()

    def _show_grid(self) -> None:
        keys = backend.metric_keys([dict.fromkeys(self._known_keys, 0.0)])
        if self.wall:
            series = [(key, wall_series(self.rows, key)) for key in keys]
        else:
            series = [(key, [(float(s), v) for s, v in backend.metric_series(self.rows, key)]) for key in keys]
        self.query_one(ChartGrid).show(series, self.wall)
        self.call_after_refresh(self._grid_subtitle)

    def _grid_subtitle(self) -> None:
        grid = self.query_one(ChartGrid)
        x = "wall time" if self.wall else "step"
        set_subtitle(self, f"charts page {grid.page + 1}/{grid.pages} ([ ]) · x: {x} (w) · {len(grid.series)} metrics")

    def action_grid_page(self, delta: int) -> None:
        grid = self.query_one(ChartGrid)
        grid.page = (grid.page + delta) % grid.pages
        self._show_grid()

    def action_wall_time(self) -> None:
        self.wall = not self.wall
        if self.zoomed:
            self._show_grid()

    def show_audit(self, audit: dict | None) -> None:
        """The selected run's audit above its metrics (hidden until the run has one)."""
        line = self.query_one("#metrics-audit", Static)
        line.display = bool(audit)
        if audit:
            line.update(panel(audit))

    @property
    def table(self) -> MetricsTable:
        return self.query_one(MetricsTable)

    def show(self, run_id: str | None, rows: list[dict], trainer_step: int | None = None) -> None:
        # Sparklines and trends only look at the last SPARK_WIDTH values of each key in the recent rows
        # (one pass from the end), so work per update stays constant however long the run; the full
        # history is scanned once per selected run (to learn every key) and once for a key not logged
        # lately (the chart screen reads the full history when opened).
        recent = backend.recent_metric_points(rows[-RECENT_ROWS:], SPARK_WIDTH)
        if run_id != self.run_id or len(rows) < len(self.rows):
            self._known_keys = set(backend.metric_keys(rows))
            self._older = {}
            self._first_eval = None
        else:
            self._known_keys.update(recent)
        if self._first_eval is None and EVAL_KEY in self._known_keys:
            first = backend.metric_series(rows, EVAL_KEY)[:1]
            self._first_eval = first[0][1] if first else None
        self.run_id, self.rows = run_id, rows
        out = []
        for key in backend.metric_keys([dict.fromkeys(self._known_keys, 0.0)]):  # headline keys first
            series = recent.get(key)
            if not series:
                series = self._older.get(key)
                if series is None:
                    series = self._older[key] = backend.metric_series(rows, key)[-SPARK_WIDTH:]
            values = [v for _, v in series]
            arrow = trend(values)
            out.append(
                (
                    key,
                    [
                        key,
                        Text(spark(values, SPARK_WIDTH, metric_scale(key)), style="cyan"),
                        number(values[-1] if values else None),
                        Text(arrow, style=trend_style(key, arrow)),
                        str(series[-1][0]) if series else "—",
                    ],
                )
            )
        self.table.replace_rows(out)
        if self.zoomed:
            self._show_grid()
            return
        last_step = trainer_step if trainer_step is not None else (rows[-1].get("step") if rows else None)
        evals = recent.get(EVAL_KEY) or self._older.get(EVAL_KEY)
        accuracy = (
            f" · eval {evals[-1][1]:.2f}" + (f" (from {self._first_eval:.2f})" if self._first_eval is not None else "")
            if evals
            else ""
        )
        set_subtitle(
            self,
            (
                f"step {last_step}{accuracy} · {len(out)} metrics"
                if rows
                else ("no metrics yet" if run_id else "no run selected")
            ),
        )

    def on_row_list_selected(self, event: RowList.Selected) -> None:
        event.stop()
        self.post_message(self.ChartRequested(event.key))

    def on_row_list_highlighted(self, event: RowList.Highlighted) -> None:
        event.stop()


def smooth(values: list[float], alpha: float) -> list[float]:
    """Exponential moving average (alpha = weight of the past), like W&B's smoothing slider."""
    if alpha <= 0:
        return list(values)
    out, last = [], None
    for value in values:
        last = value if last is None else alpha * last + (1 - alpha) * value
        out.append(last)
    return out


CURSOR_JUMP = 10  # < and > move the step cursor by a tenth of the points


class ChartScreen(ModalScreen):
    """One metric over steps: axes, smoothing, log-y, a step cursor (, and .) whose step's rollouts `o`
    opens; updates live."""

    BINDINGS = [
        Binding("escape,q", "dismiss", "Close", id="chart.close"),
        Binding("s", "smoothing", "Smoothing", id="chart.smoothing"),
        Binding("l", "log_y", "Log y", id="chart.log_y"),
        Binding("right,n", "next_metric", "Next metric", id="chart.next"),
        Binding("left,p", "prev_metric", "Prev metric", id="chart.prev"),
        Binding("comma", "move_cursor(-1)", "Step ←", id="chart.cursor_left"),
        Binding("full_stop", "move_cursor(1)", "Step →", id="chart.cursor_right"),
        Binding("less_than_sign", "jump_cursor(-1)", "Step ←←", show=False, id="chart.cursor_back"),
        Binding("greater_than_sign", "jump_cursor(1)", "Step →→", show=False, id="chart.cursor_on"),
        Binding("o", "rollouts_at_cursor", "Rollouts at step", id="chart.rollouts"),
        Binding("question_mark", "app.help", "Help", show=False, id="chart.help"),  # (a modal: no app keys)
    ]

    class RolloutsRequested(Message):
        """`o`: the app opens the rollouts view at `step` (None: the newest step)."""

        def __init__(self, step: int | None) -> None:
            super().__init__()
            self.step = step

    def __init__(self, key: str, rows: list[dict]):
        super().__init__()
        self.key = key
        self.rows = rows
        self.smoothing_index = 1 if len(rows) > 20 else 0
        self.log_y = False
        self.cursor_step: int | None = None  # None: no cursor drawn (o then means the newest step)

    def _steps(self) -> list[int]:
        return [step for step, _ in backend.metric_series(self.rows, self.key)]

    def action_jump_cursor(self, direction: int) -> None:
        self.action_move_cursor(direction * max(1, len(self._steps()) // CURSOR_JUMP))

    def action_move_cursor(self, delta: int) -> None:
        """Move the step cursor by `delta` points; without a cursor yet, it starts from the newest."""
        steps = self._steps()
        if not steps:
            return
        if self.cursor_step is None:
            index = len(steps) - 1 + min(0, delta)
        else:
            index = bisect.bisect_left(steps, self.cursor_step) + delta
        self.cursor_step = steps[max(0, min(len(steps) - 1, index))]
        self.redraw()

    def action_rollouts_at_cursor(self) -> None:
        """The rollouts view at the cursor's step (the newest plotted one without a cursor); it shows
        the nearest recorded step when that one kept no rollouts."""
        steps = self._steps()
        step = self.cursor_step if self.cursor_step is not None else (steps[-1] if steps else None)
        self.post_message(self.RolloutsRequested(step))

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot

        with Vertical(id="chart-box"):
            yield Static("", id="chart-title")
            yield PlotextPlot(id="chart-plot")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def update_rows(self, rows: list[dict]) -> None:
        self.rows = rows
        self.redraw()

    def redraw(self) -> None:
        from textual_plotext import PlotextPlot

        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        series = backend.metric_series(self.rows, self.key)
        alpha = SMOOTHING[self.smoothing_index]
        notes = []
        if series:
            steps = [s for s, _ in series]
            values = [v for _, v in series]
            if self.log_y:
                if all(v > 0 for v in values):
                    plt.yscale("log")
                else:
                    notes.append("log-y needs positive values")
            if alpha > 0:
                plt.plot(steps, values, color="gray", marker="braille")
                plt.plot(steps, smooth(values, alpha), color="cyan", marker="braille", label=f"EMA {alpha}")
            else:
                plt.plot(steps, values, color="cyan", marker="braille")
            if self.cursor_step is not None:
                plt.vline(self.cursor_step, "yellow")
            scale = metric_scale(self.key)
            if scale is not None and not self.log_y:
                plt.ylim(*scale)  # an accuracy on 0..1: 0.96 reads as near the top, 0.00 as the bottom
            plt.xlabel("step")
        else:
            notes.append("no values yet")
        plt.title(self.key)
        plot.refresh()
        last = series[-1][1] if series else None
        low = min((v for _, v in series), default=None)
        high = max((v for _, v in series), default=None)
        cursor = ""
        if self.cursor_step is not None:
            value = dict(series).get(self.cursor_step)
            cursor = f"  [yellow]cursor step {self.cursor_step}: {number(value)}[/]"
        self.query_one("#chart-title", Static).update(
            f"[b]{self.key}[/b]  last {number(last)}  min {number(low)}  max {number(high)}  "
            f"points {len(series)}  smoothing {alpha}  log-y {'on' if self.log_y else 'off'}{cursor}"
            + ("  · " + "; ".join(notes) if notes else "")
        )

    def action_smoothing(self) -> None:
        self.smoothing_index = (self.smoothing_index + 1) % len(SMOOTHING)
        self.redraw()

    def action_log_y(self) -> None:
        self.log_y = not self.log_y
        self.redraw()

    def _step_metric(self, delta: int) -> None:
        keys = backend.metric_keys(self.rows)
        if self.key in keys and keys:
            self.key = keys[(keys.index(self.key) + delta) % len(keys)]
            self.redraw()

    def action_next_metric(self) -> None:
        self._step_metric(1)

    def action_prev_metric(self) -> None:
        self._step_metric(-1)
