"""The reasoning-gym environment: task mixes, answer extraction, reasoning-gym's scorer on malformed
answers, format credit apart from correctness, the curriculum's moves, typed config fields, discovery.
A small fixed task set, generated offline (reasoning-gym downloads nothing)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_rl.environments import reasoning_gym_tasks as tasks

ROOT = Path(__file__).resolve().parent.parent
EASY = {
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "gcd": {"min_value": 1, "max_value": 12},
    "spell_backward": {"min_word_len": 3, "max_word_len": 4},
}


def entry_of(task: str, seed: int = 1):
    dataset = tasks.make_dataset(task, EASY[task], 4, seed)
    return dataset, dataset[0]


def test_a_task_or_a_weighted_mix_by_name_and_unknown_names_are_refused_in_one_line():
    assert tasks.parse_mix("chain_sum") == {"chain_sum": 1.0}
    assert tasks.parse_mix("chain_sum:3, gcd:1") == {"chain_sum": 3.0, "gcd": 1.0}
    for bad, words in [
        ("chain_summ", "unknown reasoning-gym task 'chain_summ' (did you mean chain_sum"),
        ("gcd:0", "must be > 0"),
        ("gcd:x", "must be a number"),
        ("", "task is empty"),
        ("composite", "give a mix"),
    ]:
        with pytest.raises(ValueError) as err:
            tasks.parse_mix(bad)
        assert words in str(err.value) and "\n" not in str(err.value)


def test_the_same_seed_gives_the_same_items_and_another_seed_others():
    one = [
        e["question"] for e in tasks.make_dataset("chain_sum", EASY["chain_sum"], 6, tasks.task_seed(0, "chain_sum", 0))
    ]
    again = [
        e["question"] for e in tasks.make_dataset("chain_sum", EASY["chain_sum"], 6, tasks.task_seed(0, "chain_sum", 0))
    ]
    other = [
        e["question"] for e in tasks.make_dataset("chain_sum", EASY["chain_sum"], 6, tasks.task_seed(1, "chain_sum", 0))
    ]
    assert one == again and one != other
    assert tasks.task_seed(0, "chain_sum", 0, "eval") != tasks.task_seed(0, "chain_sum", 0)


@pytest.mark.parametrize(
    "reply, kind, answer, formatted",
    [
        ("8", "int", "8", True),
        ("-4.", "int", "-4", True),
        ("The answer is 8.", "int", "8", False),  # right, but not the asked format
        ("8 - 0 = 8", "int", "8", False),  # the case: the equation's result, not 1/9 credit
        ("7 - 4 =", "int", None, False),  # repeating the question answers nothing
        ("The GCD of 3 and", "int", None, False),  # nor does echoing a number of the question
        ("GCD = GCD(38", "int", None, False),  # ... after a marker: the number must be what it states
        ("= 8, which", "int", "8", False),
        ("4 is the answer to", "int", None, False),
        ("The answer is: 7", "int", "7", False),
        ("Photobooth", "int", None, False),
        ("", "int", None, False),
        ("\n\n", "int", None, False),
        ("htob", "word", "htob", True),
        ('The word is "htob".', "word", "htob", False),
        ("bob htob", "word", None, False),
        ("8\nbecause", "int", "8", False),  # only the first line counts, and more lines are not the format
    ],
)
def test_first_line_answers_are_extracted_as_the_task_expects(reply, kind, answer, formatted):
    assert tasks.extract_answer(reply, "first_line", kind) == (answer, formatted)


def test_answer_tags_are_extracted_and_their_absence_is_a_format_miss():
    assert tasks.extract_answer("think <answer> 12 </answer>", "answer_tag") == ("12", True)
    assert tasks.extract_answer("<answer>1</answer> no, <answer>2</answer>", "answer_tag") == ("2", True)
    assert tasks.extract_answer("12", "answer_tag") == (None, False)
    assert tasks.extract_answer("<answer>12", "answer_tag") == (None, False)


def test_free_text_replies_earn_format_credit_only_in_the_answers_shape():
    """For a free-text answer ("go, hundred") any one line would pass as the answer alone, and every reply of a
    group would get the format credit: no signal. The reply must have the reference's number of words."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset("word_sequence_reversal", size=4, seed=1, min_words=2, max_words=2)
    entry = dataset[0]
    first, second = [w.strip() for w in entry["answer"].split(",")]
    assert tasks.score_reply(dataset, entry, f"{first}, {second}", "first_line") == (1.0, True)
    assert tasks.score_reply(dataset, entry, "alpha, beta", "first_line") == (0.0, True)  # the shape, wrong words
    assert tasks.score_reply(dataset, entry, "The list of words is reversed", "first_line")[1] is False
    assert tasks.score_reply(dataset, entry, first, "first_line")[1] is False
    assert tasks.score_reply(dataset, entry, "- Aqua", "first_line")[1] is False  # one word and a dash


