"""DataTable with vim keys, shift+letter sorting and columns that give way by priority, shared by the
runs and processes panes.

A pane declares every column with a drop rank (`Column`): 0 never drops, a higher rank drops first when
the columns' widths (fitted to the rows shown) do not fit the table; the pane always passes every cell
and the table shows those of the columns that fit, so a narrow terminal keeps each pane's identifying
column and its key values instead of cutting the right-hand ones off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from ..textual_compat import shrink_cell_render_cache

RowT = TypeVar("RowT")
CELL_RENDER_CACHE = 1_000  # cell renders kept: a few screens' worth


class Column(NamedTuple):
    label: str
    key: str
    drop: int = 0  # 0: always shown; a higher rank gives way first
    width: int | None = None  # None: fits the widest value shown


class NavTable(DataTable):
    """Row-cursor table: arrows and j/k, g/G; sorting by a column with the pane's shift+letter keys."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="nav.down"),
        Binding("k", "cursor_up", "Up", show=False, id="nav.up"),
        Binding("g", "scroll_top", "Top", show=False, id="nav.top"),
        Binding("G", "scroll_bottom", "Bottom", show=False, id="nav.bottom"),
    ]

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.sort_column: str | None = None
        self.sort_reverse = False
        self._shown_keys: list[str] = []
        self._shown_cells: list[list] = []
        self.all_columns: list[Column] = []
        self._rows: list[tuple[str, list]] = []  # every cell of every row, as the pane gave them
        self._shown_columns: list[int] = []  # indexes into all_columns
        self._pending_cursor: str | None = None
        shrink_cell_render_cache(self, CELL_RENDER_CACHE)

    class Sorted(Message):
        """The sort column or direction changed (a sort key was pressed): the pane shows its rows again."""

    def action_sort(self, column: str) -> None:
        self.toggle_sort(column)
        self.post_message(self.Sorted())

    def action_scroll_top(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def toggle_sort(self, column: str) -> None:
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False

    def sorted_rows(self, rows: Sequence[RowT], sort_values: dict) -> list[RowT]:
        """Order rows by the current sort column; `sort_values[column](row)` gives a comparable key."""
        if self.sort_column is None or self.sort_column not in sort_values:
            return list(rows)
        key = sort_values[self.sort_column]

        def safe(row):
            value = key(row)
            return (value is None, value if value is not None else 0)

        return sorted(rows, key=safe, reverse=self.sort_reverse)

    def define_columns(self, columns: list[Column]) -> None:
        self.all_columns = list(columns)
        self._shown_columns = list(range(len(columns)))
        for column in columns:
            self.add_column(column.label, key=column.key, width=column.width)

    def cell(self, row_key: str, column: str):
        """A row's cell by column key, shown or given way."""
        index = [c.key for c in self.all_columns].index(column)
        return next(cells[index] for key, cells in self._rows if key == row_key)

    def shown_column_keys(self) -> list[str]:
        return [self.all_columns[i].key for i in self._shown_columns]

    def _fitting_columns(self, rows: list[tuple[str, list]]) -> list[int]:
        """The columns that fit the table's width, dropping the highest ranks first (the rightmost of
        a rank first); all of them before the first layout."""
        room = self.scrollable_content_region.width
        if not self.all_columns or room <= 0:
            return list(range(len(self.all_columns)))
        widths = []
        for index, column in enumerate(self.all_columns):
            content = column.width or max(
                [len(column.label)] + [_cell_width(cells[index]) for _, cells in rows if index < len(cells)]
            )
            widths.append(content + 2 * self.cell_padding)
        shown = list(range(len(self.all_columns)))
        by_rank = sorted((i for i in shown if self.all_columns[i].drop), key=lambda i: (self.all_columns[i].drop, i))
        while sum(widths[i] for i in shown) > room and by_rank:
            shown.remove(by_rank.pop())
        return shown

    def on_resize(self, _event: events.Resize) -> None:
        if self.all_columns:
            self.call_after_refresh(self._refit)  # once the new size is laid out

    def _refit(self) -> None:
        if self._fitting_columns(self._rows) != self._shown_columns:
            self.replace_rows(self._rows)

    def replace_rows(self, rows: list[tuple[str, list]]) -> None:
        """Show these rows (every column's cells; the table shows those that fit). Same keys in the
        same order: only changed cells are updated (no relayout, which is what keeps a live dashboard
        cheap); otherwise rebuild, keeping the cursor on its row's key."""
        if self.all_columns:
            self._rows = rows
            fitting = self._fitting_columns(rows)
            if fitting != self._shown_columns:
                current = self.selected_key()
                self.clear(columns=True)
                self._shown_keys, self._shown_cells, self._shown_columns = [], [], fitting
                for index in fitting:
                    column = self.all_columns[index]
                    self.add_column(column.label, key=column.key, width=column.width)
                self._pending_cursor = current  # the rebuild below puts the cursor back on it
            rows = [(key, [cells[i] for i in self._shown_columns]) for key, cells in rows]
        keys = [key for key, _ in rows]
        if keys and keys == self._shown_keys and self.row_count == len(keys):
            column_keys = list(self.columns)
            for (key, cells), previous in zip(rows, self._shown_cells):
                for column_key, value, old in zip(column_keys, cells, previous):
                    if value != old:
                        self.update_cell(key, column_key, value, update_width=True)
            self._shown_cells = [cells for _, cells in rows]
            return
        current = self._pending_cursor or self.selected_key()
        self._pending_cursor = None
        self.clear()
        # Auto widths only ever grow in DataTable (and are measured lazily): set them from the rows shown now.
        for index, shown in enumerate(self.columns.values()):
            if shown.auto_width:
                shown.content_width = max(
                    [shown.label.cell_len] + [_cell_width(cells[index]) for _, cells in rows if index < len(cells)]
                )
        target = 0
        for index, (key, cells) in enumerate(rows):
            self.add_row(*cells, key=key)
            if key == current:
                target = index
        if rows:
            self.move_cursor(row=target, animate=False)
        self._shown_keys = keys
        self._shown_cells = [cells for _, cells in rows]

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        except Exception:
            return None


def _cell_width(cell) -> int:
    if isinstance(cell, Text):
        return cell.cell_len
    return cell_len(str(cell))


def sort_bindings(prefix: str, columns: dict[str, tuple[str, str]]) -> list[BindingType]:
    """shift+letter bindings: {column: (key, label)} -> Binding(id=f"{prefix}.sort.{column}")."""
    return [
        Binding(key, f"sort('{column}')", f"Sort {label}", show=False, id=f"{prefix}.sort.{column}")
        for column, (key, label) in columns.items()
    ]
