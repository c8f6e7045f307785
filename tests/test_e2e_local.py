"""End to end: a short real local run through the supervisor — run-api, the local Tinker server,
the trainer (tinker SDK), the toy environment — and a run whose trainer fails."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.base.states import STEP_PHASES
from hermes_rl.core.envs.profiles import PROFILE_VALUES
from hermes_rl.core.readers import rollouts
from hermes_rl.core.readers.metrics_digest import DIGEST_FILE
from tests.fixtures_model import use_tiny_model

DESIGN_KEYS = (
    "step",
    "time",
    "train/loss",
    "train/learning_rate",
    "reward/mean",
    "logprobs/mean",
    "logprobs/mean_training",
    "logprobs/diff",
    "advantages/mean",
    "advantages/std",
    "time/step_s",
    *STEP_PHASES,
)
FINAL = ("completed", "failed", "stopped", "lost")


def wait_final(run_id: str, timeout: float) -> dict:
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            run = runs.get_run(run_id, sample=False)
            if run["status"] in FINAL:
                return run
            time.sleep(0.5)
    except BaseException:
        runs.stop_run(run_id, wait=20)
        raise
    runs.stop_run(run_id, wait=20)
    raise AssertionError(f"run {run_id} did not finish in {timeout} s: {runs.get_run(run_id, sample=False)}")


def no_survivors(run: dict) -> bool:
    import psutil

    for proc in run.get("processes") or []:
        pid = proc.get("pid")
        if pid and psutil.pid_exists(pid):
            try:
                if (
                    abs(psutil.Process(pid).create_time() - (proc.get("create_time") or 0)) < 1
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                ):
                    return False
            except psutil.NoSuchProcess:
                pass
    return True


@pytest.mark.timeout(420)
def test_short_local_run_completes_with_metrics_env_metrics_and_checkpoint(tiny_model_dir):
    use_tiny_model(tiny_model_dir, total_steps=12)

    run = runs.start_run("toy_addition", "local", {"save_checkpoint_interval": 5, "steps_per_eval": 4})
    run_id = run["run_id"]
    final = wait_final(run_id, 360)  # stops the run if it does not finish in time
    folder = run_dir(run_id)
    assert final["status"] == "completed", (final.get("reason"), _log_tails(final))
    # run-api, the Tinker server, trainer and environment started as forks of the run's warm server
    warm = {p["name"]: p.get("warm", p.get("why_cold")) for p in final["processes"]}
    assert warm == {"api": True, "model": None, "tinker": True, "trainer": True, "env": True}, warm

    rows = read_jsonl(folder / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    # the trainer kept the metrics digest: a first look at the run reads no row it has already digested
    digest = json.loads((folder / DIGEST_FILE).read_text())
    assert digest["metrics.jsonl"]["rows"] == 12
    assert digest["metrics.jsonl"]["offset"] == (folder / "metrics.jsonl").stat().st_size
    for row in rows:
        assert all(key in row for key in DESIGN_KEYS), row
        assert row["train/learning_rate"] == pytest.approx(
            PROFILE_VALUES["local"]["editable_defaults"]["learning_rate"]
        )
        assert 0.0 <= row["reward/mean"] <= 1.0
        # every step's phases are recorded, and they make up the step's wall time
        assert row["time/step_s"] == pytest.approx(sum(row[key] for key in STEP_PHASES))
        assert min(row[key] for key in STEP_PHASES) >= 0.0
        # a batch whose groups all had zero advantage is dropped whole: nothing to forward or backward
        assert (row["time/forward_backward_s"] > 0.0) == (row["batch/sequences"] > 0), row
    assert any(r["time/forward_backward_s"] > 0.0 for r in rows)
    assert any(r["train/loss"] is not None for r in rows)
    assert any(r["time/checkpoint_s"] > 0 for r in rows)  # the steps after the interval saves carry them

    env_rows = read_jsonl(folder / "env_metrics.jsonl")
    assert any("train/percent_correct" in r for r in env_rows), env_rows
    assert any("eval/percent_correct" in r for r in env_rows), env_rows
    # env rows carry the trainer step they saw (run-api's step once the trainer is gone)
    assert all(isinstance(r["step"], int) and 0 <= r["step"] <= 12 + 2 for r in env_rows)

    results = json.loads((folder / "results.json").read_text())
    assert results["steps"] == 12
    assert results["tinker_path"].startswith("tinker://")
    assert Path(results["final_checkpoint"]).exists(), results
    assert Path(results["final_checkpoint"]).resolve().is_relative_to(folder.resolve())
    # the interval checkpoints (steps 5 and 10) and the final one
    assert len([p for p in (folder / "checkpoints").rglob("*") if "step-" in p.name]) >= 2

    # what the policy generated: every group of every step, decoded, with the trainer's advantages
    recorded = rollouts.read_rollouts(run_id, step=12)
    assert recorded["first_step"] == 1 and recorded["last_step"] == 12
    assert recorded["groups"] == 2  # batch_size 16 / group_size 8: nothing sampled away on a short run
    assert len(recorded["completions"]) == 16
    for item in recorded["completions"]:
        assert "+" in item["prompt"] and 0.0 <= item["reward"] <= 1.0 and item["tokens"] >= 1
        assert item["finish"] in ("stop", "length")
    by_group = {}
    for item in recorded["completions"]:
        by_group.setdefault(item["group"], []).append(item)
    for items in by_group.values():
        mean = sum(i["reward"] for i in items) / len(items)
        assert all(i["advantage"] == pytest.approx(i["reward"] - mean) for i in items)

    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert "TINKER_API_KEY" not in json.dumps(config)
    assert no_survivors(runs.get_run(run_id, sample=False))


@pytest.mark.timeout(900)
def test_the_default_local_run_learns(tiny_model_dir):
    """What README's main command shows a new user: the default local run, nothing overridden, takes
    greedy eval accuracy from <= 0.4 to >= 0.9 and raises reward/mean by >= 0.3 (first 20 steps vs
    last 20), then completes with a checkpoint; results and the runs listing report the eval figures.
    (How fast is bench/bench_training.py's job.)"""
    from hermes_rl.core.runs import report

    use_tiny_model(tiny_model_dir)  # the profile's own total_steps
    run = runs.start_run(None, "local")
    run_id = run["run_id"]
    assert run["environment"] == "toy_addition"
    final = wait_final(run_id, 840)
    folder = run_dir(run_id)
    assert final["status"] == "completed", (final.get("reason"), _log_tails(final))

    rows = read_jsonl(folder / "metrics.jsonl")
    assert len(rows) == PROFILE_VALUES["local"]["editable_defaults"]["total_steps"]
    rewards = [r["reward/mean"] for r in rows]
    first20, last20 = sum(rewards[:20]) / 20, sum(rewards[-20:]) / 20
    assert last20 >= first20 + 0.3, (first20, last20)
    evals = [
        (r["step"], r["eval/percent_correct"])
        for r in read_jsonl(folder / "env_metrics.jsonl")
        if "eval/percent_correct" in r
    ]
    assert evals[0] == (0, pytest.approx(evals[0][1])) and evals[0][1] <= 0.4, evals[:3]  # before any training
    assert evals[-1][1] >= 0.9, evals[-5:]
    assert Path(json.loads((folder / "results.json").read_text())["final_checkpoint"]).exists()

    summary = report.results_summary(run_id)
    accuracy = summary["eval_accuracy"]
    assert accuracy["first"] == evals[0][1] and accuracy["last"] == evals[-1][1]
    # the audit says so, from signals the run recorded
    audit, signals = summary["audit"], summary["audit"]["signals"]
    assert audit["verdict"] == "learning", audit
    assert audit["reasons"][0].startswith(f"over {len(rows)} steps reward "), audit["reasons"]
    assert signals["reward_last"] >= signals["reward_first"] + 0.05
    assert 0.0 <= signals["zero_variance_share"] <= 1.0
    assert signals["truncated_share"] is not None and signals["entropy"] > 0
    assert signals["staleness"] is not None and signals["staleness"] >= 0
    assert set(signals["reward_components"]) == {"exact"}
    assert accuracy["best"] == max(v for _, v in evals) and accuracy["best_step"] in [s for s, _ in evals]
    listed = next(r for r in runs.list_runs() if r["run_id"] == run_id)
    assert (listed["eval_first"], listed["eval_last"]) == (evals[0][1], evals[-1][1])


@pytest.mark.timeout(180)
def test_trainer_failure_fails_the_run(tmp_path):
    """A config the trainer rejects: the run ends `failed`, the reason names the trainer, the log says why."""
    from hermes_rl.core.envs.discovery import find_environment
    from hermes_rl.core.envs.profiles import get_profile
    from hermes_rl.core.runs.training import training_pipeline

    profile = get_profile("tinker")  # api + trainer (+ env): no model build needed to reach the trainer
    specs = training_pipeline("0badc0de", profile, find_environment("toy_addition"))
    config = {
        "env": {"group_size": 4, "batch_size": 8, "total_steps": 3, "rollout_server_url": "http://127.0.0.1:9"},
        "openai": [{"base_url": "http://127.0.0.1:9/v1", "model_name": "m"}],
        "tinker": {"base_model": "m", "lora_rank": 4, "learning_rate": "fast"},
        "backend": {"kind": "tinker"},
    }
    run = runs.launch(specs, environment="toy_addition", profile="tinker", total_steps=3, config=config)
    final = wait_final(run["run_id"], 150)
    assert final["status"] == "failed"
    assert "trainer" in (final.get("reason") or ""), final.get("reason")
    trainer = next(p for p in final["processes"] if p["name"] == "trainer")
    assert trainer["exit_code"] == 2
    log = Path(trainer["log"]).read_text()
    assert "config rejected" in log and "tinker.learning_rate must be a number" in log
    assert not (run_dir(run["run_id"]) / "results.json").exists()
    assert no_survivors(runs.get_run(run["run_id"], sample=False))


def _log_tails(run: dict) -> str:
    out = []
    for proc in run.get("processes") or []:
        path = proc.get("log")
        if path and os.path.exists(path):
            out.append(
                f"--- {proc['name']} ---\n" + "\n".join(Path(path).read_text(errors="replace").splitlines()[-25:])
            )
    return "\n".join(out)
