"""Every text view says whether a run learned: `start --watch` prints what `status` knows while it waits
and ends with the audit's verdict (a completed run that learned nothing is no green tick), and the text
`runs` and `results` carry the verdict. Runs written as the supervisor leaves them; no pipeline."""

from __future__ import annotations

import json

import pytest

from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import cli
from hermes_rl.core.clients.cli import watch
from tests.fixtures_tui import write_run


def _no_signal(run_id: str) -> None:
    """A completed run whose every group scored alike: every answer wrong."""
    write_run(run_id, status="completed", steps=20, total_steps=20, env_steps=False)
    rows = [
        {"step": s, "reward/mean": 0.0, "batch/groups": 4, "batch/sequences": 32, "signals/groups_zero_variance": 4}
        for s in range(1, 21)
    ]
    (run_dir(run_id) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def two_runs(hermes_home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per line, whatever the terminal
    write_run("a1b2c3d4", status="completed", steps=40, total_steps=40)
    _no_signal("0dead0ff")


def test_watch_ends_with_the_verdict_and_no_green_tick_for_a_run_that_learned_nothing(two_runs, capsys):
    assert watch.watch("a1b2c3d4") is None
    out = capsys.readouterr().out
    assert "run a1b2c3d4 ✔ completed" in out
    assert "audit: learning: over 40 steps reward 0.43 → 0.83" in out
    assert watch.watch("0dead0ff") is None
    out = capsys.readouterr().out
    assert "✔" not in out
    assert "run 0dead0ff ⚠ completed, but the audit says no_signal" in out
    assert (
        "audit: no_signal: 100 % of 40 groups scored alike, so GRPO has nothing to learn: every answer is wrong" in out
    )


def test_text_runs_and_results_carry_the_verdict(two_runs, capsys):
    assert cli.main(["runs"]) in (0, None)
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert "audit" in rows["run"]
    assert rows["0dead0ff"][1:3] == ["⚠", "completed"] and "no_signal" in rows["0dead0ff"]
    assert rows["a1b2c3d4"][1:3] == ["✔", "completed"] and "learning" in rows["a1b2c3d4"]
    # ranked by reward, a reward the audit says cannot be trusted is marked
    assert cli.main(["runs", "--sort", "reward"]) in (0, None)
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert " 0.000 ? " in rows["0dead0ff"] and " ? " not in rows["a1b2c3d4"]
    assert cli.main(["results", "0dead0ff"]) in (0, None)
    out = capsys.readouterr().out
    assert "run 0dead0ff ⚠ completed, but the audit says no_signal" in out
    assert "audit: no_signal  (groups alike 100 %" in out and "- 100 % of 40 groups scored alike" in out


def test_watch_prints_what_status_knows_while_it_waits_once_per_change(capsys, monkeypatch):
    failing = {
        "state": "failing",
        "reason": "running, env fails on 100% of its items: logged 2,800 × 'ZeroDivisionError: division by zero'",
        "tip": "read hermes-rl logs RUN --process env",
    }
    grown = dict(failing, reason=failing["reason"].replace("2,800", "2,950"))  # the same problem, a second on
    views = [
        {"status": "starting", "health": {}},
        {"status": "running", "health": failing},
        {"status": "running", "health": failing},
        {"status": "running", "health": grown},
        {"status": "failed", "health": failing, "reason": "stopped"},
    ]
    samples = iter(
        {"run": v, "phase": "waiting for the first batch", "step": 0, "notice": watch._notice(v)} for v in views
    )
    monkeypatch.setattr(watch.time, "sleep", lambda _s: None)
    watch._plain_lines("a1b2c3d4", lambda: next(samples))
    out = capsys.readouterr().out
    assert out.count("running, env fails on 100% of its items: logged") == 1
    assert out.count("tip: read hermes-rl logs RUN --process env") == 1
    assert watch._notice(views[-1]) == ()  # an ended run's last word is its own reason
