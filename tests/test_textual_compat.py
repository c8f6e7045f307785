"""The private Textual attributes tui/textual_compat.py relies on still exist and mean what it assumes.
If one of these fails after a Textual upgrade, fix tui/textual_compat.py (and only it)."""

from __future__ import annotations

import asyncio

from textual.app import App
from textual.widgets import DataTable

from hermes_rl.tui.textual_compat import shrink_cell_render_cache, shutting_down


def test_datatable_render_cache_can_be_shrunk():
    table = DataTable()
    cache = table._cell_render_cache
    assert hasattr(cache, "maxsize") and cache.maxsize > 1_000  # Textual's own, large default
    shrink_cell_render_cache(table, 50)
    assert type(table._cell_render_cache) is type(cache) and table._cell_render_cache.maxsize == 50


def test_shutting_down_is_false_while_running_and_true_once_exiting():
    seen = {}

    class Probe(App):
        def on_mount(self) -> None:
            main = self.screen_stack[0]
            assert isinstance(main._closing, bool) and isinstance(main._closed, bool)
            seen["running"] = shutting_down(self)
            self.exit()
            seen["exiting"] = shutting_down(self)

    app = Probe()
    assert app._exit is False
    asyncio.run(app.run_async(headless=True))
    assert seen == {"running": False, "exiting": True}
    assert shutting_down(app)
