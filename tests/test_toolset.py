"""The ten rl_* tools against the real core: real environment files, real config drafts, real runs
(small programs under a real supervisor), real files under a temp $HERMES_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_rl.core.base.records import MetricsSummary, ProcessSummary, RunSummary
from hermes_rl.core.clients import toolset
from hermes_rl.core.clients.toolset import TOOL_SCHEMAS, TOOLS, TOOLS_BY_NAME, call_tool
from hermes_rl.core.envs.profiles import PROFILE_VALUES
from tests.fixtures_core import lose_run
from tests.fixtures_toolset import (
    ARITH_ENV_NAME,
    completing_spec,
    crashing_spec,
    launch_run,
    sleeper_spec,
    wait_status,
)

ROOT = Path(__file__).resolve().parent.parent


def assert_shape(name: str, result: dict, alt: bool = False) -> None:
    """A successful result has exactly the keys its schema description promises."""
    tool = TOOLS_BY_NAME[name]
    assert "error" not in result, result
    expected = tool.returns_alt if alt else tool.returns
    assert set(result) == set(expected), f"{name}: returned {sorted(result)}, promised {sorted(expected)}"
    json.dumps(result, allow_nan=False)


# -- the table -------------------------------------------------------------------------------------


def test_table_has_the_ten_tools_and_every_returned_key_has_a_meaning():
    assert [t.name for t in TOOLS] == [
        "rl_list_environments",
        "rl_select_environment",
        "rl_get_current_config",
        "rl_edit_config",
        "rl_start_training",
        "rl_check_status",
        "rl_stop_training",
        "rl_get_results",
        "rl_list_runs",
        "rl_test_inference",
    ]
    for tool, schema in zip(TOOLS, TOOL_SCHEMAS):
        function = schema["function"]
        assert schema["type"] == "function" and function["name"] == tool.name
        assert function["parameters"]["type"] == "object"
        assert set(function["parameters"].get("required", [])) <= set(function["parameters"]["properties"])
        assert function["parameters"].get("required", []) == list(tool.required)
        assert tool.returns and all(isinstance(v, str) and v for v in tool.returns.values())


def test_the_schemas_sent_with_every_request_stay_small():
    """Hermes sends every enabled tool's schema with every request (as json.dumps of the definitions):
    the ten together are held to 5,000 characters, and each still says what its tool does."""
    sizes = {s["function"]["name"]: len(json.dumps(s)) for s in TOOL_SCHEMAS}
    total = len(json.dumps(TOOL_SCHEMAS))
    print(f"\nrl_* tool schemas: {total} characters in all; " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    assert total <= 5000
    described = {s["function"]["name"]: s["function"]["description"] for s in TOOL_SCHEMAS}
    # what an agent must know before its first call, not after
    assert "TINKER_API_KEY" in described["rl_start_training"] and "local" in described["rl_start_training"]
    assert "min_interval_s" in described["rl_check_status"] and "at once" in described["rl_check_status"]
    assert "locked" in described["rl_get_current_config"] and "locked" in described["rl_edit_config"]
    assert "OPENROUTER_API_KEY" in described["rl_test_inference"] and "base_url" in described["rl_test_inference"]
    assert "rl:training" in described["rl_list_environments"]  # the skill with the workflow


def test_hints_in_tool_answers_name_tools_not_cli_commands(hermes_home):
    unknown_run = call_tool("rl_check_status", {"run_id": "deadbeef"})
    assert "rl_list_runs" in unknown_run["hint"] and "hermes-rl" not in unknown_run["hint"]
    bad_id = call_tool("rl_get_results", {"run_id": "../x"})
    assert "rl_list_runs" in bad_id["hint"] and "hermes-rl" not in bad_id["hint"]
    stop_first = toolset.agent_wording("stop it first: hermes-rl stop 3fa2c91b")
    assert stop_first == "stop it first: rl_stop_training('3fa2c91b')"
    assert toolset.agent_wording("pick one with `hermes-rl select ENV`; see `hermes-rl envs`") == (
        "pick one with rl_select_environment(name); see rl_list_environments"
    )


def test_every_cli_command_a_tool_answer_can_name_has_a_tool():
    """Core's hints name CLI commands; each one reachable from a tool is reworded for agents."""
    import re

    core = ROOT / "core"
    named = set()
    for path in core.rglob("*.py"):
        if path.relative_to(core).parts[0] == "clients":
            continue  # the CLI's own package and the tools' wording table
        for match in re.finditer(r"hint=f?\"([^\"]*)\"", path.read_text(encoding="utf-8")):
            named.update(re.findall(r"hermes-rl [a-z]+(?: [A-Z_]+| \{[a-z_]+\}|(?: --[a-z]+ [A-Z=]+))?", match[1]))
    assert named, "no CLI command found in core's hints: the scan is broken"
    for command in named:
        if command.startswith(("hermes-rl compare", "hermes-rl alerts")):
            continue  # only the CLI compares runs and shows alert rules: no tool answer names them
        sample = command.replace("{run_id}", "3fa2c91b").replace("{parent_id}", "3fa2c91b")
        assert "hermes-rl" not in toolset.agent_wording(sample), command


