"""A run says what its environment is doing: real local runs of environments that fail in the ways
users meet (every item raises, every group scores the same, prompts longer than the model's context)
show a reason and a tip in `status --json`, rl_check_status and the dashboard soon after the run is
ready. Each test prints its launch→reason time (docs/benchmarks.md records them)."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import user_environments_dir
from tests.fixtures_model import use_tiny_model

# Our own fixtures, subclasses of the project's toy environment that break one thing each.
RAISING = '''
"""Toy addition whose every item raises, as an environment built for an API that moved on."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class RaisingEnv(ToyAdditionEnv):
    name = "raising_env"

    async def collect_trajectories(self, item):
        raise RuntimeError("Environment version v3 for ToyTaxi is deprecated; use v4")


if __name__ == "__main__":
    RaisingEnv.cli()
'''

SAME_SCORES = '''
"""Toy addition whose reward gives every completion the same score."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class SameScoresEnv(ToyAdditionEnv):
    name = "same_scores_env"

    async def collect_trajectories(self, item):
        group, backlog = await super().collect_trajectories(item)
        if group is not None:
            group["scores"] = [0.0] * len(group["scores"])
        return group, backlog


if __name__ == "__main__":
    SameScoresEnv.cli()
'''

SILENT_DROP = '''
"""Toy addition whose scoring drops every group without a word, as environments do whose score() returns
None when a group's answers all score the same (regex_generation, reasoning_gym on a weak model)."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class SilentDropEnv(ToyAdditionEnv):
    name = "silent_drop_env"

    async def collect_trajectories(self, item):
        _, backlog = await super().collect_trajectories(item)
        return None, backlog


if __name__ == "__main__":
    SilentDropEnv.cli()
