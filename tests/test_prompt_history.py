"""The same prompt across training: `hermes-rl rollouts RUN --prompt TEXT` pages through every step's group
of one prompt (core/readers/prompt_history.py), with bounded memory on a run of 100,000 groups."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.readers.prompt_history import prompt_history


def _group(step: int, group: int, prompt: str, rewards: list[float]) -> dict:
    mean = sum(rewards) / len(rewards)
    return {
        "step": step,
        "time": 0.0,
        "group": group,
        "prompt": prompt,
        "completions": [
            {"text": f" {i}\n", "reward": r, "advantage": r - mean, "tokens": 2, "finish": "stop"}
            for i, r in enumerate(rewards)
        ],
        "sampled": False,
    }


def _write(run_id: str, groups: list[dict]) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "rollouts.jsonl", "w", encoding="utf-8") as handle:
        for g in groups:
            handle.write(json.dumps(g, ensure_ascii=False) + "\n")


def test_one_prompts_groups_come_step_by_step_with_rewards_and_advantages(hermes_home):
    groups = []
    for step in range(1, 7):
        groups.append(_group(step, 0, 'Q: 3+4=\nA: "é"', [1.0, 0.0] if step % 2 else [0.0, 0.0]))
        groups.append(_group(step, 1, "Q: 1+1=\nA:", [1.0, 1.0]))
    _write("abcd0001", groups)
    out = prompt_history("abcd0001", '3+4=\nA: "é"', limit=2)
    assert out["matches"] == 6 and out["steps"] == 6 and out["next_offset"] == 2
    assert [g["step"] for g in out["groups"]] == [1, 2]
    assert out["rows"][0] == {
        "step": 1,
        "group": 0,
        "prompt": 'Q: 3+4=\nA: "é"',
        "completion": " 0\n",
        "reward": 1.0,
        "advantage": 0.5,
        "tokens": 2,
        "finish": "stop",
    }
    assert [g["step"] for g in prompt_history("abcd0001", "3+4=", offset=4, limit=2)["groups"]] == [5, 6]
    alike = prompt_history("abcd0001", "3+4=", zero_variance=True)
    assert [g["step"] for g in alike["groups"]] == [2, 4, 6] and all(g["zero_variance"] for g in alike["groups"])
    assert prompt_history("abcd0001", "9+9=")["matches"] == 0
    with pytest.raises(BadInput):
        prompt_history("abcd0001", "  ")


def test_paging_a_prompt_through_100000_groups_keeps_memory_bounded(hermes_home):
    groups = [_group(i // 8 + 1, i % 8, f"Q: {i % 25}+1=\nA:", [1.0, 0.0, 0.5, 0.0]) for i in range(100_000)]
    _write("abcd0002", groups)
    del groups
    tracemalloc.start()
    out = prompt_history("abcd0002", "Q: 7+1=", limit=20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out["matches"] == 4000 and len(out["groups"]) == 20 and len(out["rows"]) == 80
    assert peak < 2 << 20, peak  # a page, not the 4,000 matches nor the file's 30 MB
