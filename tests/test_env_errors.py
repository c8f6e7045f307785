"""A failing environment's error located and counted: the environment worker (dataplane/env_launch.py)
logs where the error was raised, its traceback once and its repeats as counts, through atroposlib's own
BaseEnv.handle_env; the supervisor's log watch counts those lines and the run's reason names the file
and line, with a tip that promises only what the log holds."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
import textwrap

from hermes_rl.core.base.failures import problem_tip
from hermes_rl.core.daemons.log_watch import LogProblems
from hermes_rl.dataplane import env_launch

BROKEN = """
def score(text):
    return len(text) / 0


class Broken:
    async def collect_trajectories(self, item):
        return score(item), []
"""


def test_an_environment_error_is_logged_once_with_its_place_and_then_counted(tmp_path, monkeypatch, caplog):
    from atroposlib.envs.base import BaseEnv

    (tmp_path / "broken_env.py").write_text(textwrap.dedent(BROKEN).lstrip())
    spec = importlib.util.spec_from_file_location("broken_env", tmp_path / "broken_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "broken_env", module)

    class Env(module.Broken, BaseEnv):
        async def get_next_item(self):
            return None

        async def evaluate(self, *args, **kwargs):
            return None

    monkeypatch.setattr(BaseEnv, "handle_env", BaseEnv.handle_env)  # put back after the test
    counter = env_launch.ErrorCounter()
    env_launch.locate_environment_errors(counter)
    env = object.__new__(Env)  # what handle_env reads, without servers or a config
    env.running_items, env.backlog = {}, []
    env.task_duration, env.task_successful, env.failed_task_duration = [], [], []

    async def items(n: int) -> None:
        for i in range(n):
            env.running_items[f"u{i}"] = {"item": "2+2="}
            assert await env.handle_env(f"u{i}") is None

    with caplog.at_level(logging.ERROR):
        asyncio.run(items(5))  # within a second: the first logged, the rest counted
        for known in counter.seen.values():
            known[1] -= env_launch.REPEAT_FIRST_S  # a second later
        asyncio.run(items(1))
    assert env.task_successful == [0] * 6  # each item failed, as atroposlib counts it
    lines = [r for r in caplog.records if r.name == "root"]
    assert [r.getMessage() for r in lines] == [
        "Error in collect_trajectories at broken_env.py:2 in score: ZeroDivisionError: division by zero",
        "Error in collect_trajectories (×5 since the last line) at broken_env.py:2 in score: ZeroDivisionError: "
        "division by zero",
    ]
    assert lines[0].exc_info is not None and lines[1].exc_info is None  # one traceback
    assert not [r for r in caplog.records if "Error in collect_trajectories:" in r.getMessage()]  # atroposlib's


def test_the_log_watch_counts_a_repeat_line_as_its_count_and_the_tip_promises_what_exists(tmp_path):
    log = tmp_path / "env.log"
    first = "Error in collect_trajectories at broken_env.py:2 in score: ZeroDivisionError: division by zero"
    log.write_text(
        f"2026-01-01 10:00:00,000 ERROR root: {first}\n"
        "Traceback (most recent call last):\n"
        '  File "/x/broken_env.py", line 2, in score\n'
        "ZeroDivisionError: division by zero\n"
        + "".join(
            f"2026-01-01 10:00:{10 * i:02d},000 ERROR root: Error in collect_trajectories (×1000 since the last "
            "line) at broken_env.py:2 in score: ZeroDivisionError: division by zero\n"
            for i in range(1, 4)
        )
    )
    watch = LogProblems(log)
    watch.update(0.0)
    record = watch.to_json()
    top = record["problems"][0]
    assert top["message"] == f"root: {first}" and top["count"] == 3001
    assert record["errors"] == 3002  # and the traceback's last line, once
    tip = problem_tip(top["message"], process="env", run_id="abcd1234")
    assert "at the file and line the message names" in tip and "first such error's traceback" in tip
    assert "hermes-rl logs abcd1234 --process env" in tip
    bare = problem_tip("Error in collect_trajectories: division by zero", process="env", run_id="abcd1234")
    assert "holds the message only, without a file or line" in bare and "traceback" not in bare