def test_agent_tools_doc_lists_the_keys_every_tool_returns():
    rows = {
        line.split("`")[1].split("(")[0]: line
        for line in (ROOT / "docs" / "agent_tools.md").read_text().splitlines()
        if line.startswith("| `rl_")
    }
    assert set(rows) == set(TOOLS_BY_NAME)
    for tool in TOOLS:
        returned = rows[tool.name].rsplit(" | ", 1)[-1]
        assert all(f"`{key}`" in returned for key in tool.returns), (tool.name, returned)


def test_call_tool_rejects_unknown_tools_and_arguments_clearly():
    assert "unknown tool" in call_tool("rl_nope", {})["error"]
    out = call_tool("rl_list_runs", {"verbose": True})
    assert "unknown argument" in out["error"] and "accepted: status, environment" in out["hint"]
    out = call_tool("rl_check_status", {})
    assert "missing required argument 'run_id'" in out["error"]
    out = call_tool("rl_test_inference", {"num_steps": "3"})
    assert "num_steps must be integer" in out["error"]
    assert "must be an object" in call_tool("rl_list_runs", [1, 2])["error"]


def _bounded_arguments():
    for tool in TOOLS:
        for name, spec in tool.properties.items():
            for keyword, op, step in (("minimum", ">=", -1), ("maximum", "<=", 1)):
                if keyword in spec:
                    yield tool, name, op, spec[keyword], spec[keyword] + step


@pytest.mark.parametrize(
    "tool, name, op, bound, value", list(_bounded_arguments()), ids=lambda v: getattr(v, "name", str(v))
)
def test_every_bound_a_schema_declares_is_the_one_the_tool_enforces(tool, name, op, bound, value, hermes_home):
    """The bounds an agent is shown (the tool's JSON Schema) are the bounds its call is held to, with
    one message naming the argument, the bound and the value, before the tool runs."""
    args = {n: "deadbeef" for n in tool.required} | {name: value}
    assert call_tool(tool.name, args)["error"] == f"{tool.name}: {name} must be {op} {bound}, got {value}"


def test_a_number_no_float_holds_is_refused_as_bad_input(hermes_home):
    out = call_tool("rl_check_status", {"run_id": "deadbeef", "min_interval_s": 2**2000})
    assert out["error"] == "rl_check_status: min_interval_s must be a finite number, got int"
    out = call_tool("rl_check_status", {"run_id": "deadbeef", "min_interval_s": float("nan")})
    assert out["error"] == "rl_check_status: min_interval_s must be a finite number, got NaN"


