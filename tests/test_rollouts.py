"""Rollout recording (the trainer's writer thread) and reading (core.readers.rollouts): what is kept,
the bound, and what the CLI and the agent reports get. The recorder decodes with the real tiny
tokenizer; the end-to-end run in test_e2e_local.py checks a real trainer writes the file."""

from __future__ import annotations

import functools
import json
import shutil
import threading

import pytest

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import cli, toolset
from hermes_rl.core.readers import rollouts
from hermes_rl.dataplane.trainer.rollouts import RolloutRecorder, select_groups
from hermes_rl.dataplane.trainer.tokenizer import load_tokenizer
from tests.fixtures_tui import REAL_ROLLOUTS, write_run

RUN = "abcdef01"


def make_group(tokenizer, prompt: str, answers: list[str], scores: list[float]) -> dict:
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    tokens, masks = [], []
    for answer in answers:
        ids = tokenizer.encode(answer, add_special_tokens=False)
        tokens.append(prompt_ids + ids)
        masks.append([-100] * len(prompt_ids) + ids)
    return {"tokens": tokens, "masks": masks, "scores": scores}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def folder():
    path = run_dir(RUN)
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_recorder_writes_decoded_groups_with_advantages_and_finish(tokenizer):
    path = folder() / rollouts.ROLLOUTS_FILE
    finished = {}
    recorder = RolloutRecorder(path, tokenizer, finish_reason=lambda ids: finished.get(tuple(ids)))
    group = make_group(tokenizer, "Q: 2+3=\nA:", [" 5\n", " 7\n", " 5"], [1.0, 0.5, 0.0])
    group["group_overrides"] = {"expected": 5}  # what the environment's scorer expected (the audit shows it)
    completion_ids = [t for t, m in zip(group["tokens"][0], group["masks"][0]) if m != -100]
    finished[tuple(completion_ids)] = "stop"
    recorder.record(1, [group])
    recorder.close()

    (line,) = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert line["step"] == 1 and line["group"] == 0 and line["sampled"] is False
    assert line["prompt"] == "Q: 2+3=\nA:" and line["expected"] == "5"
    texts = [c["text"] for c in line["completions"]]
    assert texts == [" 5\n", " 7\n", " 5"]
    assert [c["reward"] for c in line["completions"]] == [1.0, 0.5, 0.0]
    assert [c["advantage"] for c in line["completions"]] == pytest.approx([0.5, 0.0, -0.5])
    assert line["completions"][0]["finish"] == "stop"
    assert line["completions"][0]["tokens"] == len(completion_ids)
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_multi_turn_episode_is_recorded_whole_with_the_environments_turns(tokenizer):
    """The environment's replies sit between the policy's turns, masked out of training: the recorded
    text still holds them (a reader follows the episode), the prompt is only what it started from, and
    the token count is what was trained."""
    path = folder() / "multi.jsonl"
    enc = functools.partial(tokenizer.encode, add_special_tokens=False)
    prompt, turns, replies = enc("Guess 0..3:"), [enc(" 1"), enc(" 2")], [enc(" No. Try higher.")]
    tokens = prompt + turns[0] + replies[0] + turns[1]
    masks = [-100] * len(prompt) + turns[0] + [-100] * len(replies[0]) + turns[1]
    recorder = RolloutRecorder(path, tokenizer)
    recorder.record(
        1, [{"tokens": [tokens, prompt + turns[0]], "masks": [masks, masks[: len(prompt) + 1]], "scores": [1.0, 0.0]}]
    )
    recorder.close()
    (line,) = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert line["prompt"] == "Guess 0..3:"
    whole, single = line["completions"]
    assert "Try higher" in whole["text"] and whole["text"].index(" 1") < whole["text"].index(" 2")
    assert whole["tokens"] == len(turns[0]) + len(turns[1])
    assert single["text"] == " 1" and "Try" not in single["text"]


def test_past_the_full_bound_each_step_keeps_a_fixed_sample_plus_its_best_and_worst(tokenizer):
    groups = [
        make_group(tokenizer, f"Q: {i}+1=\nA:", [" 1", " 2"], [0.05 * i + 0.1, 0.05 * i + 0.15]) for i in range(10)
    ]
    groups[6]["scores"] = [1.0, 0.9]  # the step's best completion
    groups[3]["scores"] = [0.0, 0.02]  # and its worst
    keep = select_groups(7, groups, 2)
    assert 6 in keep and 3 in keep and len(keep) <= 4
    assert select_groups(7, groups, 2) == keep  # deterministic per step

    path = folder() / rollouts.ROLLOUTS_FILE
    recorder = RolloutRecorder(path, tokenizer, full_bytes=0)  # every step is past the full bound
    recorder.record(7, groups)
    recorder.close()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert [line["group"] for line in lines] == keep
    assert all(line["sampled"] for line in lines)


