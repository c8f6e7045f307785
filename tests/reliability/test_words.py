"""Words mean what they say: an alert "for N steps" counts steps (not the several metric rows a step
writes), a negative token length is not an estimate, bytes that are not UTF-8 in a prompt are a clear
error, a reason holding control characters does not break the runs table, and a sweep limited to N
concurrent runs never has more, whatever the timing."""

from __future__ import annotations

import pytest

from hermes_rl.core.base.fsutil import read_jsonl
from tests.test_alerts import _monitor

pytestmark = [pytest.mark.reliability]


def _events(monitor, rows: list[dict]) -> list[dict]:
    monitor._check_metrics(rows)
    monitor.close()
    path = monitor.dir / "alerts.jsonl"
    return [row for row in read_jsonl(path) if row.get("event") == "metric"] if path.exists() else []


def test_an_alert_for_n_steps_counts_steps_not_rows(hermes_home):
    monitor = _monitor(hermes_home, "    metric: reward/mean\n    below: 0.2\n    for_steps: 3\n")
    # one step, written by the trainer and two environments (or replicas): one step past the line
    one_step = [{"step": 1, "reward/mean": 0.1}, {"step": 1, "reward/mean": 0.1}, {"step": 1, "reward/mean": 0.0}]
    assert _events(monitor, one_step) == []
    monitor = _monitor(hermes_home, "    metric: reward/mean\n    below: 0.2\n    for_steps: 3\n", "abcd0003")
    # the trainer's rows are read before the environments': steps 1-3 in two files, interleaved by step
    rows = [{"step": s, "reward/mean": 0.1} for s in (1, 2, 3)] + [{"step": s, "reward/mean": 0.1} for s in (1, 2)]
    (event,) = _events(monitor, rows)
    assert event["step"] == 3 and event["rule"] == "reward/mean below 0.2 for 3 steps"


MODEL_TEXT = "model said \x1b[7mINVERSE\tthen\u2028a new line\u202eesrever and\x1b[31m red"


def test_a_reason_with_control_characters_keeps_the_runs_table_whole(hermes_home, capsys, monkeypatch):
    from hermes_rl.core.clients.cli import main
    from hermes_rl.core.clients.cli.output import safe
    from hermes_rl.core.clients.cli.runs_list import _plain
    from tests.fixtures_tui import write_run

    write_run("f00d0001", status="failed", steps=2, reason=f"trainer failed: {MODEL_TEXT}")
    write_run("f00d0002", status="completed", steps=2)
    monkeypatch.setenv("COLUMNS", "4000")
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 3 and "f00d0001" in lines[2] and "INVERSE" in lines[2], out  # one row per run
    for bad in ("\x1b", "\u2028", "\u202e", "\t"):
        assert bad not in out, (bad, out)
    assert safe(MODEL_TEXT).startswith("model said [reverse]INVERSE")  # colours kept, as styles that end
    assert safe(MODEL_TEXT).endswith("[/reverse color(1)]")
    _plain(["run", "reason"], [["f00d0001", MODEL_TEXT], ["f00d0002", "-"]])  # `runs --all` past 200 rows
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 3, out
    for bad in ("\x1b", "\u2028", "\u202e", "\t"):
        assert bad not in out, (bad, out)


def test_a_prompt_that_is_not_utf8_is_a_clear_error(hermes_home, capsys):
    from hermes_rl.core.clients.cli import main
    from tests.fixtures_tui import write_run

    write_run("f00d0003", status="completed", steps=2)
    prompt = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # what Python makes of such argv bytes
    assert main(["rollouts", "f00d0003", "--prompt", prompt]) == 1
    err = capsys.readouterr().err
    assert "prompt is not UTF-8 text" in err and "unexpected" not in err, err


@pytest.mark.parametrize(
    ("option", "value"), [("prompt_tokens", -100), ("completion_tokens", -1), ("prompt_tokens", 0)]
)
def test_an_estimate_takes_no_negative_or_zero_token_length(option, value):
    from hermes_rl.core.base.errors import BadInput
    from hermes_rl.core.runs.cost import estimate

    values = {"total_steps": 10, "batch_size": 8, "group_size": 4, "max_token_length": 64, "base_model": "m"}
    with pytest.raises(BadInput, match=f"{option} must be a whole number of tokens from 1"):
        estimate(values, **{option: value})