def test_word_reversal_grows_one_word_a_level_from_the_configs_two():
    """reasoning-gym's own curriculum jumps from two words to 10-25 at its first level, past what a small model
    (and 8 reply tokens) can follow: this task's levels add one word at a time."""
    from hermes_rl.environments.reasoning_gym_env import ReasoningGymConfig

    base = ReasoningGymConfig(task="word_sequence_reversal").base_params("word_sequence_reversal")
    assert base == {"min_words": 2, "max_words": 2}
    assert [tasks.params_at("word_sequence_reversal", base, level)["max_words"] for level in (1, 2, 6, 9)] == [
        3,
        4,
        8,
        8,
    ]
    assert tasks.max_level("word_sequence_reversal", base, 10) == 6


def test_copying_the_question_back_earns_no_format_credit():
    """An echo of the question's list (word reversal) or of one of its numbers (gcd) is not an answer: paid for
    its format, a small model settles on it and every group scores alike. The right answer keeps its credit even
    where it is in the question."""
    import reasoning_gym

    words = reasoning_gym.create_dataset("word_sequence_reversal", size=4, seed=1, min_words=2, max_words=2)
    entry = words[0]
    first, second = [w.strip() for w in entry["answer"].split(",")]
    assert tasks.score_reply(words, entry, f"{second}, {first}", "first_line") == (0.0, False)
    assert tasks.score_reply(words, entry, f"{second.upper()}, {first}", "first_line") == (0.0, False)
    gcd = reasoning_gym.create_dataset("gcd", size=40, seed=1, min_value=1, max_value=12)
    import re

    pairs = [(e, re.search(r"numbers: (\d+), (\d+)", e["question"]).groups()) for e in gcd]
    item, number = next((e, a) for e, (a, _b) in pairs if a != e["answer"])  # a number of the question, not its gcd
    assert tasks.echoes(number, item["question"]) and number != item["answer"]
    assert tasks.score_reply(gcd, item, number, "first_line") == (0.0, False)
    assert tasks.score_reply(gcd, item, item["answer"], "first_line") == (1.0, True)
    assert not tasks.echoes("1", "the gcd of 12 and 18") and tasks.echoes("12", "the gcd of 12 and 18")


def test_answer_kinds_follow_the_reference_answer():
    assert [tasks.answer_kind(a) for a in ("-4", "12", "htob", "a b", "")] == ["int", "int", "word", "text", "text"]


@pytest.mark.parametrize("task", sorted(EASY))
def test_reasoning_gyms_own_scorer_on_right_and_malformed_answers(task):
    dataset, entry = entry_of(task)
    gold = entry["answer"]
    assert tasks.score_reply(dataset, entry, gold, "first_line") == (1.0, True)
    assert tasks.score_reply(dataset, entry, f"<answer>{gold}</answer>", "answer_tag") == (1.0, True)
    for malformed in ("", "   ", "\x00\x01", "<answer></answer>", "9" * 5000, "🙂", None):
        score, _ = tasks.score_reply(dataset, entry, malformed, "first_line")
        assert score == 0.0 or (0.0 <= score < 1.0 and malformed and gold in malformed), (malformed, score)
    assert tasks.score_reply(dataset, entry, "no tags at all", "answer_tag") == (0.0, False)


def test_a_scorer_that_raises_scores_zero_instead_of_ending_the_run():
    class Broken:
        def score_answer(self, answer, entry):
            raise TypeError("cannot compare")

    assert tasks.score_reply(Broken(), {"answer": "3"}, "3", "first_line") == (0.0, True)