def test_at_the_hard_bound_recording_stops_with_a_marker(tokenizer):
    path = folder() / rollouts.ROLLOUTS_FILE
    group = make_group(tokenizer, "Q: 1+1=\nA:", [" 2", " 3"], [1.0, 0.0])
    probe = RolloutRecorder(folder() / "probe.jsonl", tokenizer)
    probe.record(1, [group])
    probe.close()
    one_line = (folder() / "probe.jsonl").stat().st_size
    recorder = RolloutRecorder(path, tokenizer, max_bytes=one_line * 3)
    for step in range(1, 8):
        recorder.record(step, [group])
    recorder.close()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert lines[-1]["capped"] is True
    assert path.stat().st_size <= one_line * 3 + 200
    reader = rollouts.RunRollouts(folder())
    reader.poll()
    assert reader.capped_at == lines[-1]["step"] and reader.latest_step() < 7


def test_a_busy_writer_skips_batches_instead_of_blocking_the_step(tokenizer):
    gate = threading.Event()

    class SlowTokenizer:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=False):
            gate.wait(10)
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    path = folder() / rollouts.ROLLOUTS_FILE
    recorder = RolloutRecorder(path, SlowTokenizer(), queue_size=2)
    group = make_group(tokenizer, "Q: 1+1=\nA:", [" 2"], [1.0])
    for step in range(1, 11):
        recorder.record(step, [group])  # returns at once although the writer is stuck
    assert recorder.skipped_batches >= 7
    gate.set()
    recorder.close()
    written = [json.loads(raw)["step"] for raw in path.read_text().splitlines()]
    assert written == sorted(written) and len(written) == 10 - recorder.skipped_batches


def write_rollouts(lines: list[dict]) -> None:
    path = folder() / rollouts.ROLLOUTS_FILE
    with open(path, "a", encoding="utf-8") as handle:
        for line in lines:
            handle.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def group_line(step, group, rewards, text="x"):
    mean = sum(rewards) / len(rewards)
    return {
        "step": step,
        "time": 1.0,
        "group": group,
        "prompt": f"Q{step}.{group}",
        "completions": [
            {"text": f"{text}{i}", "reward": r, "advantage": r - mean, "tokens": 2, "finish": "stop"}
            for i, r in enumerate(rewards)
        ],
    }


def test_read_rollouts_latest_step_best_first_with_limit_and_a_bad_line_skipped():
    write_rollouts([group_line(1, 0, [0.0, 1.0]), "{not json", group_line(2, 0, [0.2, 0.9]), group_line(2, 1, [0.0])])
    out = rollouts.read_rollouts(RUN, order="best", limit=2)
    assert out["step"] == 2 and out["first_step"] == 1 and out["last_step"] == 2 and out["groups"] == 2
    assert [c["reward"] for c in out["completions"]] == [0.9, 0.2]
    worst = rollouts.read_rollouts(RUN, step=1, order="worst")
    assert [c["reward"] for c in worst["completions"]] == [0.0, 1.0]
    with pytest.raises(NotFound, match="step 5"):
        rollouts.read_rollouts(RUN, step=5)
    with pytest.raises(BadInput):
        rollouts.read_rollouts(RUN, order="middle")


def test_a_run_without_rollouts_is_a_clear_not_found():
    folder()
    with pytest.raises(NotFound, match="no rollouts"):
        rollouts.read_rollouts(RUN)
    assert rollouts.sample_completions(RUN) is None


def test_sample_completions_gives_the_latest_steps_best_and_worst_cut_short():
    write_rollouts([group_line(3, 0, [0.0, 0.0, 1.0], text="y" * 500), group_line(3, 1, [0.5, 0.0])])
    sample = rollouts.sample_completions(RUN, per_side=2, chars=40)
    assert sample["step"] == 3 and sample["completions"] == 5 and sample["zero_reward"] == 3
    assert [c["reward"] for c in sample["best"]] == [1.0, 0.5]
    assert [c["reward"] for c in sample["worst"]] == [0.0, 0.0]
    assert all(len(c["text"]) <= 41 for c in sample["best"] + sample["worst"])