@pytest.mark.parametrize("bad", ["../../etc/passwd", "..", "3FA2C91B", "3fa2c91", "3fa2c91b/..", "", " 3fa2c91b"])
@pytest.mark.parametrize("tool", ["rl_check_status", "rl_stop_training", "rl_get_results"])
def test_run_ids_that_escape_their_folder_are_rejected(tool, bad, hermes_home):
    outside = hermes_home / "rl" / "etc"
    outside.mkdir(parents=True)
    out = call_tool(tool, {"run_id": bad})
    assert "invalid run id" in out["error"] and "8 lowercase hex" in out["hint"]
    assert not (hermes_home / "rl" / "status_checks").exists() or not any(
        (hermes_home / "rl" / "status_checks").iterdir()
    )


def test_an_unexpected_exception_becomes_a_json_error_without_traceback(monkeypatch):
    from hermes_rl.core import runs

    def explode(**_filters):
        raise RuntimeError('disk on fire\n  File "x.py", line 1')

    monkeypatch.setattr(runs, "list_runs", explode)
    out = call_tool("rl_list_runs", {})
    assert out["error"] == "rl_list_runs failed: RuntimeError: disk on fire"
    assert "Traceback" not in json.dumps(out) and "hint" in out


def test_secrets_never_leak_through_error_messages(monkeypatch):
    from hermes_rl.core import runs

    monkeypatch.setenv("TINKER_API_KEY", "tml-supersecretvalue")

    def leak():
        raise ValueError("bad key tml-supersecretvalue")

    monkeypatch.setattr(runs, "list_runs", leak)
    assert "tml-supersecretvalue" not in json.dumps(call_tool("rl_list_runs"))


# -- environments and config -------------------------------------------------------------------------


def test_list_select_and_unknown_environment(arith_env, hermes_home):
    (hermes_home / "rl" / "environments" / "broken_env.py").write_text(
        "from atroposlib.envs.base import BaseEnv\nclass X(BaseEnv:\n"
    )
    listed = call_tool("rl_list_environments")
    assert_shape("rl_list_environments", listed)
    names = {e["name"]: e for e in listed["environments"]}
    assert names[ARITH_ENV_NAME]["class_name"] == "ToolArithEnv"
    assert names[ARITH_ENV_NAME]["file"].endswith("tool_arith.py")
    assert names[ARITH_ENV_NAME]["description"].startswith("Single-digit addition")
    assert any(e["file"].endswith("broken_env.py") and e["error"] for e in listed["errors"])
    assert listed["selected"] == ARITH_ENV_NAME

    unknown = call_tool("rl_select_environment", {"name": "no_such_env"})
    assert "no_such_env" in unknown["error"] and ARITH_ENV_NAME in unknown["available"]

    selected = call_tool("rl_select_environment", {"name": ARITH_ENV_NAME})
    assert_shape("rl_select_environment", selected)
    assert selected["selected"] == ARITH_ENV_NAME
    assert selected["profile"] == "toolset_test"  # selecting keeps the chosen profile
    from hermes_rl.core.envs import drafts

    assert drafts.current_selection()["environment"] == ARITH_ENV_NAME