def test_curriculum_moves_up_past_the_threshold_and_back_down_when_reward_collapses():
    c = tasks.Curriculum(up=0.7, down=0.2, window=3, top=2)
    assert [c.record(r) for r in (0.8, 0.9)] == [0, 0]  # not a full window yet
    assert c.record(0.7) == 1 and c.level == 1 and not c.rewards  # the window starts afresh
    assert [c.record(1.0) for _ in range(3)] == [0, 0, 1] and c.level == 2
    assert [c.record(1.0) for _ in range(3)] == [0, 0, 0] and c.level == 2  # the top stays the top
    c.rewards.clear()
    assert [c.record(0.1) for _ in range(3)] == [0, 0, -1] and c.level == 1
    assert [c.record(0.5) for _ in range(5)] == [0] * 5 and c.level == 1  # in between: stays
    # a rolling window: two collapsed groups after three middling ones bring the mean to 0.17
    assert [c.record(0.0) for _ in range(2)] == [0, -1] and c.level == 0
    assert [c.record(0.0) for _ in range(3)] == [0, 0, 0] and c.level == 0  # the bottom stays the bottom


def test_a_level_whose_replies_are_cut_is_left_for_the_one_below_which_becomes_the_top():
    """The answer fits, but the model works longer than the limit (SmolLM2 on 3-term products): cut replies
    teach nothing but stopping, so the curriculum goes back and stays below."""
    c = tasks.Curriculum(up=0.7, down=0.2, window=2, top=4)
    assert [c.record(1.0, cut=0.0) for _ in range(2)] == [0, 1] and c.level == 1
    assert [c.record(0.5, cut=0.75) for _ in range(2)] == [0, -1] and c.level == 0
    assert c.capped and c.top == 0 and (c.cut_level, c.cut_share) == (1, 0.75)
    assert [c.record(1.0) for _ in range(4)] == [0] * 4 and c.level == 0  # it does not climb back
    level0 = tasks.Curriculum(window=2)
    assert [level0.record(0.5, cut=1.0) for _ in range(3)] == [0] * 3 and not level0.capped  # nowhere to go


def test_levels_grow_the_tasks_parameters_up_to_their_caps():
    base = EASY["chain_sum"]
    assert tasks.params_at("chain_sum", base, 0) == base
    assert tasks.params_at("chain_sum", base, 1) == {**base, "max_digits": 2}
    assert tasks.params_at("chain_sum", base, 2) == {**base, "max_digits": 2, "max_terms": 3}
    assert tasks.params_at("gcd", EASY["gcd"], 3)["max_value"] == 96
    assert tasks.max_level("spell_backward", EASY["spell_backward"], 100) == 6  # 4 -> 10 letters
    harder = tasks.make_dataset("chain_sum", tasks.params_at("chain_sum", base, 4), 20, 3)
    assert max(len(e["metadata"]["expression"]) for e in harder) > 5  # more terms or digits really come
    # a task without a ladder here climbs reasoning-gym's own curriculum
    assert tasks.params_at("leg_counting", {}, 3) != tasks.params_at("leg_counting", {}, 1)


def test_task_descriptions_come_from_reasoning_gym():
    descriptions = tasks.task_descriptions()
    assert len(descriptions) > 100
    assert descriptions["chain_sum"].startswith("Generates simple arithmetic tasks")


def make_env(**fields):
    from hermes_rl.environments.reasoning_gym_env import ReasoningGymConfig, ReasoningGymEnv

    config = ReasoningGymConfig(tokenizer_name="none", **fields)
    env = ReasoningGymEnv.__new__(ReasoningGymEnv)  # the scoring and data parts only: no servers
    env.config = config
    env.mix = tasks.parse_mix(config.task)
    env.datasets, env.cursor, env.eval_items, env.eval_questions = {}, {}, [], set()
    env.curricula = {name: tasks.Curriculum() for name in env.mix}
    return env


