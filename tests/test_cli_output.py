"""CLI output where it goes: tables written to a pipe keep each row on one line, `logs RUN` merges its
processes' logs by time, `--help` says each default."""

from __future__ import annotations

import pytest

from hermes_rl.core.clients import cli
from tests.fixtures_tui import FIXED_NOW, write_run

START = "==== hermes-rl 2025-11-29 15:00:00 UTC: starting {}\n"


def test_a_table_written_to_a_pipe_does_not_wrap_at_80_columns(hermes_home, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    reason = "trainer exited with code 1: " + "the whole reason a user greps for, " * 3 + "END"
    write_run("aaaa0001", status="failed", reason=reason, steps=3)
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("aaaa0001"))
    assert row.rstrip().endswith("END") and len(row) > 80  # one line, not folded at 80


def test_logs_of_several_processes_are_merged_by_time(hermes_home, capsys, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    logs = {
        "api": START.format("api") + "2025-11-29 15:00:01,100 INFO api up\n2025-11-29 15:00:04,000 INFO api /batch\n",
        "trainer": START.format("trainer") + "2025-11-29 15:00:02,000 INFO step 1\n  a continuation line\n"
        "2025-11-29 15:00:05,000 INFO step 2\n",
        "env": START.format("env") + "2025-11-29 15:00:03.500 env group sent\n",
    }
    write_run("aaaa0001", created_at=FIXED_NOW, logs=logs)
    assert cli.main(["logs", "aaaa0001", "--json"]) == 0
    import json

    lines = [(row["process"], row["line"]) for row in json.loads(capsys.readouterr().out)["lines"]]
    said = [line.split(" INFO ")[-1] if " INFO " in line else line.strip() for _, line in lines]
    body = [s for s in said if not s.startswith(("====", "invalid utf-8"))]  # write_run's odd bytes line
    assert body == [
        "api up",
        "step 1",
        "a continuation line",
        "2025-11-29 15:00:03.500 env group sent",
        "api /batch",
        "step 2",
    ], body


def test_help_says_each_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["logs", "--help"])
    out = capsys.readouterr().out
    assert "(default: 40)" in out and "--json" in out and "(default: False)" not in out
    with pytest.raises(SystemExit):
        cli.main(["test-inference", "--help"])
    out = capsys.readouterr().out
    assert "groups to generate and score (default: 3)" in out