@pytest.mark.timeout(120)
def test_get_and_edit_config_validated_by_core(arith_env):
    view = call_tool("rl_get_current_config")
    assert_shape("rl_get_current_config", view)
    assert view["environment"] == ARITH_ENV_NAME and view["profile"] == "toolset_test"
    editable = {f["name"]: f for f in view["editable"]}
    group = editable["group_size"]
    assert group["type"] == "int" and group["description"] and "default" in group and "value" in group
    locked = {f["name"]: f for f in view["locked"]}
    # the profile extends `local` and does not set these: the tool shows local's locked value and default
    assert locked["tokenizer_name"]["reason"]
    assert locked["max_token_length"]["value"] == PROFILE_VALUES["local"]["locked"]["max_token_length"]
    assert editable["learning_rate"]["default"] == PROFILE_VALUES["local"]["editable_defaults"]["learning_rate"]

    edited = call_tool("rl_edit_config", {"field": "group_size", "value": 6})
    assert_shape("rl_edit_config", edited)
    assert edited["value"] == 6 and edited["previous"] == group["value"]
    assert edited["default"] == group["default"] and edited["modified"] is (group["default"] != 6)
    again = {f["name"]: f for f in call_tool("rl_get_current_config")["editable"]}
    assert again["group_size"]["value"] == 6 and again["group_size"]["modified"] is True

    coerced = call_tool("rl_edit_config", {"field": "group_size", "value": "5"})
    assert coerced["value"] == 5

    locked_edit = call_tool("rl_edit_config", {"field": "max_token_length", "value": 64})
    assert "locked" in locked_edit["error"]
    assert call_tool("rl_edit_config", {"field": "learning_rate", "value": 0.001})["value"] == 0.001
    unknown = call_tool("rl_edit_config", {"field": "no_such_field", "value": 1})
    assert "no_such_field" in unknown["error"]
    bad = call_tool("rl_edit_config", {"field": "group_size", "value": "lots"})
    assert "group_size" in bad["error"]
    # nothing was lost by the refused edits
    assert {f["name"]: f for f in call_tool("rl_get_current_config")["editable"]}["group_size"]["value"] == 5


def test_start_training_names_the_missing_key(arith_env, hermes_home):
    from hermes_rl.core.envs import drafts

    drafts.select_environment(ARITH_ENV_NAME, "tinker")
    out = call_tool("rl_start_training")
    assert "TINKER_API_KEY" in out["error"] and ".env" in out["hint"]
    assert call_tool("rl_list_runs")["count"] == 0  # nothing half-started


@pytest.mark.timeout(180)
def test_start_training_starts_the_real_pipeline_and_stop_ends_it(arith_env, run_cleanup, hermes_home):
    from hermes_rl.core import runs

    # no profile chosen and no TINKER_API_KEY: the local backend, with a notice saying so
    (hermes_home / "rl" / "current.yaml").write_text(f"environment: {ARITH_ENV_NAME}\n")
    started = call_tool("rl_start_training")
    assert_shape("rl_start_training", started)
    run_cleanup.append(started["run_id"])
    assert started["status"] in ("starting", "running") and started["profile"] == "local"
    assert started["environment"] == ARITH_ENV_NAME
    assert Path(started["config_path"]).is_file()
    assert {"api", "trainer", "env"} <= set(started["log_paths"])
    assert started["wandb"]["mode"] == "offline" and started["wandb"]["run_name"]
    assert any("TINKER_API_KEY" in notice for notice in started["notices"])
    listed = call_tool("rl_list_runs")
    assert listed["runs"][0]["run_id"] == started["run_id"]

    stopped = call_tool("rl_stop_training", {"run_id": started["run_id"]})
    assert_shape("rl_stop_training", stopped)
    assert stopped["status"] == "stopped" and stopped["previous_status"] in ("starting", "running")
    assert all(p["state"] not in ("starting", "ready") for p in stopped["processes"])
    assert runs.get_run(started["run_id"])["status"] == "stopped"


# -- runs: status, rate limit, results ---------------------------------------------------------------