'''

LONG_PROMPTS = '''
"""Toy addition with a preamble far longer than the tiny model's context."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv

PREAMBLE = "Q: 1+1=\\nA: 2\\n" * 600


class LongPromptEnv(ToyAdditionEnv):
    name = "long_prompt_env"

    async def get_next_item(self):
        item = await super().get_next_item()
        return {"prompt": PREAMBLE + item["prompt"], "answer": item["answer"]}


if __name__ == "__main__":
    LongPromptEnv.cli()
'''

READY_TO_REASON_S = 60.0


def _report(text: str) -> None:
    """A figure for docs/benchmarks.md, past pytest's capture (capsys reads the CLI's output here)."""
    print(text, file=sys.__stderr__, flush=True)


def _write_env(name: str, source: str) -> None:
    folder = user_environments_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source).lstrip())


def _wait_for_reason(run_id: str, launched: float, timeout: float = 420.0) -> tuple[dict, float, float]:
    """(the status report with a health reason, launch→reason s, ready→reason s)."""
    from hermes_rl.core.runs import report

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = report.status_report(run_id)
        assert status["status"] in ("starting", "running"), (status["status"], status["reason"])
        if status["health"].get("reason"):
            now = time.time()
            ready = runs.get_run(run_id, sample=False)["started_at"]
            return status, now - launched, now - ready
        time.sleep(1.0)
    raise AssertionError(f"no health reason within {timeout} s: {report.status_report(run_id)['health']}")


def _cli_status(run_id: str, capsys) -> dict:
    from hermes_rl.core.clients.cli import main

    capsys.readouterr()
    assert main(["status", run_id, "--json"]) in (0, None)
    return json.loads(capsys.readouterr().out)


def _dashboard_shows(run_id: str, words: str) -> tuple[str, str]:
    """The dashboard's header line and its runs pane's health line for the run, once both show `words`."""
    from hermes_rl.tui.app import HermesDashboard
    from tests.fixtures_tui import wait_for

    async def scenario() -> tuple[str, str]:
        app = HermesDashboard(run_id=run_id)
        async with app.run_test(size=(200, 48)) as pilot:
            line = app.query_one("#runs-health")

            def shown() -> bool:
                header = app.header._shown.plain if app.header._shown else ""
                return words in header and words in str(line.render())

            await wait_for(pilot, shown, timeout=30, what=f"{words!r} in the header and the runs pane")
            return app.header._shown.plain, str(line.render())

    return asyncio.run(scenario())


def _start_fixture(tiny_model_dir, run_cleanup, name: str, source: str, **overrides) -> tuple[str, float]:
    """A 50-step local run of one of the fixture environments above: (run id, launch time)."""
    use_tiny_model(tiny_model_dir, total_steps=50)
    _write_env(name, source)
    run_id, launched = _start(name, **overrides)
    run_cleanup.append(run_id)
    return run_id, launched


def _reason_soon_after_ready(run_id: str, launched: float, label: str) -> dict:
    """The first status report with a health reason, which must come within READY_TO_REASON_S of the run
    being ready; its times are printed for docs/benchmarks.md."""
    status, to_reason, after_ready = _wait_for_reason(run_id, launched)
    _report(f"\n{label}: launch→reason {to_reason:.0f} s, ready→reason {after_ready:.0f} s")
    assert after_ready <= READY_TO_REASON_S
    return status


def _start(env: str, **overrides) -> tuple[str, float]:
    launched = time.time()
    run = runs.start_run(env, "local", overrides or None)
    return run["run_id"], launched


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_environment_raising_on_every_item_is_named_with_its_message(tiny_model_dir, run_cleanup, capsys):
    from hermes_rl.core.clients import toolset

    run_id, launched = _start_fixture(tiny_model_dir, run_cleanup, "raising_env", RAISING)
    first = toolset.rl_check_status(run_id)  # the first full report: the next one would be rate-limited
    assert first["rate_limited"] is False
    status = _reason_soon_after_ready(run_id, launched, "raising env")
    health = status["health"]
    assert health["state"] == "failing" and health["process"] == "env"
    # located where the worker runs the environment: the file, the line, the exception's type (env_launch.py)
    assert (
        "Error in collect_trajectories at raising_env.py:10: RuntimeError: Environment version v3 for ToyTaxi"
        in health["reason"]
    )
    assert "at the file and line the message names" in health["tip"]
    assert health["reason"].startswith("running, env fails on ") and " logged " in health["reason"]
    assert f"hermes-rl logs {run_id} --process env" in health["tip"]

    cli = _cli_status(run_id, capsys)
    assert cli["reason"].startswith("running, ") and "ToyTaxi is deprecated" in cli["reason"]
    assert cli["tips"][0] == cli["health"]["tip"]
    checked = toolset.rl_check_status(run_id)  # a change of health is never rate-limited
    assert checked["rate_limited"] is False and checked["report_reason"] == "state changed"
    assert "ToyTaxi is deprecated" in checked["reason"] and checked["tips"][0] == checked["health"]["tip"]

    header, pane = _dashboard_shows(run_id, "ToyTaxi is deprecated")
    assert run_id in header
    assert "tip: the environment raises" in pane


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_groups_that_all_score_the_same_are_explained(tiny_model_dir, run_cleanup, capsys):
    from hermes_rl.core.clients import toolset

    run_id, launched = _start_fixture(
        tiny_model_dir, run_cleanup, "same_scores_env", SAME_SCORES, ensure_scores_are_not_same=True
    )
    status = _reason_soon_after_ready(run_id, launched, "same scores")
    health = status["health"]
    assert health["state"] == "no_progress", health
    assert health["reason"].startswith("running, no trained step in ")
    assert "env logged" in health["reason"] and "Scores are the same in a group" in health["reason"]
    assert "ensure_scores_are_not_same=false" in health["tip"]
    assert health["no_step_for_s"] >= health["threshold_s"] >= 20  # both rounded to 0.1 s: 20.03 shows as 20.0
    assert "Scores are the same" in _cli_status(run_id, capsys)["reason"]
    assert "Scores are the same" in toolset.rl_check_status(run_id)["reason"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_environment_dropping_every_group_silently_is_explained(tiny_model_dir, run_cleanup, capsys):
    from hermes_rl.core.clients import toolset

    run_id, launched = _start_fixture(tiny_model_dir, run_cleanup, "silent_drop_env", SILENT_DROP)
    status = _reason_soon_after_ready(run_id, launched, "silent drop")
    health = status["health"]
    assert health["state"] == "no_progress", health
    assert "the environment got " in health["reason"] and "sent run-api no scored group" in health["reason"]
    served = int(health["reason"].split("the environment got ", 1)[1].split(" ", 1)[0].replace(",", ""))
    assert served >= 16  # two groups' worth of completions (group_size 8) went out before it says so
    assert "hermes-rl test-inference --env silent_drop_env" in health["tip"]
    assert "sent run-api no scored group" in _cli_status(run_id, capsys)["reason"]
    assert "sent run-api no scored group" in toolset.rl_check_status(run_id)["reason"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prompts_longer_than_the_context_name_both_lengths(tiny_model_dir, run_cleanup, capsys):
    from hermes_rl.core.clients import toolset

    run_id, launched = _start_fixture(tiny_model_dir, run_cleanup, "long_prompt_env", LONG_PROMPTS)
    status = _reason_soon_after_ready(run_id, launched, "long prompts")
    health = status["health"]
    assert "the model's context is 2048" in health["reason"], health
    assert "do not fit the model's context of 2048 tokens" in health["tip"]
    assert "prompts of " in health["tip"]
    assert "2048" in _cli_status(run_id, capsys)["health"]["tip"]
    assert "2048" in toolset.rl_check_status(run_id)["tips"][0]


def test_the_tinker_sdks_long_poll_is_not_a_problem_but_its_failures_are():
    from hermes_rl.core.base.failures import logged_problem

    prefix = "2026-12-03 15:37:32,055 WARNING tinker.lib.api_future_impl: Retrying request self.request_id='req-4'"
    poll = f"{prefix} because of try_again"
    assert logged_problem(poll) is None  # a request still running: the SDK asks again
    failed = (
        "2026-12-03 15:37:32,055 WARNING tinker.lib.api_future_impl: Retrying request self.request_id='req-4' after 500"
    )
    level, message = logged_problem(failed)
    assert level == "warning" and message.endswith("after 500")


@pytest.mark.parametrize(
    "trainer_status, words",
    [
        ({"status": "ok", "requests": 4, "completions": 32, "in_flight": 1}, "sent run-api no scored group"),
        ({"status": "ok", "requests": 16, "completions": 1, "in_flight": 15}, "still answering 15 request(s)"),
        ({"status": "ok", "requests": 0, "completions": 0, "in_flight": 0}, "no process logged a problem"),
    ],
)
def test_no_step_reason_says_whether_the_environment_drops_its_groups_or_waits_on_the_policy(
    tmp_path, trainer_status, words
):
    """From what the supervisor recorded of the trainer's /health: two groups' worth of completions served
    and nothing delivered is dropped work; requests still in flight are a slow policy, not a silent one."""
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.runs.flow import flow_verdict

    now = time.time()
    atomic_write_json(
        tmp_path / "health.json",
        {
            "time": now,
            "processes": {name: {"errors": 0, "warnings": 0, "problems": []} for name in ("api", "trainer", "env")},
            "status": {"api": {"current_step": 0, "queue_size": 0}, "trainer": trainer_status},
        },
    )
    run = {"status": "running", "run_dir": str(tmp_path), "started_at": now - 300, "created_at": now - 400}
    verdict = flow_verdict(run, None, startup_s=10.0, now=now)
    assert verdict["state"] == "no_progress" and words in verdict["reason"], verdict
    assert verdict["api"] == {"current_step": 0, "queue_size": 0}


@pytest.mark.fast
@pytest.mark.parametrize(
    "trainer_status, load, cause",
    [
        # 8-token completions on an overloaded machine: the load is the cause, never "long completions"
        ({"completions": 64, "completion_tokens": 512, "sample_s": 40.0, "in_flight": 8}, 6.0, "overloaded"),
        ({"completions": 64, "completion_tokens": 512, "sample_s": 40.0, "in_flight": 8}, 0.5, "completions are short"),
        ({"completions": 8, "completion_tokens": 4000, "sample_s": 100.0, "in_flight": 8}, 0.5, "long completions"),
        ({"completions": 0, "in_flight": 8}, 0.5, "no completion has finished yet"),
    ],
)
def test_a_slow_policy_tip_names_the_cause_it_measured(trainer_status, load, cause):
    """The tip for a policy still answering says what was measured (mean completion length, tokens/s, the
    load on the cores) and names the cause those figures show."""
    from hermes_rl.core.runs.flow import slow_policy_tip

    tip = slow_policy_tip({"trainer": {"status": "ok", **trainer_status}}, "3fa2c91b", load=load, cores=2)
    assert cause in tip, tip
    assert f"load {load:.1f} on 2 core(s)" in tip
    if trainer_status.get("completion_tokens"):
        mean = trainer_status["completion_tokens"] / trainer_status["completions"]
        assert f"completions average {mean:.0f} tokens" in tip
        assert f"{trainer_status['completion_tokens'] / trainer_status['sample_s']:.0f} tokens/s" in tip
    if cause != "long completions":
        assert "long completions" not in tip


@pytest.mark.fast
def test_a_starting_run_names_the_problem_of_the_process_it_waits_on(tmp_path):
    """An environment stuck in its setup (a task generator that never finishes) logs a warning long before
    its readiness timeout: the starting run's reason says it, and a problem of a ready process does not."""
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.runs.flow import flow_verdict

    stuck = "reasoning_gym: reasoning-gym's base_conversion generator has not returned its items in 30 s"
    record = {
        "time": time.time(),
        "processes": {
            "trainer": {
                "errors": 1,
                "warnings": 0,
                "problems": [{"message": "ready, then a hiccup", "level": "error", "count": 1}],
            },
            "env": {"errors": 0, "warnings": 1, "problems": [{"message": stuck, "level": "warning", "count": 1}]},
        },
    }
    atomic_write_json(tmp_path / "health.json", record)
    procs = [{"name": "trainer", "state": "ready"}, {"name": "env", "state": "starting"}]
    run = {"status": "starting", "run_id": "abcd1234", "run_dir": str(tmp_path), "processes": procs}
    verdict = flow_verdict(run, None)
    assert verdict["state"] is None and verdict["process"] == "env"
    assert stuck in verdict["reason"]
    assert verdict["reason"].startswith("starting, env not ready yet: logged 1 × ")
    assert "hermes-rl logs abcd1234 --process env" in verdict["tip"]
    assert set(verdict["problems"]) == {"trainer", "env"}

    procs[1]["state"] = "ready"  # every process ready: nothing to say before the run's flow begins
    assert flow_verdict(run, None)["reason"] is None
