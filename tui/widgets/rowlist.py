"""A one-line-per-row list with text columns, drawn from cached strips.

For live lists: DataTable re-renders every visible cell through Rich whenever anything in it changes
(0.5–1 ms a row, several times a second for a live run's metrics), here a row's line is built once
per (key, values, width) and a redraw is a lookup per line. A cell is a string or a one-style Text;
a column has a fixed width or, with width None, one that fits its widest value so far (it never
narrows, so a live list is not relaid out). Enter or a click selects the cursor's row (`Selected`).

Two modes. Windowed (the rollouts view's steps): it shows as many rows as fit and never scrolls; the
owner decides which rows are listed (a window over a longer list) and hears when the cursor is pushed
past either end (`Overflow`) or asked to jump (`Jump`). Scrolling (`scrolls=True`, the metrics): all
rows are listed, the view scrolls to keep the cursor shown and the header says which rows are.
"""

from __future__ import annotations

from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

CACHE_ROWS = 500  # row lines kept (a few windows' worth)
AUTO_WIDTH_MAX = 48  # an auto-width column never gets wider


@lru_cache(maxsize=256)
def _style(style: str) -> Style:
    return Style.parse(style) if style else Style()


def _cell(value) -> tuple[str, str]:
    """(text, style) of a cell: a string, or a Text whose one style covers it all."""
    if isinstance(value, Text):
        return value.plain, str(value.style or "")
    return str(value), ""


