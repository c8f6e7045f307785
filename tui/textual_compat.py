"""The two things the dashboard needs from Textual that Textual has no public API for, in one place.

tests/test_textual_compat.py fails loudly if a Textual upgrade renames or removes what is used here.
"""

from __future__ import annotations


def shrink_cell_render_cache(table, size: int) -> None:
    """Give a DataTable a smaller render cache.

    DataTable caches a render per (cell, value version) in an LRU of 10,000 entries: a live table
    whose cells change every second fills it with renders of values long gone (tens of MB per
    table). A few screens' worth is all that is ever shown."""
    cache = table._cell_render_cache
    table._cell_render_cache = type(cache)(size)


def shutting_down(app) -> bool:
    """Whether the app is exiting or its main screen is closing (its widgets are being removed)."""
    main = app.screen_stack[0] if app.screen_stack else None
    return app._exit or not app.is_running or main is None or main._closing or main._closed
