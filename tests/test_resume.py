"""Resuming runs: a real local run stopped mid-way and continued by a new run from its saved state."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput, Conflict, NotFound
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import run_dir
from tests.fixtures_model import use_tiny_model
from tests.test_e2e_local import _log_tails, no_survivors, wait_final

TOTAL_STEPS = 16  # room to stop mid-way: a step takes well under a second here


def _wait_step(run_id: str, step: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = runs.get_run(run_id, sample=False)
        assert run["status"] in ("starting", "running"), (run.get("reason"), _log_tails(run))
        if ((run.get("last_metric") or {}).get("step") or 0) >= step:
            return
        time.sleep(0.1)
    runs.stop_run(run_id, wait=20)
    raise AssertionError(f"run {run_id} did not reach step {step} in {timeout} s")


@pytest.mark.timeout(600)
def test_stopped_run_resumes_from_its_saved_state_and_finishes_the_same_step_count(tiny_model_dir):
    from hermes_rl.core.clients.toolset import call_tool

    use_tiny_model(tiny_model_dir, total_steps=TOTAL_STEPS)

    parent = runs.start_run("toy_addition", "local", {"save_checkpoint_interval": 3, "use_wandb": False})["run_id"]
    _wait_step(parent, 3, 300)
    stopped = runs.stop_run(parent, wait=30)
    assert stopped["status"] == "stopped", stopped.get("reason")
    parent_rows = read_jsonl(run_dir(parent) / "metrics.jsonl")
    saved = json.loads((run_dir(parent) / "trainer_state.json").read_text())
    # The stop saved the state of every finished step (not just the last interval's).
    assert saved["step"] == parent_rows[-1]["step"] >= 3
    # the stop's own save, or the interval's when the stop came right after it saved that same last step
    last = f"/weights/step-{saved['step']:06d}"
    assert saved["state_path"].startswith("tinker://") and (
        "/weights/stop-" in saved["state_path"] or last in saved["state_path"]
    )
    assert not (run_dir(parent) / "results.json").exists()

    # A loss chosen in config.yaml is the trainer's: the resumed run keeps its parent's config.
    config_path = run_dir(parent) / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["tinker"] |= {"loss_fn": "ppo", "loss_fn_config": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    started = call_tool("rl_start_training", {"resume_run_id": parent})
    assert started["parent_run_id"] == parent and started["total_steps"] == TOTAL_STEPS, started
    child = started["run_id"]
    with pytest.raises(Conflict, match="only an ended run can be resumed"):
        runs.resume_run(child)
    final = wait_final(child, 400)
    assert final["status"] == "completed", (final.get("reason"), _log_tails(final))
    record = json.loads((run_dir(child) / "run.json").read_text())
    assert record["parent_run_id"] == parent
    assert record["resumed_from"] == {"step": saved["step"], "state_path": saved["state_path"]}

    child_rows = read_jsonl(run_dir(child) / "metrics.jsonl")
    # Same final step count as an uninterrupted run; the curve goes on at the next step.
    assert [r["step"] for r in child_rows] == list(range(saved["step"] + 1, TOTAL_STEPS + 1))
    assert json.loads((run_dir(child) / "results.json").read_text())["steps"] == TOTAL_STEPS
    # Adam continued too: the optimizer's step count picks up where the parent's stopped.
    parent_adam = [r["tinker/optim/step"] for r in parent_rows if r.get("tinker/optim/step") is not None]
    child_adam = [r["tinker/optim/step"] for r in child_rows if r.get("tinker/optim/step") is not None]
    assert child_adam and child_adam[0] == parent_adam[-1] + 1, (parent_adam, child_adam)
    trainer_log = Path(next(p["log"] for p in final["processes"] if p["name"] == "trainer")).read_text()
    assert f"resuming from {saved['state_path']} at step {saved['step']}" in trainer_log
    assert "loss ppo {'clip_low_threshold': 0.9, 'clip_high_threshold': 1.1}" in trainer_log
    assert all(r["tinker/loss:sum"] is not None for r in child_rows if r["train/loss"] is not None)
    assert no_survivors(runs.get_run(child, sample=False))

    with pytest.raises(Conflict, match="completed all its steps"):
        runs.resume_run(child)
    # The same parent resumed again: a second branch from the same step, and it says so.
    again = runs.resume_run(parent)
    try:
        assert any(f"already resumed as {child}" in n and "branch 2" in n for n in again["notices"]), again["notices"]
    finally:
        runs.stop_run(again["run_id"], wait=30)
    print(
        f"\nresume figures: parent {parent} stopped at step {parent_rows[-1]['step']} (saved {saved['step']}), "
        f"child {child} ran steps {child_rows[0]['step']}..{child_rows[-1]['step']}, "
        f"Adam steps {parent_adam[-1]} -> {child_adam[0]}, "
        f"reward parent last {parent_rows[-1]['reward/mean']} child first {child_rows[0]['reward/mean']}"
    )


def test_resume_refuses_unknown_and_unsaved_runs_with_the_reason():
    import sys

    from hermes_rl.core.clients.toolset import call_tool
    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    with pytest.raises(NotFound):
        runs.resume_run("0badc0de")
    spec = ProcessSpec(
        name="trainer",
        argv=[sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        readiness=Readiness("log", pattern="^ready"),
    )
    run_id = runs.launch([spec], environment="toy_addition", profile="local", total_steps=3)["run_id"]
    with pytest.raises(Conflict, match="only an ended run can be resumed"):
        runs.resume_run(run_id)
    assert runs.stop_run(run_id, wait=20)["status"] == "stopped"
    with pytest.raises(BadInput, match="saved no training state"):
        runs.resume_run(run_id)
    refused = call_tool("rl_start_training", {"resume_run_id": run_id})
    assert "saved no training state" in refused["error"] and "save_checkpoint_interval" in refused["hint"]
    assert call_tool("rl_start_training", {"resume_run_id": "not-a-run"})["error"]


def test_resumed_config_keeps_the_training_values_and_takes_the_new_runs_folder_and_ports(hermes_home):
    from hermes_rl.core.runs.start import _resumed_config

    parent = {
        "env": {"total_steps": 40, "batch_size": 16, "rollout_server_url": "http://127.0.0.1:1001"},
        "openai": [{"base_url": "http://127.0.0.1:1002/v1", "model_name": "Qwen/Qwen3-8B"}],
        "tinker": {"learning_rate": 4e-5, "loss_fn": "cispo", "checkpoint_dir": "/old/checkpoints"},
        "backend": {"kind": "tinker", "base_url": None},
        "hermes": {"run_id": "0deecd03", "run_dir": "/old", "resume": {"step": 1}},
    }
    resume = {"parent_run_id": "0deecd03", "state_path": "tinker://abc:train:0/weights/stop-000007", "step": 7}
    out = _resumed_config(parent, "94132aa1", {"api": 2001, "inference": 2002, "tinker": 2003}, resume)
    folder = str(run_dir("94132aa1"))
    assert (out["env"]["total_steps"], out["env"]["batch_size"], out["tinker"]["loss_fn"]) == (40, 16, "cispo")
    assert out["env"]["rollout_server_url"] == "http://127.0.0.1:2001"
    assert out["openai"][0]["base_url"] == "http://127.0.0.1:2002/v1"
    assert out["backend"]["base_url"] is None  # Tinker cloud: the tinker:// state path is used as is
    assert out["tinker"]["checkpoint_dir"] == folder + "/checkpoints"
    assert (out["hermes"]["run_id"], out["hermes"]["run_dir"], out["hermes"]["resume"]) == ("94132aa1", folder, resume)
    assert parent["hermes"]["run_id"] == "0deecd03"  # the parent's config is not touched
