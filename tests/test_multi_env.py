"""Several environments in one run, and replicas: the mix settings, the per-environment views of
metrics and rollouts (KEY@ENVIRONMENT keys, rollouts by environment through env_ids.jsonl), and a real
local run of two different environments whose status shows each one's workers and metrics."""

from __future__ import annotations

import json
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.paths import rl_dir, run_dir
from hermes_rl.core.readers.metrics import RunMetrics
from hermes_rl.core.readers.rollouts import RunRollouts, read_rollouts
from hermes_rl.core.runs import report
from hermes_rl.core.runs.workers import parse_mix, resolve_workers
from tests.fixtures_core import wait_until
from tests.fixtures_model import use_tiny_model

SECOND_ENV = '''"""The addition task under another name: the second environment of a run of two."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class ToyDoublesEnv(ToyAdditionEnv):
    name = "toy_doubles"


if __name__ == "__main__":
    ToyDoublesEnv.cli()
'''


def _write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_mix_settings_are_checked_and_the_cli_form_reads_as_written():
    assert parse_mix("gsm8k:0.5:0.2:3") == {
        "environment": "gsm8k",
        "weight": 0.5,
        "min_batch_allocation": 0.2,
        "replicas": 3,
    }
    assert parse_mix("gsm8k") == {"environment": "gsm8k"}
    with pytest.raises(BadInput, match="weight and share are numbers"):
        parse_mix("gsm8k:a")
    with pytest.raises(BadInput, match="ENV"):
        parse_mix(":1")
    with pytest.raises(BadInput, match="add up to 1.2"):
        resolve_workers(
            {"min_batch_allocation": 0.6, "environments": [{"environment": "g", "min_batch_allocation": 0.6}]}
        )
    with pytest.raises(BadInput, match=r"environments\[0\].weight"):
        resolve_workers({"environments": [{"environment": "g", "weight": 0}]})
    with pytest.raises(BadInput, match="unknown setting"):
        resolve_workers({"environments": [{"environment": "g", "share": 1}]})


def test_metrics_of_two_environments_get_their_own_keys_and_one_environment_stays_as_it_was(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    trainer = [{"step": 1, "time": 1.0, "train/loss": 0.5}, {"step": 2, "time": 2.0, "train/loss": 0.4}]
    for folder in (one, two):
        _write(folder / "metrics.jsonl", trainer)
    _write(one / "env_metrics.jsonl", [{"step": 1, "environment": "a", "eval/percent_correct": 0.5}])
    _write(
        two / "env_metrics.jsonl",
        [
            {"step": 1, "environment": "a", "eval/percent_correct": 0.5},
            {"step": 1, "environment": "b", "eval/percent_correct": 0.25},
            {"step": 2, "environment": "b", "eval/percent_correct": 0.75},
        ],
    )
    single = RunMetrics(one)
    single.poll()
    assert not [k for k in single.keys() if "@" in k]
    mixed = RunMetrics(two)
    mixed.poll()
    assert mixed.series("eval/percent_correct@a") == [(1, 0.5)]
    assert mixed.series("eval/percent_correct@b") == [(1, 0.25), (2, 0.75)]
    assert mixed.series("train/loss") == [(1, 0.5), (2, 0.4)]


def test_rollouts_are_told_apart_by_the_environment_that_registered_their_env_id(hermes_home):
    run_id = "abcd0001"
    folder = run_dir(run_id)
    group = {"prompt": "Q", "completions": [{"text": " 1", "reward": 1.0, "advantage": 0.5}]}
    _write(
        folder / "rollouts.jsonl",
        [
            {"step": 3, "group": 0, "env_id": 0, **group},
            {"step": 3, "group": 1, "env_id": 1, **group},
            {"step": 3, "group": 2, "env_id": 1, **group},
        ],
    )
    _write(
        folder / "env_ids.jsonl",
        [
            {"env_id": 0, "process": "env", "environment": "toy_addition"},
            {"env_id": 1, "process": "env-toy_doubles", "environment": "toy_doubles"},
        ],
    )
    assert read_rollouts(run_id, environment="toy_doubles")["groups"] == 2
    picked = read_rollouts(run_id, environment="toy_addition")
    assert picked["groups"] == 1 and picked["completions"][0]["environment"] == "toy_addition"
    with pytest.raises(NotFound, match="toy_addition, toy_doubles"):
        read_rollouts(run_id, environment="gsm8k")
    live = RunRollouts(folder)
    live.poll()
    assert [g["environment"] for g in live.groups(3)] == ["toy_addition", "toy_doubles", "toy_doubles"]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_run_of_two_environments_trains_both_and_shows_each_ones_metrics(tiny_model_dir, run_processes_cleanup):
    # Room to spare: the test stops the run once both environments reported; with 40 steps a loaded machine
    # finished the run before the second environment, started last, logged its first metrics.
    use_tiny_model(tiny_model_dir, total_steps=400)
    (rl_dir() / "environments").mkdir(parents=True, exist_ok=True)
    (rl_dir() / "environments" / "toy_doubles.py").write_text(SECOND_ENV)
    run = runs.start_run(
        "toy_addition",
        "local",
        {"steps_per_eval": 2},
        workers={"environments": [{"environment": "toy_doubles", "min_batch_allocation": 0.25}]},
    )
    run_id = run["run_id"]
    try:
        assert [e["processes"] for e in run["workers"]["environments"]] == [["env"], ["env-toy_doubles"]]
        config = (run_dir(run_id) / "config-toy_doubles.yaml").read_text()
        assert "min_batch_allocation: 0.25" in config and "wandb_name: toy_doubles" in config

        def both_reported():
            status = report.status_report(run_id)
            if status["status"] not in ("starting", "running"):
                raise AssertionError(f"run ended: {status['reason']}")
            envs = status["environments"]
            return status if all("train/percent_correct" in e["metrics"] for e in envs) else None

        status = wait_until(both_reported, 300, interval=1.0, what="train metrics from both environments")
        assert [e["environment"] for e in status["environments"]] == ["toy_addition", "toy_doubles"]
        assert all(e["ready"] == 1 for e in status["environments"])
        wait_until(lambda: (run_dir(run_id) / "rollouts.jsonl").exists(), 60, what="rollouts")
        deadline = time.monotonic() + 120
        seen: set = set()
        while time.monotonic() < deadline and len(seen) < 2:
            for name in ("toy_addition", "toy_doubles"):
                try:
                    read_rollouts(run_id, environment=name)
                    seen.add(name)
                except NotFound:
                    pass
            time.sleep(1.0)
        assert seen == {"toy_addition", "toy_doubles"}, "each environment's groups are in the rollouts"
    finally:
        final = runs.stop_run(run_id, wait=60)
    assert final["status"] == "stopped", final.get("reason")
