"""Small display helpers shared by the panes.

Table cells use compact forms ("2h05m", "1.5M") stepped so that a live table repaints a cell every
few seconds, not every second; how a state is shown (icon, colour) is core.base.states' run_style()
and proc_style()."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.text import Text
from textual.filter import LineFilter

from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.base.fsutil import epoch_seconds
from hermes_rl.core.base.prices import tokens_text, usd_text

from .backend import plain_text

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Eighth blocks, empty first: the one glyph scale of every sparkline and block chart on the dashboard.
BLOCKS = " ▁▂▃▄▅▆▇█"


def safe(text: object) -> str:
    """Untrusted text (model output, environment files, logs, state files) as a widget may show it:
    core.readers.logs.plain_text. Every widget's output passes through it anyway (UntrustedTextFilter);
    calling it where text enters a widget also keeps cell widths and layout right."""
    return plain_text("" if text is None else str(text))


class UntrustedTextFilter(LineFilter):
    """The one rendering path for text on the dashboard's screen: every segment of every line of every
    widget (panes, views, dialogs, toasts, the header), whatever built it, goes through `safe` before it
    reaches the terminal. So an escape sequence in a completion, a docstring, a log or a run.json can
    neither retitle, clear nor reset the terminal, nor write its clipboard (OSC 52), and a new pane
    cannot forget it. Textual's own control segments are left alone."""

    def apply(self, segments: list[Segment], background) -> list[Segment]:
        if not any(_CONTROL.search(segment.text) for segment in segments if not segment.control):
            return segments
        # Each segment keeps its width, so the line stays aligned with what the compositor laid out.
        return [
            segment
            if segment.control or not _CONTROL.search(segment.text)
            else Segment(set_cell_size(safe(segment.text), cell_len(segment.text)), segment.style)
            for segment in segments
        ]


def spark(values: list[float], width: int = 16, scale: tuple[float, float] | None = None) -> str:
    """A text sparkline of the last `width` values, scaled to their own min..max or to `scale` (low,
    high): an accuracy on 0..1, so a saturated 0.96 is drawn near the top, not mid-range. The one-row
    case of block_rows."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return ""
    return block_rows(list(values), 1, scale)[0][0]


def block_rows(
    columns: list[float | None], height: int, scale: tuple[float, float] | None = None
) -> tuple[list[str], float | None, float | None]:
    """The plot as `height` text rows (top first), with the y range it spans: the values' own, or
    `scale` (low, high) when given (an accuracy on 0..1)."""
    values = [v for v in columns if v is not None]
    if not values:
        return [" " * len(columns)] * height, None, None
    low, high = scale if scale is not None else (min(values), max(values))
    columns = [None if v is None else min(high, max(low, v)) for v in columns]
    span = high - low
    levels = []
    last = None
    for value in columns:
        value = last if value is None else value  # a gap repeats the previous column (none before the first)
        last = value
        if value is None:
            levels.append(0)
        elif span <= 0:
            levels.append(height * 4)
        else:
            levels.append(1 + round((value - low) / span * (height * 8 - 1)))
    rows = []
    for row in range(height):
        floor = (height - 1 - row) * 8
        rows.append("".join(BLOCKS[max(0, min(8, level - floor))] for level in levels))
    return rows, low, high


FRACTION_SUFFIXES = ("percent_correct", "accuracy")  # metrics that are fractions: drawn on a fixed 0..1


def metric_scale(key: str) -> tuple[float, float] | None:
    return (0.0, 1.0) if key.endswith(FRACTION_SUFFIXES) else None


def trend(values: list[float]) -> str:
    """↑/↓/→ comparing the mean of the last few values with the few before."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return " "
    window = max(1, min(5, len(values) // 2))
    recent = sum(values[-window:]) / window
    before = sum(values[-2 * window : -window]) / window
    scale = max(abs(recent), abs(before), 1e-12)
    if abs(recent - before) / scale < 0.01:
        return "→"
    return "↑" if recent > before else "↓"


def trend_style(key: str, arrow: str) -> str:
    """An arrow's colour by what it means: green for better (a loss going down), red for worse."""
    if arrow not in ("↑", "↓"):
        return "grey62"
    better = (arrow == "↓") if "loss" in key else (arrow == "↑")
    return "green" if better else "red"


def eval_cell(first: float | None, last: float | None) -> Text:
    """The latest eval accuracy and which way it moved since the first eval ("0.96↑")."""
    if last is None:
        return Text("—", style="grey62")
    if first is None or abs(last - first) < 0.005:
        return Text(f"{last:.2f}")
    up = last > first
    return Text.assemble(
        (f"{last:.2f}", "bold green" if up else "bold red"), ("↑" if up else "↓", "green" if up else "red")
    )


def number(value, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def timestamp(value) -> float | None:
    """run.json times may be epoch floats or ISO strings (core.fsutil.epoch_seconds)."""
    return epoch_seconds(value)


def error_line(error: BaseException | None) -> str:
    """An error as one line for a toast or a pane: HermesError's message and hint, else type and text."""
    if isinstance(error, HermesError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def set_subtitle(widget, text: str) -> None:
    """Set a border subtitle only when it changes (setting it repaints the widget)."""
    if widget.border_subtitle != text:
        widget.border_subtitle = text


def cost_cell(run: Mapping[str, Any]) -> str:
    """A run's cost in a table: "$0.0123", "?" (tokens counted, no price for its model) or "—"."""
    if run.get("cost_usd") is not None:
        return usd_text(run["cost_usd"])
    return "?" if run.get("tokens") else "—"


def estimate_summary(est: dict) -> str:
    """The start dialog's cost line (core.runs.cost.estimate_start): "expected $0.43 for 800 steps
    (prefill 1.2M · sample 3.4M · train 5.6M tokens, prices as of 2025-10-01)", its length assumption, and
    what a missing price needs."""
    dated = f", prices as of {est['prices_as_of']}" if est.get("prices_as_of") else ""
    lines = [f"expected {est['text']} for {est['steps']} steps ({tokens_text(est['tokens'])}{dated})"]
    lines += [a for a in est.get("assumptions", [])[1:2]]  # where the lengths come from (measured or assumed)
    if est.get("price") is None:
        lines.append(f"no price for {est.get('model')}: the run shows its tokens and CPU time, not dollars")
    if est.get("budget_warning"):
        lines.append(est["budget_warning"])
    elif est.get("budget_usd"):
        lines.append(f"budget ${est['budget_usd']:g}: the run stops cleanly when its cost reaches it")
    return "\n".join(lines)
