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