class RowList(Widget, can_focus=True):
    COMPONENT_CLASSES = {"row-list--header", "row-list--cursor"}
    DEFAULT_CSS = """
    RowList {
        height: 1fr;
        background: $surface;
        color: $foreground;
        & > .row-list--header { text-style: bold; background: $panel; color: $foreground; }
        & > .row-list--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .row-list--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """
    BINDINGS = [
        Binding("down", "cursor(1)", "Down", show=False, id="list.down"),
        Binding("up", "cursor(-1)", "Up", show=False, id="list.up"),
        Binding("j", "cursor(1)", "Down", show=False, id="nav.down"),
        Binding("k", "cursor(-1)", "Up", show=False, id="nav.up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="list.page_down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="list.page_up"),
        Binding("home", "jump('first')", "First", show=False, id="list.first"),
        Binding("end", "jump('last')", "Last", show=False, id="list.last"),
        Binding("g", "jump('first')", "Top", show=False, id="nav.top"),
        Binding("G", "jump('last')", "Bottom", show=False, id="nav.bottom"),
    ]  # enter (select) is the owner's: its binding says what selecting does

    class Highlighted(Message):
        """The cursor is on another row (the user moved it, or the rows changed under it)."""

        def __init__(self, row_list: RowList, key: str, row: int) -> None:
            super().__init__()
            self.row_list, self.key, self.row = row_list, key, row

    class Selected(Message):
        def __init__(self, row_list: RowList, key: str) -> None:
            super().__init__()
            self.row_list, self.key = row_list, key

    class Overflow(Message):
        """The cursor was pushed `rows` past the first (negative) or the last row listed."""

        def __init__(self, row_list: RowList, rows: int) -> None:
            super().__init__()
            self.row_list, self.rows = row_list, rows

    class Resized(Message):
        """The list's size changed: `capacity` may differ."""

        def __init__(self, row_list: RowList) -> None:
            super().__init__()
            self.row_list = row_list

    class Jump(Message):
        """Asked for the first or the last row of the whole list (`where`), listed or not."""

        def __init__(self, row_list: RowList, where: str) -> None:
            super().__init__()
            self.row_list, self.where = row_list, where

    def __init__(
        self,
        columns: list[tuple],
        *,
        scrolls: bool = False,
        max_auto_width: int = AUTO_WIDTH_MAX,
        **kwargs,
    ):
        """`columns`: (label, key, width) or (label, key, width, drop) each, width None for one that fits
        the values (up to `max_auto_width`); values are cut to their column's width. `drop` (default 0,
        never) ranks what gives way when the columns do not fit the list's width: the highest first."""
        super().__init__(**kwargs)
        self.columns = columns
        self.scrolls = scrolls
        self.max_auto_width = max_auto_width
        self.rows: list[tuple[str, list]] = []
        self.cursor_row = 0
        self.top = 0  # (scrolling) the row on the first line
        self._announced: tuple[str, int] | None = None  # the (key, row) the last Highlighted named
        self._lines: dict[tuple, Strip] = {}
        self._widths = [column[2] if column[2] is not None else len(column[0]) for column in columns]
        self._auto = [column[2] is None for column in columns]
        self._drop = [column[3] if len(column) > 3 else 0 for column in columns]

    # -- the owner's side ----------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self.rows)

    @property
    def capacity(self) -> int:
        """Rows that fit (0 before the first layout)."""
        return max(0, self.size.height - 1)

    def replace_rows(self, rows: list[tuple[str, list]]) -> None:
        """Show these rows; the cursor stays on its key when that row is still listed."""
        if rows == self.rows:
            return
        for index, auto in enumerate(self._auto):
            if auto:
                widest = max((len(_cell(cells[index])[0]) for _, cells in rows if index < len(cells)), default=0)
                self._widths[index] = max(self._widths[index], min(self.max_auto_width, widest))
        key = self.selected_key()
        self.rows = rows
        keys = [k for k, _ in rows]
        row = keys.index(key) if key in keys else min(self.cursor_row, max(0, len(rows) - 1))
        self.refresh()
        self.move_cursor(row)

    def move_cursor(self, row: int, animate: bool = False) -> None:
        """Put the cursor on a row (clamped); Highlighted is posted when its key or row changed."""
        row = max(0, min(row, len(self.rows) - 1)) if self.rows else 0
        if row != self.cursor_row:
            self.cursor_row = row
            self.refresh()
        if self.scrolls:
            self._scroll_to_cursor()
        now = (self.rows[row][0], row) if self.rows else None
        if now is not None and now != self._announced:
            self._announced = now
            self.post_message(self.Highlighted(self, *now))

    def _scroll_to_cursor(self) -> None:
        shown = max(1, self.capacity)
        top = min(self.top, self.cursor_row, max(0, len(self.rows) - shown))
        top = max(top, self.cursor_row - shown + 1)
        if top != self.top:
            self.top = top
            self.refresh()

    def keys(self) -> list[str]:
        return [key for key, _ in self.rows]

    def get_row_index(self, key: str) -> int:
        return self.keys().index(key)

    def selected_key(self) -> str | None:
        return self.rows[self.cursor_row][0] if 0 <= self.cursor_row < len(self.rows) else None

    def values(self, column: str) -> list[str]:
        """One column's values, top to bottom."""
        index = [c[1] for c in self.columns].index(column)
        return [_cell(cells[index])[0] for _, cells in self.rows]

    # -- keys and mouse ------------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        target = self.cursor_row + delta
        if 0 <= target < len(self.rows) or (self.scrolls and self.rows):
            self.move_cursor(target)
        elif self.rows:
            past = target - (len(self.rows) - 1) if target > 0 else target
            self.post_message(self.Overflow(self, past))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.capacity - 1))

    def action_jump(self, where: str) -> None:
        if self.scrolls:
            self.move_cursor(0 if where == "first" else len(self.rows) - 1)
        else:
            self.post_message(self.Jump(self, where))

    def action_select(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event: events.Click) -> None:
        """Like a DataTable's: the row clicked gets the cursor and is selected."""
        row = event.y - 1 + (self.top if self.scrolls else 0)
        if event.y >= 1 and 0 <= row < len(self.rows):
            self.move_cursor(row)
            self.action_select()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self.action_cursor(1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self.action_cursor(-1)

    def on_resize(self, _event: events.Resize) -> None:
        self._lines.clear()
        if self.scrolls:
            self._scroll_to_cursor()
        self.post_message(self.Resized(self))

    def on_focus(self) -> None:
        self._lines.clear()  # the cursor's colours differ with focus
        self.refresh()

    def on_blur(self) -> None:
        self._lines.clear()
        self.refresh()

    # -- drawing -------------------------------------------------------------------------------------
    def shown_columns(self, width: int | None = None) -> list[int]:
        """The columns that fit `width` (the list's), dropping the highest ranks first."""
        width = self.size.width if width is None else width
        shown = list(range(len(self.columns)))
        if width <= 0:
            return shown
        by_rank = sorted((i for i in shown if self._drop[i]), key=lambda i: (self._drop[i], i))
        while sum(self._widths[i] + 2 for i in shown) > width and by_rank:
            shown.remove(by_rank.pop())
        return shown

    def _line(self, key, values: list, style: Style, width: int) -> Strip:
        cells = tuple(_cell(value) for value in values)
        cache_key = (key, cells, tuple(self._widths), style, width)
        strip = self._lines.get(cache_key)
        if strip is None:
            if len(self._lines) >= CACHE_ROWS:
                self._lines.clear()
            # A segment a cell (their styles differ by the column's meta, so they are not merged): an
            # exported screenshot places each at its column, whatever the font.
            shown = self.shown_columns(width)
            segments = [
                Segment(f" {text:<{w}.{w}} ", style + _style(cell_style) + Style.from_meta({"column": index}))
                for index, ((text, cell_style), w) in enumerate(zip(cells, self._widths))
                if index in shown
            ]
            strip = Strip(segments).crop_extend(0, width, style)
            self._lines[cache_key] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            style = base + self.get_component_rich_style("row-list--header")
            strip = self._line(None, [c[0] for c in self.columns], style, width)
            shown = self.capacity
            if self.scrolls and len(self.rows) > shown > 0:  # which rows are shown, at the right
                where = f" {self.top + 1}–{min(len(self.rows), self.top + shown)}/{len(self.rows)} "
                strip = Strip.join([strip.crop(0, max(0, width - len(where))), Strip([Segment(where, style)])])
            return strip
        row = y - 1 + (self.top if self.scrolls else 0)
        if row >= len(self.rows):
            return Strip.blank(width, base)
        key, values = self.rows[row]
        style = base + self.get_component_rich_style("row-list--cursor") if row == self.cursor_row else base
        return self._line(key, values, style, width)
