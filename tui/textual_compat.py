"""The things the dashboard needs from Textual that Textual has no public API for, in one place.

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


def background_screens(app) -> list:
    """The screens under the top one that show through it (top-most last), for App._background_screens.

    Textual's own list always holds the screen right below the top one, even when the top screen is
    opaque and covers it: the covered dashboard is then still laid out and composited, and each of its
    live updates repaints the screen on top (the full-screen rollouts view: about 4 extra repaints a
    second at 10 steps/s). Here a screen is listed only if every screen above it is translucent, so a
    modal dialog still shows the live dashboard behind it, and a full screen hides it."""
    stack = app._screen_stack
    screens = []
    for above, below in zip(reversed(stack), reversed(stack[:-1])):
        if above.styles.background.a == 1:
            break
        screens.append(below)
    return screens[::-1]


def add_line_filter(app, line_filter) -> None:
    """Run `line_filter` over every line of every widget the app renders (Textual's own NO_COLOR and
    dim filters work this way; App has no public API to add one)."""
    app._filters.append(line_filter)
