"""The project's environments: Atropos-compatible configs, scoring, offline data, env metrics."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "module, cls", [("hermes_rl.environments.toy_addition", "ToyAdditionEnv"), ("environments.gsm8k", "GSM8kEnv")]
)
def test_config_init_returns_a_list_of_server_configs(module, cls):
    import importlib

    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    env_cls = getattr(importlib.import_module(module), cls)
    config, servers = env_cls.config_init()
    # atroposlib ignores the YAML openai section and --openai.* unless this is a list
    assert isinstance(servers, list) and all(isinstance(s, APIServerConfig) for s in servers)
    assert servers[0].server_type == "sglang"  # the trainer's /generate gives token logprobs
    assert config.group_size >= 2 and config.batch_size % config.group_size == 0


def test_toy_defaults_use_the_local_tiny_model(hermes_home):
    from hermes_rl.environments.toy_addition import ToyAdditionEnv

    config, servers = ToyAdditionEnv.config_init()
    assert config.tokenizer_name == str(hermes_home / "rl" / "models" / "tiny-toy")
    assert config.ensure_scores_are_not_same is False  # all-equal groups still count towards reward/mean


@pytest.mark.parametrize("script", ["toy_addition.py", "gsm8k.py"])
def test_environment_cli_accepts_config_file_and_openai_flags(script):
    out = subprocess.run(
        [sys.executable, str(ROOT / "environments" / script), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--config" in out.stdout and "--openai.server_type" in out.stdout and "--env.group_size" in out.stdout


def test_gsm8k_falls_back_to_the_bundled_sample_offline_and_says_so(monkeypatch, caplog):
    from hermes_rl.environments import gsm8k

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING, logger="gsm8k"):
        train, test, source = gsm8k.load_problems()
    assert source.startswith("bundled sample")
    assert "hub is not reachable" in caplog.text and "gsm8k_sample.jsonl" in caplog.text
    assert len(train) + len(test) >= 40 and test
    assert all(item["gold_answer"].lstrip("-").isdigit() for item in train + test)


def test_bundled_sample_answers_are_consistent():
    """Every sample's final '#### N' matches the last computed value in its worked solution."""
    import re

    rows = [json.loads(line) for line in (ROOT / "environments/data/gsm8k_sample.jsonl").read_text().splitlines()]
    assert len(rows) >= 40
    for row in rows:
        final = row["answer"].split("####")[-1].strip()
        computed = re.findall(r"<<[^=]+=(-?\d+)>>", row["answer"])
        assert computed and computed[-1] == final, row


def test_gsm8k_scoring_with_math_verify():
    from hermes_rl.environments.gsm8k import score_answer

    assert score_answer("<think>8*2=16, 24+16</think> The answer is \\boxed{40}", "40") == 1.0
    assert score_answer("<think>\\boxed{40}</think> so \\boxed{41}", "40") == 0.0  # only text after </think> counts
    assert score_answer("forty", "40") == 0.0
    assert score_answer("\\boxed{1,234}", "1234") == 1.0


def test_toy_scoring_is_right_or_wrong_unless_near_misses_get_credit():
    from hermes_rl.environments import toy_task

    assert toy_task.score(" 7\n", 7) == 1.0
    assert toy_task.score(" 6\n", 7) == 0.0 and toy_task.score(" x\n", 7) == 0.0
    near, far = toy_task.score(" 6\n", 7, near_miss_credit=0.5), toy_task.score(" 2\n", 7, near_miss_credit=0.5)
    assert 0.0 < far < near < 0.5
    assert toy_task.score(" x\n", 7, near_miss_credit=0.5) == 0.0


def test_chat_replies_are_right_only_as_the_number_alone_and_wordy_ones_get_credit():
    from hermes_rl.environments import toy_task

    assert toy_task.score_reply("7", 7) == toy_task.score_reply(" 7.\n", 7) == 1.0
    assert toy_task.score_reply("3 + 4 = 7", 7, wordy_credit=0.25) == 0.25  # right, but not the format
    assert toy_task.score_reply("3 + 4 = 8", 7, wordy_credit=0.25) == 0.0
    assert toy_task.score_reply("7 is not it, 8", 7, wordy_credit=0.25) == 0.0  # the last number counts
    assert toy_task.score_reply("seven", 7, wordy_credit=0.25) == 0.0


def test_toy_addition_asks_an_instruct_model_in_its_chat_template():
    from types import SimpleNamespace

    from hermes_rl.environments.toy_addition import ToyAdditionEnv

    class Template:
        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    env = SimpleNamespace(config=SimpleNamespace(chat=True, wordy_credit=0.25, chat_examples=0), tokenizer=Template())
    assert ToyAdditionEnv.prompt(env, 3, 4) == "<user>What is 3 + 4? Answer with the number only.<assistant>"
    assert ToyAdditionEnv.score(env, "3 + 4 = 7", 7) == 0.25
    env.config.chat_examples = 2  # worked sums first, each answered with the number alone
    assert ToyAdditionEnv.prompt(env, 6, 2) == (
        "<user>What is 1 + 1? Answer with the number only.<assistant>2"
        "<user>What is 3 + 4? Answer with the number only.<assistant>7"
        "<user>What is 6 + 2? Answer with the number only.<assistant>"
    )
    env.config = SimpleNamespace(chat=False, max_operand=4, near_miss_credit=0.0)
    assert ToyAdditionEnv.prompt(env, 3, 4) == "Q: 3+4=\nA:" and ToyAdditionEnv.score(env, " 7\n", 7) == 1.0


def test_env_metrics_lines_are_read_by_core_metrics(tmp_path):
    from hermes_rl.core.base.fsutil import read_jsonl
    from hermes_rl.environments import env_metrics

    path = tmp_path / "env_metrics.jsonl"
    env_metrics.append(
        str(path), 3, {"train/percent_correct": 0.5, "nan": float("nan"), "none": None}, environment="toy"
    )
    env_metrics.append(str(path), 4, {"eval/percent_correct": 0.25})
    rows = read_jsonl(path)
    assert [r["step"] for r in rows] == [3, 4]
    assert rows[0]["train/percent_correct"] == 0.5 and "nan" not in rows[0] and "none" not in rows[0]
    assert env_metrics.append(None, 1, {"x": 1}) is None


def test_trainer_step_falls_back_when_the_trainer_cannot_be_asked():
    from hermes_rl.environments.env_metrics import trainer_step

    assert trainer_step("http://127.0.0.1:9/v1", 7, timeout=0.2) == 7
    assert trainer_step(None, 5) == 5
