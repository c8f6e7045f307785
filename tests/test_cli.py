"""The `hermes-rl` CLI as a user runs it: a real subprocess, one-line errors, --json everywhere,
and a run started by one client listed, inspected and stopped by another."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.formatting import human_age, human_duration, human_number, human_size
from hermes_rl.core.clients.toolset import TOOLS_BY_NAME
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


def test_resume_of_an_unknown_or_unsaved_run_says_why(specs):
    out = hermes("resume", "0badc0de", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "no run 0badc0de"
    run_id = runs.launch([specs.sleeper("trainer")], environment="toy_addition", profile="local")["run_id"]
    wait_status(run_id, "running")
    busy = hermes("resume", run_id)
    assert busy.returncode == 1 and "only an ended run can be resumed" in busy.stderr, busy.stderr
    runs.stop_run(run_id, wait=20)
    unsaved = hermes("resume", run_id)
    assert unsaved.returncode == 1 and "saved no training state" in unsaved.stderr, unsaved.stderr
    assert "Traceback" not in unsaved.stderr


def test_malformed_set_argument_is_explained():
    out = hermes("config", "--set", "group_size")
    assert out.returncode == 1
    assert "field=value" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.timeout(120)
def test_a_run_started_elsewhere_is_listed_inspected_logged_and_stopped(specs, run_processes_cleanup):
    run = runs.launch(
        [specs.http("api", delay=0.2), specs.sleeper("trainer", depends_on=[("api", "ready")])],
        environment="cli_test",
        profile="local",
        total_steps=10,
    )
    run_id = run["run_id"]
    wait_status(run_id, "running")

    listed = json.loads(hermes("runs", "--json").stdout)
    assert [r["run_id"] for r in listed] == [run_id]

    status = json.loads(hermes("status", run_id, "--json").stdout)
    assert status["status"] == "running"
    assert {p["name"]: p["state"] for p in status["processes"]} == {"api": "ready", "trainer": "ready"}
    # the same report as rl_check_status, less its rate-limit fields
    rate_limit = {"rate_limited", "report_reason", "previous_state", "next_check_in_s"}
    assert set(status) == set(TOOLS_BY_NAME["rl_check_status"].returns) - rate_limit
    results = json.loads(hermes("results", run_id, "--json").stdout)
    assert set(results) == set(TOOLS_BY_NAME["rl_get_results"].returns)

    wait_until(lambda: "up" in hermes("logs", run_id, "--process", "trainer").stdout, what="trainer log line")
    merged = hermes("logs", run_id).stdout
    assert any(line.startswith("trainer | ") for line in merged.splitlines())
    logged = json.loads(hermes("logs", run_id, "--process", "trainer", "--json").stdout)
    assert set(logged["log_paths"]) == {"trainer"} and logged["lines"]
    assert all(row["process"] == "trainer" for row in logged["lines"])
    assert any("up" in row["line"] for row in logged["lines"])
    follow = subprocess.Popen([*CLI, "logs", run_id, "--follow", "--json"], stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(follow.stdout.readline())  # one JSON object per line
        assert set(first) == {"process", "line"} and first["process"] in ("api", "trainer")
    finally:
        follow.terminate()
        follow.wait(timeout=30)

    stopped = hermes("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    final = wait_status(run_id, "stopped")
    assert final["reason"] == "stopped by user"
    again = hermes("stop", run_id)
    assert again.returncode == 1 and "Traceback" not in again.stderr


def test_formatters_read_as_people_do():
    assert human_duration(3725) == "1 h 2 min" and human_duration(184) == "3 min 4 s" and human_duration(5.9) == "5 s"
    assert human_duration(None) == "-" and human_duration(float("nan")) == "-"
    assert human_size(1234) == "1.2 kB" and human_size(123_456_789) == "123.5 MB" and human_size(None) == "-"
    assert human_age(1000.0, now=1000.0 + 2 * 3600 + 5) == "2h" and human_age(None) == "-"
    assert human_number(0.123456) == "0.123" and human_number(0.123456, 4) == "0.1235" and human_number(7) == "7"


def test_results_and_runs_report_eval_accuracy_first_best_last(hermes_home):
    """A run whose environment evaluated: `results` names the first, best and last greedy eval accuracy
    (text and --json, the same figures rl_get_results returns) and `runs --json` the first and latest."""
    from tests.fixtures_tui import write_run

    write_run("e7a1e7a1", status="completed", steps=20)  # evals every 5 steps: 0.25, 0.45, 0.65, 0.85
    out = hermes("results", "e7a1e7a1")
    assert out.returncode == 0, out.stderr
    assert "eval accuracy (greedy): first 0.25 · best 0.85 (step 20) · last 0.85 (step 20)" in out.stdout
    data = json.loads(hermes("results", "e7a1e7a1", "--json").stdout)
    assert data["eval_accuracy"] == {"first": 0.25, "best": 0.85, "best_step": 20, "last": 0.85, "last_step": 20}
    listed = json.loads(hermes("runs", "--json").stdout)
    assert (listed[0]["eval_first"], listed[0]["eval_last"]) == (0.25, 0.85)
    write_run("0e0e0e0e", status="completed", steps=20, env_steps=False)  # an environment that never evaluates
    assert json.loads(hermes("results", "0e0e0e0e", "--json").stdout)["eval_accuracy"] is None
    assert "eval accuracy" not in hermes("results", "0e0e0e0e").stdout


PRINTING_COMMANDS = [
    ["envs"],
    ["runs"],
    ["status", "a1b2c3d4"],
    ["logs", "a1b2c3d4"],
    ["results", "a1b2c3d4"],
    ["rollouts", "a1b2c3d4"],
    ["compare", "a1b2c3d4", "0badc0de"],
    ["select", "toy_addition"],
    ["stop", "0badc0de"],
    ["status", "ffffffff"],  # an error printed (as JSON with --json)
]


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("command", PRINTING_COMMANDS, ids=lambda c: "-".join(c))
def test_a_reader_that_goes_away_ends_the_command_quietly(hermes_home, command, json_flag):
    """`hermes-rl … | head -c 10`: the reader is gone before the command writes (its read end closed
    at once), so every write fails; the command ends without a traceback."""
    import shutil

    from hermes_rl.core.base.paths import run_dir
    from tests.fixtures_tui import REAL_ROLLOUTS, SAMPLE_LOGS, write_run

    write_run("a1b2c3d4", environment="toy_addition", steps=20, logs=SAMPLE_LOGS)
    write_run("0badc0de", environment="toy_addition", status="failed", steps=7, reason="trainer exited 1")
    shutil.copyfile(REAL_ROLLOUTS, run_dir("a1b2c3d4") / "rollouts.jsonl")
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [*CLI, *command, *json_flag], stdout=write_end, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    os.close(write_end)
    os.close(read_end)
    _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_main_sh_without_a_terminal_prints_progress_within_30_s(hermes_home, tmp_path):
    """`scripts/main.sh > file`: the run's phase is printed at once (no terminal, so plain lines, not a
    bar that only a terminal shows), then a line every few seconds. It runs README's default whatever
    another shell selected (a taskset this client cannot see) or drafted for it."""
    import re
    import time
    from pathlib import Path

    (hermes_home / "rl" / "drafts").mkdir(parents=True)
    (hermes_home / "rl" / "current.yaml").write_text("environment: hermes-vf-digits\nprofile: null\n")
    (hermes_home / "rl" / "drafts" / "toy_addition.yaml").write_text("total_steps: 120\nlearning_rate: 0.0003\n")

    root = Path(__file__).resolve().parent.parent
    stamp = root / ".venv" / ".hermes-rl-installed-local_mcp"
    # main.sh installs its extras first when they are not (minutes, once): then run what it runs.
    command = ["bash", str(root / "scripts" / "main.sh")] if stamp.exists() else [*CLI, "demo"]
    out = tmp_path / "main.out"
    launched = time.monotonic()
    with open(out, "w") as handle:
        proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=os.environ.copy())
    run_id = None
    try:
        while time.monotonic() - launched < 30 and run_id is None:
            found = re.search(
                r"^run ([0-9a-f]{8}) (building the model|starting processes|waiting|training)", out.read_text(), re.M
            )
            run_id = found.group(1) if found else None
            time.sleep(0.2)
        assert run_id, f"no progress line within 30 s:\n{out.read_text()}"
        run = runs.get_run(run_id)
        assert run["environment"] == "toy_addition"
        assert run["profile_values"]["total_steps"] == 800, run["profile_values"]
        assert "this runs the default toy_addition with its default values" in out.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for run in runs.list_runs():
            runs.stop_run(run["run_id"])


def test_logs_merged_is_one_stream_in_start_order_without_access_lines_unless_asked(hermes_home):
    from tests.fixtures_tui import write_run

    def start(name: str, at: str) -> str:
        return f"==== hermes-rl 2026-01-01 {at} UTC: starting {name} (run a1b2c3d4, attempt 1): {name}\n"

    write_run(
        "a1b2c3d4",
        logs={
            "api": start("api", "10:00:00") + 'INFO:     127.0.0.1 - "POST /batch HTTP/1.1" 200 OK\napi up\n',
            # the trainer restarted at 10:00:09: its second attempt comes after the env's lines
            "trainer": start("trainer", "10:00:05") + "step 1\n" + start("trainer", "10:00:09") + "step 2\n",
            "env": start("env", "10:00:07") + "env scored\n",
        },
    )
    out = hermes("logs", "a1b2c3d4")
    assert out.returncode == 0, out.stderr
    lines = [line.split(" | ", 1)[1] for line in out.stdout.splitlines() if " | " in line]
    content = [line for line in lines if not line.startswith("====")]
    assert content[:4] == ["api up", "step 1", "env scored", "step 2"]  # (write_run appends a bad-bytes line)
    assert "1 HTTP access line hidden" in out.stderr
    shown = hermes("logs", "a1b2c3d4", "--access")
    assert 'POST /batch HTTP/1.1" 200' in shown.stdout


def test_status_of_an_ended_run_says_ran_and_names_signals_results_read_as_values(hermes_home):
    from tests.fixtures_tui import write_run

    write_run("0badc0de", status="failed", steps=7, reason="trainer exited 1")  # api and env got SIGTERM (-15)
    status = hermes("status", "0badc0de")
    assert status.returncode == 0, status.stderr
    first = status.stdout.splitlines()[0]
    assert " ran " in first and "running" not in first
    assert "SIGTERM" in status.stdout and "-15" not in status.stdout
    results = hermes("results", "0badc0de")
    values = dict(line.split(None, 1) for line in results.stdout.splitlines() if line.startswith("  "))
    assert values["step"] == "7"  # a count, not 7.0000
    assert values["train/learning_rate"] == "4e-05"  # not 0.0000
    assert values["time"].endswith("UTC")  # not epoch seconds


def test_runs_shows_which_run_a_resumed_one_continues_and_its_branch(hermes_home, monkeypatch):
    import json as jsonlib

    monkeypatch.setenv("COLUMNS", "200")  # one line a run
    from hermes_rl.core.base.paths import run_dir
    from tests.fixtures_tui import FIXED_NOW, write_run

    write_run("a1b2c3d4", status="stopped")
    for index, child in enumerate(("0badc0de", "5ee5ee5e")):
        write_run(child, created_at=FIXED_NOW + index)
        record = run_dir(child) / "run.json"
        record.write_text(jsonlib.dumps(jsonlib.loads(record.read_text()) | {"parent_run_id": "a1b2c3d4"}))
    out = hermes("runs")
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "↳ a1b2c3d4 branch 1" in rows["0badc0de"] and "↳ a1b2c3d4 branch 2" in rows["5ee5ee5e"]
    assert "↳" not in rows["a1b2c3d4"]


def test_hints_name_a_command_that_works_from_here(monkeypatch, tmp_path):
    """Off PATH (a clone whose venv is not activated) the hints say `.venv/bin/hermes-rl`; on PATH, `hermes-rl`."""
    from pathlib import Path

    from hermes_rl.core.base.paths import cli_command

    script = Path(sys.prefix) / "bin" / "hermes-rl"
    if not script.exists():
        pytest.skip("hermes-rl is not installed as a script in this environment")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(script.parent.parent.parent)
    assert cli_command() == str(Path(script.parent.parent.name) / "bin" / "hermes-rl")
    monkeypatch.setenv("PATH", str(script.parent))
    assert cli_command() == "hermes-rl"


def test_where_environments_are_found_is_saved_for_every_client(hermes_home, monkeypatch, tmp_path):
    """`select` in a shell whose HERMES_RL_ENV_PATH names a folder saves that folder in rl/envs.yaml, so
    a client started without the variable (the MCP server, Hermes, main.sh) finds the same environment;
    a selection that can no longer be found falls back to the default with a one-line notice."""
    from tests.fixtures_config import ENV_FIXTURES, fixture_id

    monkeypatch.delenv("HERMES_RL_ENV_PYTHON", raising=False)
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(ENV_FIXTURES))
    selected = hermes("select", fixture_id("fixture_basic"))
    assert selected.returncode == 0, selected.stderr
    assert f"saved {ENV_FIXTURES}" in selected.stdout
    monkeypatch.delenv("HERMES_RL_ENV_PATH")
    ids = {env["id"] for env in json.loads(hermes("envs", "--json").stdout)}
    assert fixture_id("fixture_basic") in ids  # found without the variable
    where = json.loads(hermes("envs", "--where", "--json").stdout)
    assert where["folders"] == {"paths": [str(ENV_FIXTURES)], "from": str(hermes_home / "rl" / "envs.yaml")}

    bad = hermes("envs", "--add-python", str(tmp_path))
    assert bad.returncode == 1 and "is not an executable Python interpreter" in bad.stderr
    assert len(bad.stderr.splitlines()) <= 2 and "Traceback" not in bad.stderr
    assert hermes("envs", "--add-python", sys.executable).returncode == 0
    monkeypatch.setenv("HERMES_RL_ENV_PYTHON", "/nowhere/python")  # the variable overrides the saved list
    where = json.loads(hermes("envs", "--where", "--json").stdout)
    assert where["pythons"] == {"paths": ["/nowhere/python"], "from": "$HERMES_RL_ENV_PYTHON"}
    monkeypatch.delenv("HERMES_RL_ENV_PYTHON")

    assert hermes("envs", "--remove", str(ENV_FIXTURES)).returncode == 0
    estimate = hermes("start", "--estimate", "--json")  # the selection is gone: the default, not an error
    assert estimate.returncode == 0, estimate.stderr
    assert json.loads(estimate.stdout)["environment"] == "toy_addition"
    config = hermes("config")
    assert config.returncode == 0, config.stderr
    note = " ".join(config.stderr.split())  # as a terminal of any width wraps it
    assert f"the selected environment '{fixture_id('fixture_basic')}' is not found here" in note
    assert "using the default toy_addition" in note


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_stop_waits_as_long_as_the_stop_can_take_and_shows_progress(specs, run_processes_cleanup):
    """A process given 17 s to stop (over the old fixed 15 s): `hermes-rl stop` follows it to the end,
    a line per change, and succeeds."""
    run_id = runs.launch(
        [specs.log_ready("api", "ignore_term.py", stop_timeout=17), specs.sleeper("trainer")],
        environment="toy_addition",
        profile="local",
    )["run_id"]
    wait_status(run_id, "running")
    out = hermes("stop", run_id)
    assert out.returncode == 0, out.stderr
    assert f"run {run_id}" in out.stdout and "stopped: stopped by user" in out.stdout
    progress = [line for line in out.stderr.splitlines() if line.startswith(f"stopping run {run_id}")]
    assert progress and "api still running · trainer stopped" in progress[-1], out.stderr
    assert "of up to 4" in progress[0]  # 17 + 10 s of stop timeouts, and the margin: named at once


def test_a_stops_survivors_are_named_never_a_question_mark():
    from hermes_rl.core.daemons.procscan import Survivor
    from hermes_rl.core.runs.control import _survivor_name

    run = {"processes": [{"name": "trainer", "pid": 10, "pgid": 10}, {"name": "env", "pid": 20, "pgid": 20}]}
    assert _survivor_name(run, Survivor(10, 10, "", "python x", None)) == "trainer"
    assert _survivor_name(run, Survivor(21, 20, "", "python y", None)) == "a child of env"
    assert (
        _survivor_name(run, Survivor(30, 30, "", "/usr/bin/python3 -m vllm.entry --port 1", None))
        == "python3 vllm.entry"
    )
    assert _survivor_name(run, Survivor(31, 31, "", "", None)) == "a process of the run"


def test_a_taskset_selected_in_a_shell_with_its_interpreter_is_found_by_clients_without_it(
    hermes_home, vf_python, monkeypatch
):
    """The first-hour trap: `select hermes-vf-digits` in a shell that exported HERMES_RL_ENV_PYTHON, then a
    client without it (the MCP server, Hermes, main.sh). The interpreter is saved for every client."""
    from hermes_rl.core.envs import verifiers_envs

    monkeypatch.setenv("HERMES_RL_ENV_PYTHON", str(vf_python))
    verifiers_envs.clear_cache()
    selected = hermes("select", "hermes-vf-digits")
    assert selected.returncode == 0, selected.stderr
    assert f"saved {vf_python}" in selected.stdout
    monkeypatch.delenv("HERMES_RL_ENV_PYTHON")
    config = hermes("config", "--json")
    assert config.returncode == 0, config.stderr
    assert json.loads(config.stdout)["environment"] == "hermes-vf-digits"
