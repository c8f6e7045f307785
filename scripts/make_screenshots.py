"""Regenerate screenshots/*.svg: every pane of the dashboard over deterministic run folders, and
(with --live) the dashboard over a real local training run; and screenshots/report.png, `hermes-rl
report`'s page over a deterministic run folder as headless Chromium renders it (needs chromium).

    .venv/bin/python scripts/make_screenshots.py            # panes (about a minute) and the report
    .venv/bin/python scripts/make_screenshots.py --report-only
    .venv/bin/python scripts/make_screenshots.py --live     # + a live local run (builds the tiny model
                                                            #   if needed; minutes on a small CPU)

Runs in a temporary $HERMES_HOME (removed afterwards); the project's own environments are listed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
sys.path.append(str(ROOT))  # for tests.fixtures_tui, the deterministic run folders drawn here
SIZE = (160, 48)


async def wait_for(pilot, predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return False


async def settle(pilot, run_id: str | None, log_lines: int = 20) -> None:
    from hermes_rl.tui.panes.logs import LogsPane
    from hermes_rl.tui.panes.metrics import MetricsPane
    from hermes_rl.tui.panes.runs import RunsPane

    app = pilot.app
    await wait_for(pilot, lambda: app.pane(RunsPane).table.row_count > 0)
    await wait_for(pilot, lambda: app.environments)
    if run_id:
        app.pane(RunsPane).select(run_id)
        await wait_for(pilot, lambda: app.selected_run == run_id)
        await wait_for(pilot, lambda: app.pane(MetricsPane).table.row_count > 0)
        await wait_for(pilot, lambda: app.pane(LogsPane).view.line_count >= log_lines)


async def shoot(
    name: str, keys: list, run_id: str | None = "a1b2c3d4", before=None, clock=None, size: tuple = SIZE
) -> None:
    from textual.widgets import Input

    from hermes_rl.tui.app import HermesDashboard

    app = HermesDashboard(clock=clock or time.time, stall_after_s=0)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, run_id)
        if before is not None:
            await before(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.15)
        await pilot.pause(0.5)
        for screen in app.screen_stack:
            for widget in screen.query(Input):
                widget.cursor_blink = False
        app.clear_notifications()
        await pilot.pause(0.2)
        app.save_screenshot(str(OUT / f"{name}.svg"))
        print(f"  screenshots/{name}.svg")


async def panes() -> None:
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.tui.panes.config_editor import ConfigPane
    from hermes_rl.tui.panes.logs import LogsPane
    from tests.fixtures_tui import FIXED_NOW, REAL_ROLLOUTS, SAMPLE_LOGS, fixed_clock, write_run, write_run_config

    write_run(
        "a1b2c3d4",
        environment="toy_addition",
        status="completed",
        steps=20,
        created_at=FIXED_NOW - 7200,
        logs=SAMPLE_LOGS,
    )
    write_run(
        "0badc0de",
        environment="toy_addition",
        status="failed",
        steps=7,
        created_at=FIXED_NOW - 3 * 86400,
        reason="trainer exited 1",
        logs={"api": "ok\n", "trainer": "Traceback (most recent call last):\nRuntimeError: boom\n", "env": ""},
    )
    write_run(
        "5ee5ee5e",
        environment="gsm8k",
        status="stopped",
        steps=3,
        profile="tinker",
        created_at=FIXED_NOW - 600,
        reason="stopped by user",
        logs={"api": "", "trainer": "", "env": ""},
    )

    # 5ee5ee5e's environment dropped every group for scoring alike: its audit says no_signal in every view
    problem = {"message": "Scores are the same in a group, skipping...", "level": "warning", "count": 48}
    (run_dir("5ee5ee5e") / "health.json").write_text(
        f'{{"processes": {{"env": {{"problems": [{json.dumps(problem)}]}}}}}}'
    )
    shutil.copyfile(REAL_ROLLOUTS, run_dir("a1b2c3d4") / "rollouts.jsonl")
    write_run_config("a1b2c3d4", 8, 5e-4)
    write_run_config("0badc0de", 4, 1e-3)

    async def select_env(pilot):
        await pilot.press("1", "j", "enter")
        await wait_for(pilot, lambda: pilot.app.pane(ConfigPane).view is not None, timeout=240)

    async def search(pilot):
        await pilot.press("5", "]", "]")
        await pilot.press("m", "slash", *"reward=0.7", "enter")
        await wait_for(pilot, lambda: pilot.app.pane(LogsPane).view.match_line is not None)

    await shoot("dashboard", [], clock=fixed_clock)
    await shoot("dashboard_80x24", [], clock=fixed_clock, size=(80, 24))  # what degrades first, at each size
    await shoot("dashboard_200x60", [], clock=fixed_clock, size=(200, 60))
    await shoot("compare_80x24", ["3", "space", "G", "space", "c"], clock=fixed_clock, size=(80, 24))
    await shoot("environments", ["1", "z"], run_id=None, clock=fixed_clock)
    await shoot(
        "config_editor", ["2", "enter", "ctrl+u", "1", "escape", "z"], run_id=None, before=select_env, clock=fixed_clock
    )
    await shoot("runs", ["3", "z"], clock=fixed_clock)
    await shoot("processes", ["4", "z"], run_id="0badc0de", clock=fixed_clock)
    await shoot("logs", ["z"], before=search, clock=fixed_clock)
    await shoot("metrics", ["6", "z"], clock=fixed_clock)
    await shoot("metric_chart", ["6", "enter", "s"], clock=fixed_clock)
    await shoot("rollouts", ["o"], clock=fixed_clock)
    await shoot("compare", ["3", "space", "G", "space", "c"], clock=fixed_clock)
    await shoot("help", ["question_mark"], clock=fixed_clock)
    await shoot("test_inference", ["t"], run_id=None, clock=fixed_clock)
    await shoot("stop_confirm", [], run_id=None, clock=fixed_clock, before=lambda pilot: _confirm(pilot))
    await shoot("same_prompt", [], clock=fixed_clock, before=_same_prompt)
    # the audit of a run whose environment dropped every group for scoring alike (docs/audit.md)
    await shoot("audit", [], run_id="5ee5ee5e", clock=fixed_clock)


async def _same_prompt(pilot):
    """The same-prompt view (p in the rollouts view) of a prompt the recorded run sampled at four steps."""
    from hermes_rl.tui.panes.prompt_history import PromptHistoryScreen

    pilot.app.push_screen(PromptHistoryScreen("a1b2c3d4", "Q: 4+1=\nA:"))
    await wait_for(pilot, lambda: getattr(pilot.app.screen, "out", None) is not None)


async def _confirm(pilot):
    from hermes_rl.tui.widgets.dialogs import ConfirmScreen

    pilot.app.push_screen(
        ConfirmScreen(
            "Stop run 3fa2c91b?", "toy_addition · running · its processes get SIGTERM, then SIGKILL after their timeout"
        )
    )
    await pilot.pause(0.2)


async def live(min_steps: int, timeout: float) -> None:
    """A real local run (toy_addition on the local profile) watched until it has min_steps metric rows."""
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import runs_dir
    from hermes_rl.core.readers.metrics import read_metrics

    shutil.rmtree(runs_dir(), ignore_errors=True)  # the synthetic runs above use a fixed clock: not beside a live one
    run = runs.start_run("toy_addition", "local")
    run_id = run["run_id"]
    print(f"  live run {run_id} started; waiting for {min_steps} steps (≤ {timeout:.0f} s)")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = runs.get_run(run_id, sample=False)["status"]
            if len(read_metrics(run_id)) >= min_steps or status in ("failed", "completed", "stopped", "lost"):
                break
            time.sleep(2)
        await shoot("live_local_run", [], run_id=run_id)
    finally:
        runs.stop_run(run_id)


def report() -> None:
    """`hermes-rl report` over a failed 40-step run with the rollouts a real run recorded, as Chromium draws it."""
    import subprocess

    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.runs import export
    from tests.fixtures_tui import REAL_ROLLOUTS, write_run, write_run_config

    if shutil.which("chromium") is None:
        print("  report.png skipped: chromium is not installed (apt-get install -y chromium)")
        return
    write_run("a1b2c3d4", status="failed", steps=40, total_steps=100, reason="trainer exited with code 1")
    shutil.copyfile(REAL_ROLLOUTS, run_dir("a1b2c3d4") / "rollouts.jsonl")
    write_run_config("a1b2c3d4", group_size=8, learning_rate=3e-4)
    page = export.write_report("a1b2c3d4")
    profile = Path(tempfile.mkdtemp(prefix="hermes-shots-chromium-"))
    try:
        subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            + [f"--user-data-dir={profile}", "--window-size=1280,1500", f"--screenshot={OUT / 'report.png'}"]
            + [page.as_uri()],
            check=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    print(f"  {OUT / 'report.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="also screenshot a real local run")
    parser.add_argument("--live-only", action="store_true", help="only the live run screenshot")
    parser.add_argument("--report-only", action="store_true", help="only the HTML report's screenshot")
    parser.add_argument("--live-steps", type=int, default=3)
    parser.add_argument("--live-timeout", type=float, default=900)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="hermes-shots-"))
    os.environ["HERMES_HOME"] = str(home)
    for name in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"):
        os.environ.pop(name, None)  # screenshots never show a key, and the local profile is the one shown
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        if not args.live_only and not args.report_only:
            asyncio.run(panes())
        if not args.live_only:
            report()
        if (args.live or args.live_only) and not args.report_only:
            asyncio.run(live(args.live_steps, args.live_timeout))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
