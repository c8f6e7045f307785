"""A worker that exits while the run needs it is a failure with its reason, never a silent `running`.

An environment worker's clean exit means "my share is done" (Atropos returns once run-api holds the data for
total_steps), so the supervisor let the run go on. A worker that exited 0 too soon — the verifiers bridge after
run-api answered 500, a loop that ends early — left the trainer waiting for a batch no one could send: the run
sat `running` until someone stopped it. Now a trainer that waits while every worker feeding it has ended gets
that worker restarted once (with its back-off), then the run fails with the worker's own last words, in
`status`, `runs` and the agent tools. A worker that ends while the trainer still has batches to train is its
share done, as before."""

from __future__ import annotations

import json
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import toolset
from hermes_rl.core.clients.cli import main
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
from tests.reliability.helpers import (
    FINAL,
    PY,
    assert_no_orphans,
    proc_record,
    standin_pipeline,
    wait_for,
    wait_running,
)

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60), pytest.mark.usefixtures("run_processes_cleanup")]

# The worker's own words as it leaves: what the run's reason must quote.
LAST_WORDS = "no items left in the task list; leaving"
ENDS_CLEANLY = f"import sys, time; print('env up', flush=True); time.sleep(0.3); print({LAST_WORDS!r}, flush=True)"


def _pipeline(wait_from_step: int) -> list[ProcessSpec]:
    """The stand-in pipeline, its trainer answering /health like the real one (waiting for a batch from
    `wait_from_step` on, 0: never) and its env a worker that feeds it and exits 0 soon after it is ready."""
    api, trainer, env = standin_pipeline()
    trainer.argv += ["--health-port", "{port:trainer}", "--wait-from-step", str(wait_from_step)]
    trainer.port = "trainer"
    trainer.status_url = "http://127.0.0.1:{port:trainer}/health"
    env.argv = [PY, "-c", ENDS_CLEANLY]
    env.readiness = Readiness("log", pattern=r"^env up", timeout_s=30)
    env.done_on_clean_exit = True
    env.feeds = "trainer"
    env.restart = RestartPolicy("on_failure", max_restarts=2, backoff_s=0.2)
    return [api, trainer, env]


def _cli(capsys, *args: str) -> str:
    capsys.readouterr()
    main(list(args))
    out = capsys.readouterr()
    return " ".join((out.out + out.err).split())  # a reason wraps at the console's width


def test_a_worker_that_exits_0_while_the_trainer_waits_is_restarted_once_then_fails_the_run(monkeypatch, capsys):
    monkeypatch.setenv("HERMES_RL_STARVED_S", "1")
    began = time.monotonic()
    starved = runs.launch(_pipeline(wait_from_step=3), environment="standin", profile="local", total_steps=100)
    # beside it, a run whose trainer never waits: its worker's exit is its share done, the run goes on
    fed = runs.launch(_pipeline(wait_from_step=0), environment="standin", profile="local", total_steps=100)
    wait_running(fed["run_id"])

    final = wait_for(lambda: (r := runs.get_run(starved["run_id"], sample=False))["status"] in FINAL and r, 30)
    elapsed = time.monotonic() - began
    assert final, f"still {runs.get_run(starved['run_id'], sample=False)['status']} after 30 s"
    assert final["status"] == "failed", final
    reason = final["reason"]
    assert "trainer can get no more input at step 3 of 100" in reason, reason
    assert "env exited with code 0" in reason and LAST_WORDS in reason and "(after 1 restart)" in reason, reason
    env = proc_record(final, "env")
    assert env["restarts"] == 1 and env["state"] == "exited", env  # restarted once, not up to its policy's 2
    events = [json.loads(line) for line in open(run_dir(starved["run_id"]) / "events.jsonl")]
    restarted = [e for e in events if e.get("process") == "env" and e.get("restart") == 1]
    assert restarted and "still waited for input at step 3" in restarted[0]["message"], restarted
    assert_no_orphans(final)

    # every view says it
    status = _cli(capsys, "status", starved["run_id"])
    assert "failed" in status and LAST_WORDS in status, status
    listing = _cli(capsys, "runs", "--all")
    assert starved["run_id"] in listing and "no more input" in listing, listing
    checked = toolset.rl_check_status(starved["run_id"], min_interval_s=0)
    assert checked["status"] == "failed" and LAST_WORDS in checked["reason"], checked

    # the run whose trainer had work: its worker ended long enough ago, the run still runs
    alive = runs.get_run(fed["run_id"], sample=False)
    assert proc_record(alive, "env")["state"] == "exited" and alive["status"] == "running", alive
    assert alive["processes"] and (alive["last_metric"].get("step") or 0) > 3
    runs.stop_run(fed["run_id"])
    assert_no_orphans(runs.get_run(fed["run_id"], sample=False))
    print(f"\nworker exit -> failed run with its reason: {elapsed:.1f} s", file=sys.__stderr__)


# The real pipeline: an environment of our own (the toy task's) whose loop ends once it has registered, as a
# worker does that believes its work is done; the real trainer says it waits for its first batch.
LEAVES_EARLY = f'''
"""Toy addition whose loop ends soon after it registered, as if it had nothing left to send."""

import asyncio

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class LeavesEarlyEnv(ToyAdditionEnv):
    name = "leaves_early_env"

    async def env_manager(self):
        await self.setup()
        await self.register_env()
        await asyncio.sleep(1)  # long enough for the supervisor to see it registered: it was ready
        print({LAST_WORDS!r}, flush=True)


if __name__ == "__main__":
    LeavesEarlyEnv.cli()
'''


@pytest.mark.timeout(180)
def test_the_real_trainer_waiting_on_an_environment_that_left_fails_the_run_with_its_words(
    tiny_model_dir, run_cleanup, monkeypatch
):
    from hermes_rl.core.base.paths import user_environments_dir
    from tests.fixtures_model import use_tiny_model

    monkeypatch.setenv("HERMES_RL_STARVED_S", "1")
    use_tiny_model(tiny_model_dir, total_steps=50)
    folder = user_environments_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "leaves_early_env.py").write_text(LEAVES_EARLY.lstrip())
    began = time.monotonic()
    run_id = runs.start_run("leaves_early_env", "local", None)["run_id"]
    run_cleanup.append(run_id)
    final = wait_for(lambda: (r := runs.get_run(run_id, sample=False))["status"] in FINAL and r, 150, max_interval=1)
    elapsed = time.monotonic() - began
    assert final and final["status"] == "failed", runs.get_run(run_id, sample=False)
    reason = final["reason"]
    assert reason.startswith("trainer can get no more input at step 0 of 50"), reason
    assert "env exited with code 0" in reason and LAST_WORDS in reason and "(after 1 restart)" in reason, reason
    assert proc_record(final, "env")["restarts"] == 1
    assert_no_orphans(final)
    print(f"\nreal run: launch -> failed with the worker's words {elapsed:.1f} s", file=sys.__stderr__)
