"""Resume trusts nothing it reads from the ended run: a step that is negative or a boolean, a saved
state reached through a symlink, holding a symlink, or not the checkpoint trainer_state.json names
(another run's) are refused with the reason before the new run exists; a $HERMES_HOME that moved since
the state was saved is handled (the state is found from its tinker:// path, inside the run folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir, runs_dir
from hermes_rl.core.clients import toolset
from tests.fixtures_tui import write_run

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]

PARENT, OTHER = "0ade0ade", "0be00be0"
STATE_PATH = "tinker://local-1a2b3c:train:0/weights/step-000002"
SAVED = "checkpoints/local-1a2b3c_train_0/weights/step-000002"  # the local server's layout of STATE_PATH


def _ended_run(run_id: str, step: object = 2, local_path: str | None = None) -> None:
    write_run(run_id, environment="toy_addition", status="stopped", steps=2)
    folder = run_dir(run_id)
    config = {"env": {"total_steps": 20, "group_size": 4}, "tinker": {"lora_rank": 8}, "backend": {"kind": "local"}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    saved = folder / SAVED
    saved.mkdir(parents=True)
    (saved / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    (saved / "state.json").write_text(json.dumps({"rank": 8, "base_model": "m", "flags": {}}))
    state = {"state_path": STATE_PATH, "step": step, "local_path": local_path or str(saved), "backend": "local"}
    (folder / "trainer_state.json").write_text(json.dumps(state))


def _refused(reason: str) -> None:
    before = sorted(os.listdir(runs_dir()))
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "resume", PARENT]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert out.returncode == 1 and reason in out.stderr, out.stderr
    answer = toolset.rl_start_training(resume_run_id=PARENT)
    assert reason in answer.get("error", ""), answer
    assert sorted(os.listdir(runs_dir())) == before, "a refused resume leaves no run folder behind"


@pytest.mark.parametrize("step", [-1, True, False, 2.0, "2"])
def test_a_step_that_is_no_step_count_is_refused(hermes_home, step):
    _ended_run(PARENT, step=step)
    _refused("not a step count")


def test_a_saved_state_reached_through_a_symlink_is_refused(hermes_home):
    _ended_run(OTHER)
    _ended_run(PARENT)
    weights = run_dir(PARENT) / SAVED
    for path in sorted(weights.rglob("*"), reverse=True):
        path.unlink()
    weights.rmdir()
    weights.symlink_to(run_dir(OTHER) / SAVED)  # another run's checkpoint, by a link
    _refused("is a symlink")


def test_a_symlink_inside_the_saved_state_is_refused(hermes_home, tmp_path):
    _ended_run(PARENT)
    secret = tmp_path / "not-yours"
    secret.write_text("private")
    (run_dir(PARENT) / SAVED / "optimizer.pt").symlink_to(secret)
    _refused("a symlink")


def test_a_state_whose_local_path_names_another_runs_checkpoint_is_refused(hermes_home):
    _ended_run(OTHER)
    _ended_run(PARENT, local_path=str(run_dir(OTHER) / SAVED))
    _refused("not the checkpoint its local_path names")


def test_a_moved_home_still_resumes_from_the_run_folder(hermes_home, tmp_path):
    _ended_run(PARENT, local_path=str(tmp_path / "old-home" / "rl" / "runs" / PARENT / SAVED))
    child = runs.resume_run(PARENT)
    try:
        copied = run_dir(child["run_id"]) / SAVED
        assert (copied / "adapter_model.safetensors").read_bytes() == b"\0" * 64
        assert runs.get_run(child["run_id"], sample=False)["parent_run_id"] == PARENT
    finally:
        if runs.get_run(child["run_id"], sample=False)["status"] not in ("stopped", "failed", "completed"):
            runs.stop_run(child["run_id"], force=True)
