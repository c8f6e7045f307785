"""Log content is untrusted: escape-laden lines read through the CLI and the dashboard (Pilot) keep
their SGR colours and lose every other control sequence (OSC, DCS, RIS, cursor movement, clears)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest

from hermes_rl.core.readers.logs import sanitize_terminal
from tests.fixtures_tui import fixed_clock, write_run
from tests.reliability.helpers import CORPUS

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

CASES = json.loads((CORPUS / "escape_lines.json").read_text())["cases"]
LOG_TEXT = "".join(line + "\n" for _, line, _ in CASES)
SGR = re.compile(r"\x1b\[[0-9;:]*m")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
RUN_ID = "e5ca9e00"


@pytest.mark.parametrize("name, line, shown", CASES, ids=[c[0] for c in CASES])
def test_the_sanitizer_keeps_colour_and_content_and_drops_commands(name, line, shown):
    out = sanitize_terminal(line)
    assert not CONTROL.search(SGR.sub("", out)), repr(out)
    assert shown in out and "PWNED" not in out
    assert SGR.findall(out) == SGR.findall(line)  # colours untouched


def test_cli_logs_print_no_control_sequence_but_colour(hermes_home):
    write_run(RUN_ID, logs={"api": LOG_TEXT})
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "logs", RUN_ID, "--process", "api", "--lines", "100"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert not CONTROL.search(SGR.sub("", out.stdout)), repr(out.stdout)
    assert "PWNED" not in out.stdout
    assert all(shown in out.stdout for _, _, shown in CASES)
    assert "\x1b[31mRED-KEPT\x1b[0m" in out.stdout


def test_dashboard_log_view_renders_no_control_sequence(hermes_home):
    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.logs import LogsPane
    from tests.test_tui_pilot import wait_for

    write_run(RUN_ID, logs={"api": LOG_TEXT})

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(160, 160)) as pilot:
            logs = app.query_one(LogsPane)
            await wait_for(pilot, lambda: logs.view.line_count >= len(CASES), what="the escape-laden log")
            await pilot.press("4")  # the logs pane, zoomed
            await pilot.pause(0.3)
            view = logs.view
            rendered = []
            for y in range(view.size.height):
                strip = view.render_line(y)
                rendered.append("".join(seg.text for seg in strip))
                for seg in strip:
                    assert not CONTROL.search(seg.text) and "\x1b" not in seg.text, repr(seg.text)
            screen = "\n".join(rendered)
            assert "PWNED" not in screen
            assert all(shown in screen for _, _, shown in CASES), screen

    asyncio.run(scenario())


def test_cli_prints_run_state_without_control_sequences(hermes_home):
    """Reasons, environment and profile names and a process's cwd come from run.json, which anything
    may have written: `hermes-rl status/runs/results/stop` print them through the same sanitizer (and
    as literal text, never as Rich markup)."""
    reason = " | ".join(line for _, line, _ in CASES) + " [bold red]markup-kept[/] [/]"
    processes = [
        {"name": "trainer", "state": "failed", "exit_code": 1, "cwd": "/tmp/\x1b]2;PWNED-TITLE\x07after a cwd"}
    ]
    write_run(
        RUN_ID,
        status="failed",
        reason=reason,
        environment="\x1b[2Jgsm8k\x1bc",
        profile="\x1b]0;PWNED-TITLE\x07local",
        processes=processes,
    )
    env = os.environ.copy()
    outputs = []
    for command in ("status", "runs", "results", "stop"):
        argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", command] + ([] if command == "runs" else [RUN_ID])
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**env, "COLUMNS": "4000"})
        assert out.returncode == (1 if command == "stop" else 0), (command, out.stderr)
        text = out.stdout + out.stderr
        assert not CONTROL.search(SGR.sub("", text)), (command, repr(text))
        assert "PWNED" not in text, (command, text)
        outputs.append((command, text))
    status = outputs[0][1]
    assert all(shown in status for _, _, shown in CASES), status
    assert "[bold red]markup-kept[/] [/]" in status  # brackets printed as written, not taken as markup
    assert "gsm8k" in status and "local" in status and "after a cwd" in status
    # SGR kept as a Rich style (closed where the text ends): coloured on a terminal, plain in a pipe
    assert "RED-KEPT" in status
    assert "already failed" in outputs[3][1] and "after a title" in outputs[3][1]  # stop's refusal quotes it