def test_live_reader_follows_appends_and_keeps_the_newest_groups():
    reader = rollouts.RunRollouts(folder(), max_groups=3)
    assert reader.poll() == 0
    write_rollouts([group_line(1, 0, [1.0]), group_line(1, 1, [0.0])])
    assert reader.poll() == 2 and reader.steps() == [1]
    write_rollouts([group_line(2, 0, [1.0]), group_line(3, 0, [0.5])])
    assert reader.poll() == 2
    assert reader.steps() == [3, 2]  # step 1 went to keep at most 3 groups
    assert reader.groups(3)[0]["completions"][0]["reward"] == 0.5


def test_live_reader_summarises_steps_as_they_arrive_and_reads_old_steps_back_by_offset():
    reader = rollouts.RunRollouts(folder(), parsed_groups=2)
    write_rollouts([group_line(1, 0, [0.0, 1.0], text="one"), group_line(2, 0, [0.5, 0.0]), "{torn"])
    assert reader.poll() == 2
    write_rollouts([group_line(2, 1, [0.25]), group_line(3, 0, [1.0])])
    assert reader.poll() == 2
    two = reader.summary(2)
    assert (two.groups, two.completions, two.zero, two.positive) == (2, 3, 1, 2)
    assert (two.best, two.worst, two.mean) == (0.5, 0.0, 0.25)
    assert reader.summary(1).version < two.version == reader.summary(3).version == reader.version
    assert reader.reads == 0
    # at most two groups stay parsed, whole steps, least recently used first out: only step 3 is left;
    # step 1 is read back from its line in the file, unchanged
    assert [c["text"] for c in reader.groups(1)[0]["completions"]] == ["one0", "one1"]
    assert reader.reads == 1
    assert reader.groups(1) is reader.groups(1) and reader.reads == 1  # kept parsed again
    assert [g["group"] for g in reader.groups(2)] == [0, 1]  # every group of a step, in file order
    assert reader.reads == 2
    version = reader.version
    assert reader.poll() == 0 and reader.version == version  # nothing new: nothing re-read
    assert reader.nearest_step(2) == 2 and reader.nearest_step(10) == 3 and reader.nearest_step(-5) == 1
    path = folder() / rollouts.ROLLOUTS_FILE
    path.write_text(json.dumps(group_line(7, 0, [0.0])) + "\n")  # replaced: start over
    reader.poll()
    assert reader.steps() == [7] and reader.summary(1) is None


def test_nearest_step_prefers_the_later_step_on_a_tie():
    reader = rollouts.RunRollouts(folder())
    assert reader.nearest_step(3) is None
    write_rollouts([group_line(2, 0, [1.0]), group_line(4, 0, [1.0])])
    reader.poll()
    assert reader.nearest_step(3) == 4 and reader.nearest_step(2) == 2


# -- the CLI and the agent reports, over rollouts a real local run recorded ------------------------


@pytest.fixture
def recorded_run():
    """A finished run folder whose rollouts.jsonl a real 12-step toy_addition run wrote."""
    write_run(RUN, environment="toy_addition", steps=12, total_steps=12)
    shutil.copyfile(REAL_ROLLOUTS, run_dir(RUN) / rollouts.ROLLOUTS_FILE)
    return RUN


def test_cli_rollouts_json_best_first_and_text_output(recorded_run, capsys):
    assert cli.main(["rollouts", RUN, "--best", "--limit", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step"] == 12 and len(out["completions"]) == 3
    rewards = [c["reward"] for c in out["completions"]]
    assert rewards == sorted(rewards, reverse=True)
    assert cli.main(["rollouts", RUN, "--step", "1"]) == 0
    text = capsys.readouterr().out
    assert "step 1" in text and "group 0" in text and "prompt: Q: " in text and "reward" in text
    assert cli.main(["rollouts", RUN, "--step", "99"]) == 1
    assert "recorded steps run from 1 to 12" in capsys.readouterr().err


def test_agent_reports_carry_short_best_and_worst_completions(recorded_run):
    status = toolset.rl_check_status(RUN)
    results = toolset.rl_get_results(RUN)
    for sample in (status["sample_completions"], results["sample_completions"]):
        assert sample["step"] == 12 and sample["completions"] == 16
        assert len(sample["best"]) == 2 and len(sample["worst"]) == 2
        assert sample["best"][0]["reward"] >= sample["worst"][0]["reward"]
        assert sample["best"][0]["prompt"].startswith("Q: ")
    for tool in ("rl_check_status", "rl_get_results"):
        assert "sample_completions" in toolset.TOOLS_BY_NAME[tool].returns
