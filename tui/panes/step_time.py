"""Where step time goes: the trainer's time/… phases of each step as one stacked bar per step (enter
on a time/… metric in [6], or the palette). The title names the dominant phase, as `hermes-rl status`."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from hermes_rl.core.base.states import STEP_PHASES, STEP_TIME

from .. import backend

PHASE_COLOURS = ("orange", "blue", "cyan", "green", "magenta", "red", "white")  # one per STEP_PHASES entry
MAX_BARS = 60  # more steps than this are averaged in buckets, so each bar stays readable


def phase_rows(rows: list[dict]) -> list[dict]:
    """The trainer rows that record a step's phases."""
    return [r for r in rows if isinstance(r.get(STEP_TIME), (int, float)) and isinstance(r.get("step"), int)]


def bucketed(rows: list[dict], bars: int = MAX_BARS) -> tuple[list[int], dict[str, list[float]]]:
    """(the last step of each bar, {phase: mean seconds per bar}) over at most `bars` bars."""
    size = max(1, -(-len(rows) // bars))
    steps: list[int] = []
    phases: dict[str, list[float]] = {key: [] for key in STEP_PHASES}
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        steps.append(chunk[-1]["step"])
        for key in STEP_PHASES:
            values = [r.get(key) for r in chunk]
            phases[key].append(sum(v for v in values if isinstance(v, (int, float))) / len(chunk))
    return steps, phases


class StepTimeScreen(ModalScreen):
    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="steptime.close")]

    def __init__(self, rows: list[dict]):
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot

        with Vertical(id="chart-box"):
            yield Static("", id="steptime-title")
            yield PlotextPlot(id="steptime-plot")
        yield Footer()

    def on_mount(self) -> None:
        self.call_after_refresh(self.redraw)  # once the plot inside the box is mounted too

    def update_rows(self, rows: list[dict]) -> None:
        self.rows = rows
        if self.query("#steptime-plot"):
            self.redraw()

    def redraw(self) -> None:
        from textual_plotext import PlotextPlot

        rows = phase_rows(self.rows)
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        if rows:
            steps, phases = bucketed(rows)
            shown = [key for key in STEP_PHASES if any(phases[key])]
            # textual-plotext's stub gives stacked_bar one `label` and one colour; plotext takes `labels` and
            # a colour per series, as called here.
            plt.stacked_bar(  # type: ignore[call-arg]
                steps,
                [phases[key] for key in shown],
                labels=[STEP_PHASES[key] for key in shown],
                color=[PHASE_COLOURS[list(STEP_PHASES).index(key)] for key in shown],  # type: ignore[arg-type]
            )
            plt.xlabel("step")
            plt.ylabel("seconds")
        plt.title("where step time goes")
        plot.refresh()
        found = backend.step_time_of(rows)
        title = f"{found['text']} (mean of the last {found['steps']})" if found else "no step recorded its phases yet"
        self.query_one("#steptime-title", Static).update(f"[b]{title}[/b]")
