"""A grid of small metric charts drawn as text: each cell a block chart with the metric's name, last
value and trend, paged when there are more metrics than fit. One widget renders the whole grid, so a
live update costs one repaint however many charts are shown."""

from __future__ import annotations

import math

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import block_rows, metric_scale, number, trend, trend_style

CELL_MIN_WIDTH = 36
CELL_HEIGHT = 10  # title + plot rows + axis line + a blank line
PLOT_ROWS = CELL_HEIGHT - 3


def resample(points: list[tuple[float, float]], width: int, x_range=None) -> list[float | None]:
    """`width` columns over `x_range` (default: that of `points`): the mean of the values falling in
    each column (None where none falls)."""
    if width <= 0:
        return []
    if not points:
        return [None] * width
    low, high = x_range or (points[0][0], points[-1][0])
    span = high - low
    sums = [0.0] * width
    counts = [0] * width
    for x, y in points:
        index = 0 if span <= 0 else max(0, min(width - 1, int((x - low) / span * width)))
        sums[index] += y
        counts[index] += 1
    return [s / c if c else None for s, c in zip(sums, counts)]


def _axis_label(value: float, wall: bool) -> str:
    if wall:
        return f"{value:.0f}s"
    return f"{int(value)}" if float(value).is_integer() else number(value, 3)


def chart_cell(name: str, points: list[tuple[float, float]], width: int, wall: bool, x_range=None) -> list[Text]:
    """One chart, CELL_HEIGHT lines of `width` cells: title, plot with y labels, x axis over `x_range`
    (the same for every chart of a grid, so their steps line up)."""
    values = [y for _, y in points]
    arrow = trend(values[-40:])
    title = Text(no_wrap=True, overflow="ellipsis")
    value = f"  {number(values[-1] if values else None)} "
    title.append(name[: max(1, width - len(value) - 1)], style="bold")  # the name gets what the value leaves
    title.append(value, style="")
    title.append(arrow, style=trend_style(name, arrow))
    label_width = 8
    plot_width = max(4, width - label_width - 2)
    rows, low, high = block_rows(resample(points, plot_width, x_range), PLOT_ROWS, metric_scale(name))
    lines = [title]
    for index, row in enumerate(rows):
        label = number(high, 3) if index == 0 else number(low, 3) if index == len(rows) - 1 else ""
        line = Text(no_wrap=True)
        line.append(f"{label:>{label_width}} ", style="dim")
        line.append(row, style="cyan")
        lines.append(line)
    axis = Text(no_wrap=True, style="dim")
    if points:
        first, last = x_range or (points[0][0], points[-1][0])
        left, right = _axis_label(first, wall), _axis_label(last, wall)
        gap = max(1, plot_width - len(left) - len(right))
        axis.append(" " * (label_width + 1) + left + " " * gap + right)
    else:
        axis.append(" " * (label_width + 1) + "no values yet")
    lines.append(axis)
    lines.append(Text(""))
    for line in lines:
        line.truncate(width, pad=True)
    return lines


class ChartGrid(Widget, can_focus=True):
    """Every metric as a small chart, as many as fit; `page` pages through the rest."""

    page: reactive[int] = reactive(0)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.series: list[tuple[str, list[tuple[float, float]]]] = []
        self.wall = False  # x axis: seconds since the first row instead of the step
        self.x_range: tuple[float, float] | None = None

    def layout_counts(self) -> tuple[int, int]:
        width, height = self.size.width, self.size.height
        columns = max(1, width // CELL_MIN_WIDTH)
        rows = max(1, height // CELL_HEIGHT)
        return columns, rows

    @property
    def per_page(self) -> int:
        columns, rows = self.layout_counts()
        return columns * rows

    @property
    def pages(self) -> int:
        return max(1, math.ceil(len(self.series) / self.per_page))

    def show(self, series: list[tuple[str, list[tuple[float, float]]]], wall: bool) -> None:
        self.series, self.wall = series, wall
        xs = [point[0] for _, points in series for point in points[:1] + points[-1:]]
        self.x_range = (min(xs), max(xs)) if xs else None
        self.page = min(self.page, self.pages - 1)
        self.refresh()

    def render(self) -> Text:
        columns, rows = self.layout_counts()
        cell_width = max(CELL_MIN_WIDTH, self.size.width // columns) - 1
        start = self.page * columns * rows
        shown = self.series[start : start + columns * rows]
        out = Text(no_wrap=True)
        for row in range(rows):
            cells = [
                chart_cell(name, points, cell_width, self.wall, self.x_range)
                for name, points in shown[row * columns :][:columns]
            ]
            if not cells:
                break
            for line in range(CELL_HEIGHT):
                for index, cell in enumerate(cells):
                    if index:
                        out.append("│", style="dim")
                    out.append_text(cell[line])
                out.append("\n")
        if not shown:
            out.append("no metrics yet")
        return out
