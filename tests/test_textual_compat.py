"""The private Textual attributes tui/textual_compat.py relies on still exist and mean what it assumes.
If one of these fails after a Textual upgrade, fix tui/textual_compat.py (and only it)."""

from __future__ import annotations

import asyncio
import inspect

from textual.app import App
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable

from hermes_rl.tui.textual_compat import background_screens, shrink_cell_render_cache, shutting_down


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


def test_only_screens_showing_through_translucent_ones_are_background_screens():
    """Textual composites (and repaints the top screen for) every screen in App._background_screens;
    our list leaves out a screen covered by an opaque one, and Textual must still read that property."""
    from textual.widgets import Static

    from hermes_rl.tui.app import HermesDashboard

    assert isinstance(inspect.getattr_static(HermesDashboard, "_background_screens"), property)
    assert "_background_screens" in inspect.getsource(Screen._compositor_refresh)
    assert "_background_screens" in inspect.getsource(Screen.is_current.fget)
    seen = {}

    class Full(Screen):
        def compose(self):
            yield Static("full")

    class Dialog(ModalScreen):
        def compose(self):
            yield Static("dialog")

    class Probe(App):
        async def on_mount(self) -> None:
            main = self.screen
            seen["textual, full screen on top"] = list(self._background_screens)
            await self.push_screen(Full())
            seen["textual, full screen on top"] = list(self._background_screens)
            seen["ours, full screen on top"] = background_screens(self)
            seen["main is current under it"] = main.is_current
            await self.push_screen(Dialog())
            seen["ours, dialog over the full screen"] = background_screens(self)
            self.pop_screen()
            self.pop_screen()
            await self.push_screen(Dialog())
            seen["ours, dialog over main"] = background_screens(self) == [main]
            self.exit()

    asyncio.run(Probe().run_async(headless=True))
    assert len(seen["textual, full screen on top"]) == 1  # Textual's: the covered main screen (why we override)
    assert seen["ours, full screen on top"] == []
    assert seen["main is current under it"] is True  # with Textual's list, it is still laid out and painted
    assert [type(s).__name__ for s in seen["ours, dialog over the full screen"]] == ["Full"]
    assert seen["ours, dialog over main"] is True
