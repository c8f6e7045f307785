"""Why a run is not learning: each cause of docs/audit.md's table, made by a run folder that records it
(metrics.jsonl, env_metrics.jsonl, rollouts.jsonl as the trainer and the environments write them),
audited as every client audits a run (core.daemons.run_audit.audit_run_dir)."""

from __future__ import annotations

import json
from pathlib import Path

from hermes_rl.core.base.audit_rule import audit
from hermes_rl.core.daemons.run_audit import audit_run_dir

GROUP = 8


def _row(step: int, reward: float, alike: int = 4, **signals) -> dict:
    base = {
        "step": step,
        "reward/mean": reward,
        "batch/groups": 4,
        "batch/sequences": 32,
        "advantages/std": 0.0 if alike == 4 else 0.3,
        "signals/groups_zero_variance": alike,
        "signals/batch_fill": 1.0,
        "signals/truncated_share": 0.0,
        "signals/completion_tokens_mean": 3.0,
        "signals/entropy": 0.8,
    }
    return {**base, **{f"signals/{k}": v for k, v in signals.items()}}


def _group(step: int, prompt: str, texts: list[str], rewards: list[float], expected=None) -> dict:
    record = {
        "step": step,
        "group": 0,
        "prompt": prompt,
        "completions": [
            {"text": t, "reward": r, "advantage": r - sum(rewards) / len(rewards), "tokens": 2, "finish": "stop"}
            for t, r in zip(texts, rewards)
        ],
    }
    if expected is not None:
        record["expected"] = expected
    return record


