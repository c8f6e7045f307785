"""The merged log a person can read: run-api's access lines hidden (counted, one key shows them),
errors and warnings coloured, jumps from error to error, and a failed process's exception on top of
its tab. Over run folders and logs written as a run writes them."""

from __future__ import annotations

import asyncio

import pytest

from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.live import MergedLog
from hermes_rl.tui.panes.logs import LogsPane, severity
from tests.fixtures_tui import fixed_clock, wait_for, write_run

ACCESS = 'INFO:     127.0.0.1:5{n:04d} - "GET /batch HTTP/1.1" 200 OK\n'
API_LOG = (
    "INFO:     Started server process [41000]\n"
    + "".join(ACCESS.format(n=n) for n in range(150))
    + "WARNING:  an env registered twice\n"
)
TRAINER_LOG = (
    "2025-11-29 15:00:00 INFO trainer: step 1/20 reward 0.2\n"
    "2025-11-29 15:00:01 ERROR trainer: training failed at step 2: RuntimeError: boom\n"
    "Traceback (most recent call last):\n"
    '  File "loop.py", line 1, in run\n'
    "RuntimeError: boom\n"
)


def test_severity_of_common_log_lines():
    assert severity("2025 ERROR trainer: failed") == "error"
    assert severity("trainer │ Traceback (most recent call last):") == "error"
    assert severity("env     │ KeyError: 'x'") == "error"
    assert severity("WARNING:  slow") == "warning"
    assert severity("INFO step 3 Errors: 0") is None


@pytest.mark.timeout(120)
def test_merged_view_hides_access_lines_colours_errors_and_jumps_to_them(hermes_home):
    write_run(
        "0badc0de",
        status="failed",
        steps=2,
        reason="trainer exited 1",
        logs={"api": API_LOG, "trainer": TRAINER_LOG, "env": "[env] group 1 scored: 0.5\n"},
    )

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 48)) as pilot:
            logs = app.query_one(LogsPane)
            await wait_for(pilot, lambda: app.selected_run == "0badc0de", what="selection")
            await wait_for(pilot, lambda: isinstance(logs.view.source, MergedLog), what="the merged view")
            merged = logs.view.source
            await wait_for(pilot, lambda: merged.hidden == 150, what="access lines counted")
            shown = merged.lines(0, merged.line_count)
            assert not any("GET /batch" in line for line in shown)
            assert any("an env registered twice" in line for line in shown)
            status = str(logs.query_one("#log-status").render())
            assert "150 access lines hidden (a)" in status
            # one key shows them (and hides them again)
            logs.view.focus()
            await pilot.press("a")
            assert sum("GET /batch" in line for line in merged.lines(0, merged.line_count)) == 150
            assert "access lines shown" in str(logs.query_one("#log-status").render())
            await pilot.press("a")
            # e jumps to the first error line from the top, again to the next, p back
            await pilot.press("g", "e")
            await wait_for(pilot, lambda: logs.view.match_line is not None, what="an error")
            first = logs.view.match_line
            assert "ERROR trainer" in merged.lines(first, first + 1)[0]
            await pilot.press("e")
            await wait_for(pilot, lambda: logs.view.match_line != first, what="the next error")
            assert "Traceback" in merged.lines(logs.view.match_line, logs.view.match_line + 1)[0]
            await pilot.press("p")
            await wait_for(pilot, lambda: logs.view.match_line == first, what="back to the first error")
            # the failed trainer's tab opens with the exception it died of
            await pilot.press("]", "]")
            banner = logs.query_one("#log-problem")
            await wait_for(pilot, lambda: not banner.has_class("hidden"), what="the failure banner")
            assert "trainer failed: RuntimeError: boom" in str(banner.render())
            await pilot.press("[")  # the api tab: it did not fail
            await wait_for(pilot, lambda: banner.has_class("hidden"), what="no banner for api")

    asyncio.run(scenario())
