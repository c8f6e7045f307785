"""Compare runs (space marks runs in [3], c opens this; the palette opens a whole sweep): one metric of
every marked run on one chart (a colour each, legend, aligned by step; n/p change the metric, s its
EMA smoothing), the config values that differ and the first/best/last of the headline metrics side
by side (core.runs.compare)."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from .. import backend
from ..format import number
from .metrics import SMOOTHING, smooth

NARROW = 120  # below this many columns the config and metric tables stack instead of sharing a row
COLOURS = ("cyan", "magenta", "green", "orange", "blue", "red", "yellow", "white")


class CompareScreen(ModalScreen):
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close", id="compare.close"),
        Binding("right,n", "next_metric", "Next metric", id="compare.next"),
        Binding("left,p", "prev_metric", "Prev metric", id="compare.prev"),
        Binding("s", "smoothing", "Smoothing", id="compare.smoothing"),
    ]

    def __init__(self, run_ids: list[str], title: str | None = None):
        super().__init__()
        self.run_ids = run_ids
        self.title_note = title  # what is compared, when more than a list of runs (a sweep)
        self.smoothing_index: int | None = None  # None: chosen by the series' length once loaded
        self.rows: dict[str, list[dict]] = {}
        self.keys: list[str] = []
        self.key = "reward/mean"
        self.comparison: dict | None = None

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot

        with Vertical(id="compare-box"):
            yield Static("", id="compare-title")
            yield PlotextPlot(id="compare-plot")
            with Horizontal(id="compare-tables"):
                yield DataTable(id="compare-config", cursor_type="none", zebra_stripes=True)
                yield DataTable(id="compare-metrics", cursor_type="none", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#compare-title", Static).update(f"comparing {', '.join(self.run_ids)}…")
        self._load()

    def on_resize(self, _event) -> None:
        # Side by side the two tables clip their numbers under NARROW columns: there they stack.
        self.query_one("#compare-box").set_class(self.size.width < NARROW, "narrow")

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False, description="cannot compare the runs")
    def _load(self) -> None:
        comparison = backend.compare_runs(self.run_ids)
        rows = {}
        for run_id in self.run_ids:
            reader = backend.run_metrics(run_id)
            reader.poll()
            rows[run_id] = reader.rows
        self.app.call_from_thread(self._loaded, comparison, rows)

    def _loaded(self, comparison: dict, rows: dict[str, list[dict]]) -> None:
        self.comparison, self.rows = comparison, rows
        keys: set[str] = set()
        for run_rows in rows.values():
            keys.update(backend.metric_keys(run_rows))
        self.keys = backend.metric_keys([dict.fromkeys(keys, 0.0)])
        if self.keys and self.key not in self.keys:
            self.key = self.keys[0]
        if self.smoothing_index is None:  # noisy batch rewards read best smoothed once there are many points
            longest = max((len(r) for r in rows.values()), default=0)
            self.smoothing_index = 1 if longest > 20 else 0
        self._fill_tables()
        self.redraw()

    def _fill_tables(self) -> None:
        comparison = self.comparison or {}
        ids = self.run_ids
        config = self.query_one("#compare-config", DataTable)
        config.clear(columns=True)
        config.add_column("config that differs", key="key")
        for run_id in ids:
            config.add_column(run_id, key=run_id)
        differences = comparison.get("config_differences") or []
        for row in differences:
            config.add_row(row["key"], *(str(row["values"].get(r)) for r in ids))
        if not differences:
            config.add_row("(same config: paths, ports and names aside)", *("" for _ in ids))
        metrics = self.query_one("#compare-metrics", DataTable)
        metrics.clear(columns=True)
        metrics.add_column("first → best@step → last", key="metric")
        for run_id in ids:
            metrics.add_column(run_id, key=run_id)
        for key, per_run in (comparison.get("metrics") or {}).items():
            cells = []
            for run_id in ids:
                m = per_run.get(run_id)
                if m is None:
                    cells.append("—")
                    continue
                best = f" → {number(m['best'], 3)}@{m['best_step']}" if m.get("best") is not None else ""
                cells.append(f"{number(m['first'], 3)}{best} → {number(m['last'], 3)}")
            metrics.add_row(key, *cells)

    def redraw(self) -> None:
        from textual_plotext import PlotextPlot

        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        shown = 0
        alpha = SMOOTHING[self.smoothing_index or 0]
        for index, run_id in enumerate(self.run_ids):
            series = backend.metric_series(self.rows.get(run_id) or [], self.key)
            if not series:
                continue
            shown += 1
            plt.plot(
                [s for s, _ in series],
                smooth([v for _, v in series], alpha),
                color=COLOURS[index % len(COLOURS)],
                marker="braille",
                label=run_id,
            )
        plt.title(self.key)
        plt.xlabel("step")
        plot.refresh()
        runs = {r["run_id"]: r for r in (self.comparison or {}).get("runs") or []}
        legend = "  ".join(
            f"[{COLOURS[i % len(COLOURS)]}]■[/] {run_id} {runs.get(run_id, {}).get('environment') or ''}"
            for i, run_id in enumerate(self.run_ids)
        )
        smoothing = f"EMA {alpha}" if alpha else "raw"
        self.query_one("#compare-title", Static).update(
            (f"{self.title_note} · " if self.title_note else "")
            + f"[b]{self.key}[/b] ({smoothing}, s) · {shown}/{len(self.run_ids)} runs have it · n/p: metric · {legend}"
        )

    def action_smoothing(self) -> None:
        self.smoothing_index = ((self.smoothing_index or 0) + 1) % len(SMOOTHING)
        self.redraw()

    def _step_metric(self, delta: int) -> None:
        if self.key in self.keys:
            self.key = self.keys[(self.keys.index(self.key) + delta) % len(self.keys)]
            self.redraw()

    def action_next_metric(self) -> None:
        self._step_metric(1)

    def action_prev_metric(self) -> None:
        self._step_metric(-1)