def test_config_fields_are_typed_and_checked():
    from pydantic import ValidationError

    from hermes_rl.environments.reasoning_gym_env import ReasoningGymConfig

    fields = ReasoningGymConfig.model_fields
    assert fields["chain_sum_max_digits"].annotation is int and fields["format_credit"].annotation is float
    assert fields["curriculum"].annotation is bool and fields["task"].annotation is str
    config = ReasoningGymConfig(tokenizer_name="x", chain_sum_max_terms="3", task_params='{"gcd": {"max_numbers": 3}}')
    assert config.base_params("chain_sum")["max_terms"] == 3
    assert config.base_params("gcd") == {"min_value": 1, "max_value": 12, "max_numbers": 3}
    for bad in ({"task": "nope"}, {"format_credit": 1.5}, {"answer_format": "xml"}, {"task_params": "[1]"}):
        with pytest.raises(ValidationError):
            ReasoningGymConfig(tokenizer_name="x", **bad)


def test_format_credit_is_its_own_reward_component():
    env = make_env(task="chain_sum", format_credit=0.1)
    dataset = env.dataset("chain_sum", 0)
    entry = dataset[0]
    gold = entry["answer"]
    assert env.reward(dataset, entry, gold) == (pytest.approx(1.0), 1.0, True)
    assert env.reward(dataset, entry, f"The answer is {gold}.") == (pytest.approx(0.9), 1.0, False)
    wrong = str(int(gold) + 1)
    assert env.reward(dataset, entry, wrong) == (pytest.approx(0.1), 0.0, True)  # format alone: 0.1
    assert env.reward(dataset, entry, "Photobooth") == (0.0, 0.0, False)


def test_partial_credit_can_be_turned_off_where_it_is_a_shortcut():
    """reasoning-gym's default scorer credits an answer found inside a longer reply by length: for two words to
    reverse, repeating the question's list twice ("hundred, go, hundred, go" holds "go, hundred") earns 0.46,
    a shortcut SmolLM2 found. With partial_credit off only the exact answer earns the correctness part."""
    for partial in (True, False):
        env = make_env(task="word_sequence_reversal", format_credit=0.1, partial_credit=partial)
        dataset = env.dataset("word_sequence_reversal", 0)
        entry = dataset[0]
        first, second = [w.strip() for w in entry["answer"].split(",")]
        twice = f"{second}, {first}, {second}, {first}"
        reward, score, formatted = env.reward(dataset, entry, twice)
        assert score == pytest.approx(len(entry["answer"]) / len(twice)) and not formatted
        assert score > 0.3 and reward == (pytest.approx(0.9 * score) if partial else 0.0)
        assert env.reward(dataset, entry, entry["answer"])[0] == pytest.approx(1.0)


def test_held_out_eval_items_are_never_trained_on():
    env = make_env(task="gcd", eval_size=20, dataset_size=60)
    asyncio.run(env.setup())
    assert len(env.eval_items) == 20
    trained = {env.next_entry("gcd", 0)["question"] for _ in range(200)}
    assert trained and not trained & env.eval_questions


def test_a_mix_draws_every_task_and_levels_change_the_items():
    env = make_env(task="chain_sum:1,spell_backward:1", seed=3)
    env.rng = __import__("random").Random(3)
    env.baseline_eval = object()  # no servers: skip the baseline eval
    drawn = {asyncio.run(env.get_next_item())["task"] for _ in range(30)}
    assert drawn == {"chain_sum", "spell_backward"}
    env.curricula["chain_sum"].level = 3
    assert env.dataset("chain_sum", 3).config.max_digits == 3


def test_env_metrics_name_the_curriculum_level():
    env = make_env(task="chain_sum:1,gcd:1")
    env.curricula["gcd"].level = 2
    assert env.curriculum_metrics() == {
        "curriculum/level": 1.0,
        "curriculum/chain_sum/level": 0,
        "curriculum/gcd/level": 2,
    }


def test_prompt_asks_in_the_chat_template_with_the_answer_format():
    from hermes_rl.environments.reasoning_gym_env import ReasoningGymEnv

    class Template:
        chat_template = "yes"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict):
            assert add_generation_prompt and not tokenize and not return_dict
            return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    env = SimpleNamespace(config=SimpleNamespace(answer_format="first_line"), tokenizer=Template())
    assert ReasoningGymEnv.prompt_for(env, "2 + 3 =") == (
        "<user>2 + 3 =\nReply with the final answer only, on one line, nothing else.<assistant>"
    )


