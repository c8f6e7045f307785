"""Keys never start work by accident: `s` asks first (showing what will start and what it would
cost), text meant for a modal, a screen or the palette never reaches the dashboard's global
bindings, and `:` opens the palette from every pane."""

from __future__ import annotations

import asyncio
import re

import pytest
from textual.command import CommandPalette

from hermes_rl.core.base.prices import prices_path
from hermes_rl.tui import backend
from hermes_rl.tui.app import PANES, HermesDashboard
from hermes_rl.tui.panes.inference import InferenceScreen
from hermes_rl.tui.widgets.dialogs import ConfirmScreen
from tests.fixtures_tui import fixed_clock, wait_for, write_run


@pytest.fixture
def started(monkeypatch):
    """What reached the backend: runs started and inference trials prepared (none must, by accident)."""
    calls: list[str] = []
    monkeypatch.setattr(backend, "start_run", lambda *a, **k: calls.append("start") or {"run_id": "x"})
    monkeypatch.setattr(
        backend, "prepare_inference_test", lambda *a, **k: calls.append("trial") or (_ for _ in ()).throw(OSError)
    )
    return calls


def test_typing_after_colon_goes_to_the_palette_not_to_global_keys(hermes_home, started):
    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.3)
            await pilot.press("colon", "f", "a", "s", "t")  # no pause: the palette is still opening
            await pilot.pause(0.5)
            assert isinstance(app.screen, CommandPalette)
            assert not started and not any(isinstance(s, (InferenceScreen, ConfirmScreen)) for s in app.screen_stack)

    asyncio.run(scenario())


def test_keys_typed_on_the_inference_screen_never_start_a_run(hermes_home, started):
    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(160, 48)) as pilot:
            app.selected_env = "toy_addition"
            await pilot.press("t")
            await wait_for(pilot, lambda: isinstance(app.screen, InferenceScreen), what="inference screen")
            app.screen.set_focus(None)  # as while it opens: nothing focused yet
            await pilot.press("s", "t", "x", "o", "z", "1")
            await pilot.pause(0.3)
            assert isinstance(app.screen, InferenceScreen) and len(app.screen_stack) == 2
            assert not started

    asyncio.run(scenario())


async def confirm_text_with(pilot, app, needle: str) -> str:
    def text() -> str:
        return " ".join(str(w.render()) for w in app.screen.query("Static"))

    await wait_for(pilot, lambda: needle in text(), timeout=60, what=needle)
    return text()


def test_s_asks_before_starting_and_says_what_will_start(hermes_home, started, tui_environments):
    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(160, 48)) as pilot:
            app.choose_environment("counting")
            await wait_for(pilot, lambda: app.pane("#config").view is not None, timeout=120, what="config")
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
            text = " ".join(str(w.render()) for w in app.screen.query("Static"))
            assert "Start a run of counting?" in text
            assert "profile local" in text and "total_steps 800" in text and "learning_rate 0.0001" in text
            # the cost estimate arrives beside the question; the local model has no price: no dollars made up
            text = await confirm_text_with(pilot, app, "for 800 steps")
            assert "expected price unknown for 800 steps" in text and "no price for" in text
            await pilot.press("n")
            await pilot.pause(0.3)
            assert not started
            prices_path().parent.mkdir(parents=True, exist_ok=True)
            prices_path().write_text('"*": {prefill: 1000, sample: 1000, train: 1000, as_of: "2026-12-01"}\n')
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
            text = await confirm_text_with(pilot, app, "for 800 steps")
            assert re.search(r"expected \$[0-9.]+ for 800 steps \(prefill .* tokens, prices as of 2026-12-01\)", text)
            await pilot.press("n")
            await pilot.pause(0.3)
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
            await pilot.press("y")
            await wait_for(pilot, lambda: started == ["start"], what="run started")

    asyncio.run(scenario())


@pytest.mark.parametrize("pane", range(1, len(PANES) + 1))
def test_colon_opens_the_palette_from_every_pane(hermes_home, started, pane):
    write_run("aaaa0001", steps=5)

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, live=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.3)
            await pilot.press(str(pane))
            await pilot.pause(0.2)
            await pilot.press("colon")
            await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what=f"palette from pane {pane}")

    asyncio.run(scenario())