@pytest.mark.timeout(90)
def test_completed_run_status_results_and_listing(hermes_home, run_cleanup):
    first = launch_run([completing_spec(steps=3)], total_steps=3)
    run_cleanup.append(first)
    wait_status(first, ("completed",))
    time.sleep(0.01)
    second = launch_run([sleeper_spec()], total_steps=10)
    run_cleanup.append(second)

    status = call_tool("rl_check_status", {"run_id": first})
    assert_shape("rl_check_status", status)
    assert status["status"] == "completed" and status["rate_limited"] is False
    metrics = status["metrics"]
    assert metrics["step"] == 3 and metrics["total_steps"] == 3
    assert metrics["reward_mean"] == pytest.approx(1.0) and metrics["loss"] == pytest.approx(1 / 3)
    assert metrics["percent_correct"] is None and metrics["eval_percent_correct"] is None
    trainer = status["processes"][0]
    assert trainer["name"] == "trainer" and trainer["exit_code"] == 0 and trainer["state"] == "exited"
    # nested records hold exactly the keys the schema lists
    assert set(trainer) == set(ProcessSummary.__annotations__)
    assert set(metrics) == set(MetricsSummary.__annotations__)
    assert status["running_time_s"] is not None and status["running_time_s"] >= 0
    assert status["wandb_url"] is None  # offline
    assert Path(status["log_paths"]["trainer"]).name == f"trainer_{first}.log"
    assert status["next_check_in_s"] == 0
    # a finished run is always reported in full, never rate-limited
    assert call_tool("rl_check_status", {"run_id": first})["rate_limited"] is False

    results = call_tool("rl_get_results", {"run_id": first})
    assert_shape("rl_get_results", results)
    assert results["final_metrics"]["step"] == 3 and len(results["history"]) == 3
    assert Path(results["checkpoint"]).is_dir() and results["tinker_path"] == "tinker://local/3"

    listed = call_tool("rl_list_runs")
    assert_shape("rl_list_runs", listed)
    assert [r["run_id"] for r in listed["runs"]] == [second, first] and listed["count"] == 2
    assert all(set(row) == set(RunSummary.__annotations__) for row in listed["runs"])

    assert "already completed" in call_tool("rl_stop_training", {"run_id": first})["error"]


@pytest.mark.timeout(90)
def test_rate_limit_reports_a_failure_at_once_and_never_limits_typos(hermes_home, run_cleanup):
    run_id = launch_run([sleeper_spec(), crashing_spec(after=6.0, code=3)])
    run_cleanup.append(run_id)
    wait_status(run_id, ("running",))

    first = call_tool("rl_check_status", {"run_id": run_id})
    assert_shape("rl_check_status", first)
    assert first["status"] == "running" and first["report_reason"] == "first check"
    assert first["next_check_in_s"] == 1800

    repeat = call_tool("rl_check_status", {"run_id": run_id})
    assert_shape("rl_check_status", repeat, alt=True)
    assert repeat["rate_limited"] is True and 1790 <= repeat["next_check_in_s"] <= 1800
    assert "no change" in repeat["message"] and "next check in" in repeat["message"]

    # The limit is on disk: another process sees it too.
    code = (
        f"import json; from hermes_rl.core.clients.toolset import call_tool; "
        f"print(json.dumps(call_tool('rl_check_status', {{'run_id': '{run_id}'}})))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=60
    )
    assert json.loads(other.stdout.strip().splitlines()[-1])["rate_limited"] is True

    # a typo is never rate-limited: every call gets the real answer
    for _ in range(3):
        typo = call_tool("rl_check_status", {"run_id": "deadbeef"})
        assert "deadbeef" in typo["error"] and "rate_limited" not in typo

    wait_status(run_id, ("failed",), timeout=40)
    failed = call_tool("rl_check_status", {"run_id": run_id})
    assert failed["rate_limited"] is False and failed["status"] == "failed"
    assert failed["report_reason"] == "state changed" and failed["previous_state"] == "running"
    assert "3" in (failed["reason"] or "")
    crashed = {p["name"]: p for p in failed["processes"]}["env"]
    assert crashed["exit_code"] == 3
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is False  # final: always full