def test_the_environment_is_discovered_with_its_description_and_lists_tasks():
    from hermes_rl.core.envs.discovery import find_environment

    env = find_environment("reasoning_gym")
    assert env.class_name == "ReasoningGymEnv" and env.config_class == "ReasoningGymConfig"
    assert env.source == "project" and env.abstract is None and "reasoning-gym" in env.description
    out = subprocess.run(
        [sys.executable, "-m", "hermes_rl.environments.reasoning_gym_env", "tasks"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "* chain_sum" in out.stdout and "Generates simple arithmetic tasks" in out.stdout


def test_answers_are_spread_so_always_giving_the_commonest_one_is_no_shortcut():
    """letter_counting's easiest items are "1" 84 % of the time: a policy answering "1" to everything would
    look like one that learned to count. Balanced training datasets spread the answers; the eval says its bar."""
    easy = {"min_words": 1, "max_words": 2}
    skewed = tasks.make_dataset("letter_counting", easy, 400, 5)
    spread = tasks.make_dataset("letter_counting", easy, 400, 5, balance=True)
    assert tasks.constant_answer_share(skewed) > 0.75
    assert tasks.constant_answer_share(spread) < 0.5 and len(spread) == 400
    assert [e["question"] for e in spread] == [
        e["question"] for e in tasks.make_dataset("letter_counting", easy, 400, 5, balance=True)
    ]  # seeded
    entry = spread[7]
    assert spread.score_answer(str(entry["answer"]), entry) == 1.0  # reasoning-gym's own scorer still scores
    # eval keeps the task's own answers (it measures the task) and says what always answering "1" scores there
    env = make_env(task="letter_counting", eval_size=24)
    asyncio.run(env.setup())
    held = [e for _, e, _ in env.eval_items]
    assert len(held) == 24 and env.constant_baseline == tasks.constant_answer_share(held) > 0.5


def test_a_generator_that_never_finishes_is_named_in_the_log_with_its_parameters():
    """reasoning-gym's base_conversion with one base draws a second, different base forever: the env would
    stall in setup with nothing said. The log names the task and its parameters (the process is killed here)."""
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from hermes_rl.environments import reasoning_gym_tasks as t\n"
        "t.make_dataset('base_conversion', {'min_base': 2, 'max_base': 2}, 4, 0, warn_after=0.5)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "generator has not returned" in line:
                break
        assert proc.poll() is None, "".join(lines)  # still generating
        assert "base_conversion" in line and "'min_base': 2, 'max_base': 2" in line and "task_params" in line
    finally:
        proc.kill()
        proc.wait()


def test_a_quick_generator_says_nothing(caplog):
    with caplog.at_level("WARNING", logger="reasoning_gym"):
        dataset = tasks.make_dataset("chain_sum", EASY["chain_sum"], 8, 0, warn_after=1.0)
        assert len(dataset) == 8
        time.sleep(1.2)  # past warn_after: the timer was cancelled once the items came
    assert not [r for r in caplog.records if "has not returned" in r.getMessage()]


def test_the_curriculum_never_raises_a_task_past_what_the_token_limit_can_answer(caplog):
    """README's demo keeps replies to a few tokens: a level whose answers need more is never reached (one
    token a character stands in for SmolLM2's one token a digit)."""
    import functools

    def curriculum(max_completion_tokens: int):
        env = make_env(task="chain_sum", chain_sum_max_digits=1, max_completion_tokens=max_completion_tokens)
        env.tokenizer = SimpleNamespace(encode=lambda text, add_special_tokens=True: list(text.encode()))
        c = env.curricula["chain_sum"] = tasks.Curriculum(window=2, top=4)
        c.fits = functools.partial(env.answers_fit, "chain_sum")
        return c

    # level 0: sums of two 1-digit numbers, a newline and 2 to spare fit 5 tokens; level 1's 2-digit terms do not
    short = curriculum(5)
    with caplog.at_level("WARNING", logger="reasoning_gym"):
        assert [short.record(1.0) for _ in range(6)] == [0] * 6
    assert short.level == 0 and short.top == 0 and short.capped
    warned = [r.getMessage() for r in caplog.records if "stays at level 0" in r.getMessage()]
    assert len(warned) == 1 and "max_completion_tokens 5" in warned[0]
    roomy = curriculum(16)
    assert [roomy.record(1.0) for _ in range(2)] == [0, 1] and roomy.level == 1 and not roomy.capped
