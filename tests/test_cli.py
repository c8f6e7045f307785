"""The `hermes-rl` CLI as a user runs it: a real subprocess, one-line errors, --json everywhere,
and a run started by one client listed, inspected and stopped by another."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hermes_rl.core import runs
from tests.fixtures_core import wait_status, wait_until

CLI = [sys.executable, "-m", "hermes_rl.core.clients.cli"]


def hermes(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def test_envs_lists_the_project_environments_as_json():
    out = hermes("envs", "--json")
    assert out.returncode == 0, out.stderr
    names = {env["name"] for env in json.loads(out.stdout)}
    assert {"toy_addition", "gsm8k"} <= names


@pytest.mark.parametrize("bad", ["../../etc", "/etc/passwd", "A" * 5000])
def test_bad_run_id_is_one_line_error_without_traceback(bad):
    out = hermes("status", bad)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("hermes-rl: invalid run id")
    assert len(out.stderr.splitlines()) <= 2


def test_unknown_run_is_a_json_error():
    out = hermes("stop", "0badc0de", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "no run 0badc0de"


def test_malformed_set_argument_is_explained():
    out = hermes("config", "--set", "group_size")
    assert out.returncode == 1
    assert "field=value" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.timeout(120)
def test_a_run_started_elsewhere_is_listed_inspected_logged_and_stopped(specs, run_processes_cleanup):
    run = runs.launch([specs.http("api", delay=0.2), specs.sleeper("trainer", depends_on=[("api", "ready")])],
                      environment="cli_test", profile="local", total_steps=10)
    run_id = run["run_id"]
    wait_status(run_id, "running")

    listed = json.loads(hermes("runs", "--json").stdout)
    assert [r["run_id"] for r in listed] == [run_id]

    status = json.loads(hermes("status", run_id, "--json").stdout)
    assert status["status"] == "running"
    assert {p["name"]: p["state"] for p in status["processes"]} == {"api": "ready", "trainer": "ready"}

    wait_until(lambda: "up" in hermes("logs", run_id, "--process", "trainer").stdout, what="trainer log line")
    merged = hermes("logs", run_id).stdout
    assert any(line.startswith("trainer | ") for line in merged.splitlines())

    stopped = hermes("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    final = wait_status(run_id, "stopped")
    assert final["reason"] == "stopped by user"
    again = hermes("stop", run_id)
    assert again.returncode == 1 and "Traceback" not in again.stderr
