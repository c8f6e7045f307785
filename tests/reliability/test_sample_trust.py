"""Sampling a checkpoint trusts no path a state file names, as resume does: the folder served is derived
from the checkpoint's tinker:// path inside the run's own folder. A checkpoints.jsonl whose local_path
points into another home or any folder holding an adapter, or a checkpoint folder reached through (or
holding) a symlink, is never served or copied."""

from __future__ import annotations

import json

import pytest
import yaml

from hermes_rl.core.base.errors import NotFound
from hermes_rl.core.base.fsutil import append_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.runs import sampling
from tests.fixtures_tui import write_run

pytestmark = [pytest.mark.reliability]

RUN = "5a5a5a5a"
STATE_PATH = "tinker://local-1a2b3c:train:0/weights/step-000002"
SAVED = "checkpoints/local-1a2b3c_train_0/weights/step-000002"


def _adapter_folder(path):
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    (path / "state.json").write_text(json.dumps({"rank": 8, "base_model": "m", "flags": {}}))
    return path


def _run(local_path: str | None = None, *, make_saved: bool = True) -> None:
    write_run(RUN, environment="toy_addition", status="stopped", steps=2)
    folder = run_dir(RUN)
    config = {"env": {"total_steps": 20}, "backend": {"kind": "local", "model_dir": "/models/m"}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    saved = _adapter_folder(folder / SAVED) if make_saved else folder / SAVED
    row = {"name": "step-000002", "step": 2, "state_path": STATE_PATH, "local_path": local_path or str(saved)}
    append_jsonl(folder / sampling.CHECKPOINTS_FILE, {**row, "backend": "local"})


def test_the_served_folder_is_the_runs_own(hermes_home):
    _run()
    (chosen,) = sampling.list_checkpoints(RUN)
    assert chosen["local_path"] == str(run_dir(RUN) / SAVED)


def test_a_local_path_into_another_folder_is_never_served(hermes_home, tmp_path):
    elsewhere = _adapter_folder(tmp_path / "another-home" / "adapter")
    _run(local_path=str(elsewhere), make_saved=False)
    (listed,) = sampling.list_checkpoints(RUN)
    assert listed["local_path"] is None
    with pytest.raises(NotFound):
        sampling.find_checkpoint(RUN, 2)


def test_a_local_path_that_disagrees_with_the_runs_folder_is_refused(hermes_home, tmp_path):
    elsewhere = _adapter_folder(tmp_path / "another-home" / "adapter")
    _run(local_path=str(elsewhere))  # the run's own folder exists too, but the row names another
    (listed,) = sampling.list_checkpoints(RUN)
    assert listed["local_path"] is None


def test_a_checkpoint_folder_reached_through_a_symlink_is_refused(hermes_home, tmp_path):
    target = _adapter_folder(tmp_path / "outside" / "step-000002")
    _run(make_saved=False)
    link = run_dir(RUN) / SAVED
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    (listed,) = sampling.list_checkpoints(RUN)
    assert listed["local_path"] is None


def test_a_symlink_inside_the_checkpoint_is_refused(hermes_home, tmp_path):
    _run()
    (tmp_path / "secret").write_text("not yours")
    (run_dir(RUN) / SAVED / "tokenizer.json").symlink_to(tmp_path / "secret")
    (listed,) = sampling.list_checkpoints(RUN)
    assert listed["local_path"] is None
