"""Untrusted text is made safe in every widget, not per pane: one hostile corpus (OSC titles, RIS,
clipboard writes, clears, DCS, 8-bit controls) in model output (rollouts), an environment file (name,
docstring, config class), logs, metric names and run.json (reason, environment, profile, a process's
cwd), and then every pane and view of the dashboard rendered as the terminal would get it (the
screen's composited lines): no control character reaches it, none of the hostile payloads shows."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from hermes_rl.core.base.paths import run_dir, user_environments_dir
from tests.fixtures_tui import fixed_clock, write_run
from tests.reliability.helpers import CORPUS

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(240)]

CASES = json.loads((CORPUS / "escape_lines.json").read_text())["cases"]
# Every sequence that carries a payload, in one string (but the unterminated OSC, which takes the rest of
# its line with it: it comes in the logs and the completions, one line each).
HOSTILE = "".join(
    line for name, line, _ in CASES if ("PWNED" in line or "]52;" in line) and not name.startswith("unterminated")
)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
RUN_ID = "e5ca9e01"


def _hostile_home() -> None:
    processes = [
        {"name": name, "state": "stopped", "pid": None, "cwd": f"/tmp/{HOSTILE}cwd", "exit_code": 0}
        for name in ("api", "trainer", "env")
    ]
    write_run(
        RUN_ID,
        environment="toy_addition",
        status="failed",
        reason=f"trainer failed: {HOSTILE}reason",
        processes=processes,
        steps=4,
        logs={name: "".join(line + "\n" for _, line, _ in CASES) for name in ("api", "trainer", "env")},
    )
    folder = run_dir(RUN_ID)
    with open(folder / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 5, "time": 1.0, f"{HOSTILE}metric": 0.5}) + "\n")
    record = json.loads((folder / "run.json").read_text())
    record["profile"] = f"{HOSTILE}local"
    (folder / "run.json").write_text(json.dumps(record))
    group = {
        "step": 4,
        "time": 1.0,
        "group": 0,
        "prompt": f"Q: 1+1=\n{HOSTILE}A:",
        "completions": [
            {"text": line, "reward": 1.0 - i / 10, "advantage": 0.0, "tokens": 3, "finish": f"{HOSTILE}stop"}
            for i, (_, line, _) in enumerate(CASES)
        ],
    }
    (folder / "rollouts.jsonl").write_text(json.dumps(group) + "\n")
    user_environments_dir().mkdir(parents=True, exist_ok=True)
    docstring = HOSTILE.encode("unicode_escape").decode()
    (user_environments_dir() / "hostile_env.py").write_text(
        "from atroposlib.envs.base import BaseEnv, BaseEnvConfig\n\n\n"
        f'class HostileConfig(BaseEnvConfig):\n    """{docstring}config"""\n\n\n'
        f'class HostileEnv(BaseEnv):\n    """{docstring}docstring"""\n\n    name = "hostile"\n'
        "    env_config_cls = HostileConfig\n"
    )


def _screen_text(app) -> str:
    lines = []
    for strip in app.screen._compositor.render_strips():
        for segment in strip:
            if segment.control:
                continue
            assert not CONTROL.search(segment.text), f"{type(app.screen).__name__}: {segment.text!r}"
        lines.append("".join(segment.text for segment in strip if not segment.control))
    text = "\n".join(lines)
    assert "PWNED" not in text and "UFdORUQ" not in text, text  # UFdORUQ: the clipboard write's payload
    return text


def test_every_pane_and_view_renders_the_hostile_corpus_inertly(hermes_home):
    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.environments import EnvironmentsPane
    from hermes_rl.tui.panes.rollouts import RolloutsScreen
    from hermes_rl.tui.panes.runs import RunsPane
    from tests.test_tui_pilot import wait_for

    _hostile_home()

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        async with app.run_test(size=(200, 60)) as pilot:
            runs_pane = app.query_one(RunsPane)
            await wait_for(pilot, lambda: runs_pane.table.row_count == 1, what="the run")
            await wait_for(pilot, lambda: app.selected_run == RUN_ID, what="selection")
            envs = app.query_one(EnvironmentsPane)
            await wait_for(pilot, lambda: any(e.class_name == "HostileEnv" for e in envs.environments), what="envs")
            # The hostile environment's details (name, docstring, config class, file) on the main screen.
            envs.option_list.highlighted = next(
                i for i, e in enumerate(envs._visible()) if e.class_name == "HostileEnv"
            )
            await pilot.pause(1.0)
            seen = [_screen_text(app)]
            for pane in range(1, 7):
                await pilot.press(str(pane), "z")
                await pilot.pause(0.5)
                seen.append(_screen_text(app))
                await pilot.press("z")
            await pilot.press("2")
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, RolloutsScreen), what="the rollouts view")
            await pilot.pause(1.0)
            seen.append(_screen_text(app))
            await pilot.press("escape", "question_mark")
            await pilot.pause(0.5)
            seen.append(_screen_text(app))
            everything = "\n".join(seen)
            for shown in ("after a title", "after a clipboard write", "after a reset", "HostileEnv"):
                assert shown in everything, shown  # the text around the sequences is still shown

    asyncio.run(scenario())