def _write(folder: Path, rows: list[dict], env: list[dict] = (), groups: list[dict] = ()) -> Path:  # type: ignore[assignment]
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("metrics.jsonl", rows), ("env_metrics.jsonl", env), ("rollouts.jsonl", groups)):
        if lines:
            (folder / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def _alike_run(folder: Path, reward: float, texts, *, expected=None, env=(), **signals) -> Path:
    """Twelve steps whose every group scored `reward` for all of its completions `texts`."""
    rows = [_row(i + 1, reward, **signals) for i in range(12)]
    groups = [
        _group(step, f"{a}+{b}=", list(texts), [reward] * GROUP, expected)
        for step in range(9, 13)
        for a, b in ((3, 4), (2, 5))
    ]
    return _write(folder, rows, list(env), groups)


def _reason(folder: Path) -> tuple[str, str]:
    result = audit_run_dir(folder)
    return result["verdict"], result["reasons"][0]


def test_identical_samples_at_a_low_temperature_say_raise_temperature(tmp_path):
    """temperature 0.01: the eight samples of a group are one answer, scored 0; the task is not too hard."""
    folder = _alike_run(tmp_path, 0.0, ["5"] * GROUP, expected="7", entropy=0.11)
    verdict, reason = _reason(folder)
    assert verdict == "no_signal"
    assert "the samples are identical: 100 % of the last 8 groups repeat one completion" in reason
    assert "'2+5=' → '5' scored 0.00, expected '7'" in reason
    assert "entropy 0.11 nats/token" in reason and "raise temperature" in reason
    assert "too hard" not in reason and "easier" not in reason
    # without rollouts, a collapsed entropy says the same
    (folder / "rollouts.jsonl").unlink()
    verdict, reason = _reason(folder)
    assert "the samples are identical: entropy 0.11 nats/token" in reason and "raise temperature" in reason


def test_samples_that_became_identical_while_training_are_a_collapse_not_a_low_temperature(tmp_path):
    """SmolLM2 at temperature 1.0 settled on '9 + 8 = 17' for the partial credit 0.25: entropy 0.74 → 0.02.
    Raising the temperature is no fix (it is 1.0); the learning rate and what the reward pays are."""
    rows = [_row(i + 1, 0.05, alike=2, entropy=0.74) for i in range(10)]
    rows += [_row(i + 11, 0.25, entropy=0.02) for i in range(12)]
    groups = [_group(step, "9+8=", ["9 + 8 = 17"] * GROUP, [0.25] * GROUP, "17") for step in range(15, 23)]
    verdict, reason = _reason(_write(tmp_path, rows, (), groups))
    assert verdict == "no_signal"
    assert reason.startswith("100 % of ") and "the policy collapsed onto one answer while training" in reason
    assert "entropy 0.02 nats/token, from 0.74 in the first steps" in reason
    assert "lower the learning_rate" in reason and "(it pays 0.25)" in reason
    assert "raise temperature" not in reason
    # right on some prompts, wrong on others, each answered one way: explore the wrong ones, not a lower rate
    mixed = [_group(step, "2+5=", ["7"] * GROUP, [1.0] * GROUP, "7") for step in range(15, 19)]
    mixed += [_group(step, "9+8=", ["16"] * GROUP, [0.0] * GROUP, "17") for step in range(19, 23)]
    verdict, reason = _reason(_write(tmp_path / "mixed", rows, (), mixed))
    assert verdict == "no_signal" and "the policy now answers each prompt one way" in reason
    assert "50 % of those repeat a right answer" in reason and "raise temperature or group_size" in reason
    assert "collapsed" not in reason and "learning_rate" not in reason


def test_every_answer_wrong_shows_one_completion_and_what_the_scorer_expected(tmp_path):
    texts = ["12", "9", "1", "6", "8", "10", "0", "3"]
    verdict, reason = _reason(_alike_run(tmp_path, 0.0, texts, expected="7"))
    assert verdict == "no_signal"
    assert "every answer is wrong (reward 0.00): e.g. '2+5=' → '12' scored 0.00" in reason
    assert "the scorer expected '7'" in reason
    assert "too hard" in reason and "easier task or a lower curriculum level" in reason
    assert "temperature" not in reason


def test_different_wrong_answers_paid_only_a_partial_credit_are_every_answer_wrong(tmp_path):
    """Format credit (0.1) for every well-formed wrong answer: the reward does depend on the completion."""
    texts = ["12", "9", "1", "6", "8", "10", "0", "3"]
    verdict, reason = _reason(_alike_run(tmp_path, 0.1, texts, expected="7"))
    assert verdict == "no_signal"
    assert "every answer is wrong (each only the partial reward 0.10)" in reason and "too hard" in reason
    assert "reward function" not in reason


def test_groups_alike_at_different_scores_are_not_a_partial_reward(tmp_path):
    """SmolLM2 with worked examples: some prompts answered right by all eight samples, others wrong by all eight.
    The mean (0.10 here) is no score any answer got: neither 'partial reward' nor 'every answer is wrong'."""
    rows = [_row(i + 1, 0.1) for i in range(12)]
    groups = [_group(9, f"2+{b}=", [str(2 + b)] * GROUP, [1.0] * GROUP, str(2 + b)) for b in (5, 3)]
    groups += [
        _group(9 + i % 4, f"{i}+6=", [str(i + 5 + j) for j in range(GROUP)], [0.0] * GROUP, str(i + 6))
        for i in range(3)
    ]
    verdict, reason = _reason(_write(tmp_path, rows, (), groups))
    assert verdict == "no_signal"
    assert "each group's answers score the same, but not the same across groups" in reason
    assert "raise group_size or temperature" in reason
    assert "partial reward" not in reason and "every answer is wrong" not in reason
    # when (nearly) every alike group is wrong, that is what it says
    groups += [_group(12, f"{i}+1=", [str(i + j) for j in range(GROUP)], [0.0] * GROUP, str(i + 1)) for i in range(6)]
    verdict, reason = _reason(_write(tmp_path / "most-wrong", rows, (), groups))
    assert "every answer is wrong (reward 0.00)" in reason


def test_answers_that_hold_the_expected_answer_but_score_0_miss_the_format(tmp_path):
    texts = ["The answer is 7.", "7 apples", "it is 7", "I think 7", "7!", "= 7", "so 7", "seven, 7"]
    verdict, reason = _reason(_alike_run(tmp_path, 0.0, texts, expected="7"))
    assert verdict == "no_signal"
    assert "every answer is scored wrong (reward 0.00) though 100 % of them hold the expected answer" in reason
    assert "miss the format the scorer reads" in reason and "too hard" not in reason


def test_every_answer_right_is_too_easy_and_points_to_a_harder_task(tmp_path):
    texts = ["7", "7", "7.", "7", "It is 7", "7", "7", "7"]
    env = [{"step": 10, "eval/percent_correct": 0.98}, {"step": 12, "eval/percent_correct": 1.0}]
    verdict, reason = _reason(_alike_run(tmp_path, 1.0, texts, expected="7", env=env))
    assert verdict == "no_signal"
    assert "every answer is right (reward 1.00, greedy eval 1.00): the task is too easy now" in reason
    assert "a harder task or the next curriculum level" in reason
    assert "easier" not in reason and "reward function" not in reason


def test_a_run_that_rose_until_every_answer_is_right_has_learned_its_task(tmp_path):
    """The groups stopped differing because the policy now answers them right: learning, and what is next
    (not no_signal, which tells a user the run could not learn). The same groups from the start are too easy."""
    rows = [_row(i + 1, 0.3, alike=1) for i in range(10)] + [_row(i + 11, 1.0) for i in range(20)]
    groups = [_group(step, "2+5=", ["7"] * 7 + ["7."], [1.0] * GROUP, "7") for step in range(23, 31)]
    env = [{"step": 0, "eval/percent_correct": 0.2}, {"step": 30, "eval/percent_correct": 1.0}]
    result = audit_run_dir(_write(tmp_path / "rose", rows, env, groups))
    assert result["verdict"] == "learning", result
    assert result["reasons"][0].startswith("over 30 steps reward 0.30 → 1.00") and "rose" in result["reasons"][0]
    learned = result["reasons"][1]
    assert "then 100 % of " in learned and "scored 1.00 alike: it has learned this task" in learned
    assert "a harder task or the next curriculum level" in learned
    # cut answers that scored alike are not a task learned, whatever the reward did
    cut = [{**row, "signals/truncated_share": 0.8} for row in rows]
    assert audit_run_dir(_write(tmp_path / "cut", cut, env, groups))["verdict"] == "no_signal"
    # reasoning-gym's products on SmolLM2: greedy eval 0.12 → 0.96, and every sample of a group says
    # '9 * 5 = 45', which the scorer pays 0.90 (words around the answer): a task learned, not a collapse
    worded = [_row(i + 1, 0.2, alike=1, entropy=1.35) for i in range(10)]
    worded += [_row(i + 11, 0.9, entropy=0.02) for i in range(20)]
    said = [_group(step, "9*5=", ["9 * 5 = 45"] * GROUP, [0.9] * GROUP, "45") for step in range(23, 31)]
    evals = [{"step": 0, "eval/percent_correct": 0.12}, {"step": 30, "eval/percent_correct": 0.96}]
    result = audit_run_dir(_write(tmp_path / "worded", worded, evals, said))
    assert result["verdict"] == "learning", result
    assert "scored 0.90 alike: it has learned this task" in result["reasons"][1]
    # the same partial pay while greedy eval stays low is the policy settling on what pays, not a task learned
    low = [{"step": 0, "eval/percent_correct": 0.12}, {"step": 30, "eval/percent_correct": 0.45}]
    verdict, reason = _reason(_write(tmp_path / "settled", worded, low, said))
    assert verdict == "no_signal" and "the policy collapsed onto one answer while training" in reason


def test_a_reward_that_ignores_the_completion_says_check_the_reward_function(tmp_path):
    """A reward function that always returns 1: different answers, most of them wrong, all scored 1."""
    texts = ["banana", "7", "12", "", "3", "the", "99", "1"]
    verdict, reason = _reason(_alike_run(tmp_path / "a", 1.0, texts, expected="7"))
    assert verdict == "no_signal"
    assert "the reward does not depend on the completion: 100 % of the alike groups hold different" in reason
    assert "scored 1.00" in reason and "'banana' and '7'" in reason
    assert "only 12 % of them hold the expected answer '7'" in reason
    assert "check the reward function" in reason and "too easy" not in reason
    # no expected answer recorded: greedy eval disagreeing with the reward tells it
    env = [{"step": 10, "eval/percent_correct": 0.05}]
    verdict, reason = _reason(_alike_run(tmp_path / "b", 1.0, texts, env=env))
    assert "the reward does not depend on the completion" in reason and "while greedy eval is 0.05" in reason
    # a constant reward between right and wrong
    verdict, reason = _reason(_alike_run(tmp_path / "c", 0.5, texts))
    assert "different completions that all scored 0.50" in reason and "check the reward function" in reason


def test_truncated_completions_say_raise_the_token_limit(tmp_path):
    verdict, reason = _reason(
        _alike_run(tmp_path / "a", 0.0, ["6", "8"] * 4, truncated_share=1.0, completion_tokens_mean=2.0)
    )
    assert verdict == "no_signal"
    assert "100 % of completions are cut at the token limit (2.0 tokens on average)" in reason
    assert "raise max_token_length" in reason
    rows = [_row(i + 1, 0.2 + 0.01 * i, alike=1, truncated_share=0.7) for i in range(12)]
    result = audit_run_dir(_write(tmp_path / "b", rows))
    assert result["verdict"] == "suspect"
    assert any("70 % of completions end at the token limit" in r and "max_token_length" in r for r in result["reasons"])


def test_a_reward_part_carrying_the_reward_while_eval_does_not_follow_is_suspect(tmp_path):
    rows = [_row(i + 1, 0.04 + 0.01 * i, alike=1) for i in range(22)]
    env = [{"step": i, "reward/wordy": 0.22, "reward/exact": 0.01} for i in range(20)]
    env += [{"step": 10, "eval/percent_correct": 0.04}, {"step": 20, "eval/percent_correct": 0.04}]
    result = audit_run_dir(_write(tmp_path, rows, env))
    assert result["verdict"] == "suspect"
    assert any(
        "reward part 'wordy' carries 96 % of the reward (wordy 0.22, exact 0.01) while greedy eval does not rise" in r
        for r in result["reasons"]
    )


def test_groups_the_environment_dropped_before_training_say_where_to_look():
    result = audit([], [], dropped={"same_scores": 12})
    assert result["verdict"] == "no_signal"
    assert "the environment dropped these groups before training" in result["reasons"][0]


def test_a_run_that_learns_from_few_groups_is_told_when_the_rest_repeat_one_completion(tmp_path):
    rows = [_row(i + 1, 0.1 + 0.03 * i, alike=3, entropy=0.15) for i in range(20)]
    groups = [_group(20, "3+4=", ["7"] * GROUP, [1.0] * GROUP)] * 3 + [_group(20, "2+5=", ["7", "6"] * 4, [1, 0] * 4)]
    result = audit_run_dir(_write(tmp_path, rows, groups=groups))
    assert result["verdict"] == "learning"
    assert any(
        r.startswith(
            "75 % of groups scored alike: only the rest teach anything; 75 % of the last 4 groups repeat one "
            "completion (entropy 0.15 nats/token): raise temperature"
        )
        for r in result["reasons"]
    )