@pytest.mark.timeout(90)
def test_a_starting_runs_new_problem_is_reported_at_once(hermes_home, run_cleanup):
    """An environment stuck in its setup: the agent asked once while it was quiet, and its warning, logged
    since, is not held back until the next check is due."""
    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    stuck = (
        "import time; time.sleep(3); print('2026-12-06 10:00:00,000 WARNING reasoning_gym: the base_conversion "
        "generator has not returned its items in 30 s', flush=True); time.sleep(3600)"
    )
    spec = ProcessSpec(
        name="env", argv=[sys.executable, "-c", stuck], readiness=Readiness("log", pattern="^ready", timeout_s=300)
    )
    run_id = launch_run([spec])
    run_cleanup.append(run_id)
    first = call_tool("rl_check_status", {"run_id": run_id})
    assert first["status"] == "starting" and first["rate_limited"] is False and not first["health"]["reason"]
    deadline = time.monotonic() + 40
    while True:
        checked = call_tool("rl_check_status", {"run_id": run_id})
        if not checked["rate_limited"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert checked["rate_limited"] is False and checked["report_reason"] == "state changed", checked
    assert checked["previous_state"] == "starting" and checked["status"] == "starting"
    assert (
        checked["reason"].startswith("starting, env not ready yet: logged 1 × ")
        and "base_conversion" in checked["reason"]
    )
    assert "hermes-rl logs" in checked["tips"][0]


@pytest.mark.timeout(60)
def test_interval_is_configurable_by_env_and_parameter(hermes_home, run_cleanup, monkeypatch):
    run_id = launch_run([sleeper_spec()])
    run_cleanup.append(run_id)
    wait_status(run_id, ("running",))
    monkeypatch.setenv("HERMES_RL_STATUS_INTERVAL_S", "0")
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is False
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is False
    monkeypatch.setenv("HERMES_RL_STATUS_INTERVAL_S", "1")
    call_tool("rl_check_status", {"run_id": run_id})
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is True
    time.sleep(1.1)
    assert call_tool("rl_check_status", {"run_id": run_id})["report_reason"] == "interval passed"
    limited = call_tool("rl_check_status", {"run_id": run_id, "min_interval_s": 300})
    assert limited["rate_limited"] is True and limited["next_check_in_s"] > 250
    assert "min_interval_s" in call_tool("rl_check_status", {"run_id": run_id, "min_interval_s": -1})["error"]
    monkeypatch.setenv("HERMES_RL_STATUS_INTERVAL_S", "soon")
    assert "HERMES_RL_STATUS_INTERVAL_S" in call_tool("rl_check_status", {"run_id": run_id})["error"]


@pytest.mark.timeout(60)
def test_a_stall_is_reported_at_once(hermes_home, run_cleanup, monkeypatch):
    run_id = launch_run([sleeper_spec()])
    run_cleanup.append(run_id)
    wait_status(run_id, ("running",))
    monkeypatch.setenv("HERMES_RL_STALL_S", "2")
    fresh = call_tool("rl_check_status", {"run_id": run_id})
    assert fresh["stalled"] is False
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is True
    time.sleep(2.5)  # no metric row arrives: the run is stalled
    stalled = call_tool("rl_check_status", {"run_id": run_id})
    assert stalled["rate_limited"] is False and stalled["stalled"] is True
    assert stalled["report_reason"] == "state changed" and stalled["stalled_for_s"] >= 2
    assert any("rl_stop_training" in tip for tip in stalled["tips"])
    assert call_tool("rl_check_status", {"run_id": run_id})["rate_limited"] is True  # still stalled: no change


@pytest.mark.timeout(90)
def test_stop_works_for_starting_and_lost_runs(hermes_home, run_cleanup):
    from hermes_rl.core import runs
    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    never_ready = ProcessSpec(
        name="trainer",
        argv=[sys.executable, "-c", "import time; time.sleep(600)"],
        readiness=Readiness(kind="log", pattern="never printed", timeout_s=300),
        stop_timeout=3,
    )
    starting = launch_run([never_ready])
    run_cleanup.append(starting)
    wait_status(starting, ("starting",))
    stopped = call_tool("rl_stop_training", {"run_id": starting})
    assert stopped["status"] == "stopped" and stopped["previous_status"] == "starting"

    lost = launch_run([sleeper_spec()])
    run_cleanup.append(lost)
    run = wait_status(lost, ("running",))
    trainer_pid = run["processes"][0]["pid"]
    lose_run(run)
    deadline = time.monotonic() + 20
    while runs.get_run(lost, sample=False)["status"] != "lost":
        assert time.monotonic() < deadline, "the run never showed as lost"
        time.sleep(0.1)
    status = call_tool("rl_check_status", {"run_id": lost})
    assert status["status"] == "lost" and "supervisor" in (status["reason"] or "")
    out = call_tool("rl_stop_training", {"run_id": lost})
    assert out["status"] == "stopped" and out["previous_status"] == "lost"
    deadline = time.monotonic() + 10
    while _alive(trainer_pid):
        assert time.monotonic() < deadline, "the lost run's trainer survived rl_stop_training"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_unknown_run_is_a_clear_error_for_every_run_tool(hermes_home):
    for tool in ("rl_check_status", "rl_stop_training", "rl_get_results"):
        out = call_tool(tool, {"run_id": "0badc0de"})
        assert "0badc0de" in out["error"], (tool, out)
    assert call_tool("rl_list_runs") == {"runs": [], "count": 0, "total": 0}


def test_wandb_url_only_when_online(hermes_home, run_cleanup):
    run_id = launch_run(
        [completing_spec(steps=1)],
        total_steps=1,
        wandb={"mode": "online", "project": "p", "run_name": "r", "url": "https://wandb.ai/u/p/runs/abc"},
    )
    run_cleanup.append(run_id)
    wait_status(run_id, ("completed",))
    assert call_tool("rl_check_status", {"run_id": run_id})["wandb_url"] == "https://wandb.ai/u/p/runs/abc"
    assert call_tool("rl_get_results", {"run_id": run_id})["wandb_url"] == "https://wandb.ai/u/p/runs/abc"


def test_tools_are_plain_functions_returning_json_dicts(hermes_home):
    # Called directly (not through call_tool) a bad argument is still a JSON error, not an exception.
    assert "invalid run id" in toolset.rl_check_status(123)["error"]
    assert "error" in toolset.rl_test_inference(num_steps=0)
    assert "error" in toolset.rl_select_environment(None)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_agent_drives_a_local_run_to_completion(hermes_home, run_cleanup):
    """The whole workflow through the tools only, on the real toy environment and local backend."""
    # A short run (a profile override, as a user would write one) keeps CI time reasonable.
    (hermes_home / "rl" / "profiles").mkdir(parents=True, exist_ok=True)
    (hermes_home / "rl" / "profiles" / "local.yaml").write_text("total_steps: 40\n")
    assert call_tool("rl_select_environment", {"name": "toy_addition"})["selected"] == "toy_addition"
    started = call_tool("rl_start_training")
    assert "error" not in started, started
    run_id = started["run_id"]
    run_cleanup.append(run_id)
    reports = []
    deadline = time.monotonic() + 1100
    while True:
        status = call_tool("rl_check_status", {"run_id": run_id, "min_interval_s": 30})
        if not status["rate_limited"]:
            reports.append(status)
        if status["status"] in ("completed", "failed", "stopped", "lost"):
            break
        assert time.monotonic() < deadline, f"run still {status['status']}: {reports[-1]}"
        time.sleep(3)
    final = reports[-1]
    assert final["status"] == "completed", final
    assert final["metrics"]["step"] == final["metrics"]["total_steps"]
    assert final["metrics"]["eval_percent_correct"] is not None
    assert [r["report_reason"] for r in reports][0] == "first check"
    assert "state changed" in [r["report_reason"] for r in reports]  # starting -> running -> completed
    results = call_tool("rl_get_results", {"run_id": run_id})
    assert results["status"] == "completed" and results["checkpoint"] and results["history"]
