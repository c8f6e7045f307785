"""DataTable with vim keys and shift+letter sorting, shared by the runs, processes and metrics panes."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from hermes_rl.tui.textual_compat import shrink_cell_render_cache

CELL_RENDER_CACHE = 1_000  # cell renders kept: a few screens' worth


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

    def sorted_rows(self, rows: list[dict], sort_values: dict) -> list[dict]:
        """Order rows by the current sort column; `sort_values[column](row)` gives a comparable key."""
        if self.sort_column is None or self.sort_column not in sort_values:
            return rows
        key = sort_values[self.sort_column]

        def safe(row):
            value = key(row)
            return (value is None, value if value is not None else 0)

        return sorted(rows, key=safe, reverse=self.sort_reverse)

    def replace_rows(self, rows: list[tuple[str, list]]) -> None:
        """Show these rows. Same keys in the same order: only changed cells are updated (no relayout,
        which is what keeps a live dashboard cheap); otherwise rebuild, keeping the cursor's row."""
        keys = [key for key, _ in rows]
        if keys and keys == self._shown_keys and self.row_count == len(keys):
            column_keys = list(self.columns)
            for (key, cells), previous in zip(rows, self._shown_cells):
                for column_key, value, old in zip(column_keys, cells, previous):
                    if value != old:
                        self.update_cell(key, column_key, value, update_width=True)
            self._shown_cells = [cells for _, cells in rows]
            return
        current = None
        if self.row_count and self.cursor_row < self.row_count:
            try:
                current = self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value
            except Exception:
                current = None
        self.clear()
        # Auto widths only ever grow in DataTable (and are measured lazily): set them from the rows shown now.
        for index, column in enumerate(self.columns.values()):
            if column.auto_width:
                column.content_width = max(
                    [column.label.cell_len] + [_cell_width(cells[index]) for _, cells in rows if index < len(cells)]
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
            return self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value
        except Exception:
            return None


def _cell_width(cell) -> int:
    from rich.cells import cell_len
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.cell_len
    return cell_len(str(cell))


def sort_bindings(prefix: str, columns: dict[str, tuple[str, str]]) -> list[Binding]:
    """shift+letter bindings: {column: (key, label)} -> Binding(id=f"{prefix}.sort.{column}")."""
    return [
        Binding(key, f"sort('{column}')", f"Sort {label}", show=False, id=f"{prefix}.sort.{column}")
        for column, (key, label) in columns.items()
    ]
