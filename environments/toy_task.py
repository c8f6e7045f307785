"""The toy task a tiny model learns on CPU: single-digit addition, plain-text completion.

Shared by the toy environment (prompts, scoring) and the local model builder (tokenizer
corpus and format-only warm start), so both always agree on the format.
Pure Python: no torch, no atroposlib.
"""

from __future__ import annotations

import random
import re

PROMPT_TEMPLATE = "Q: {a}+{b}=\nA:"
# For instruct models (toy_addition's `chat`): the question in a user turn, and an answer-format
# reward (the number alone is right; the right number in words around it gets `wordy_credit`).
CHAT_QUESTION = "What is {a} + {b}? Answer with the number only."
# Worked sums a chat conversation may open with (toy_addition's `chat_examples`): an instruct model shown the
# number alone as the answer gives it from its first steps (SmolLM2-135M: 17 % of replies with two, none without).
CHAT_EXAMPLES = ((1, 1), (3, 4), (5, 2))
ANSWER_TEMPLATE = " {answer}"
STOP = "\n"
_NUMBER_RE = re.compile(r"-?\d+")


def make_problem(rng: random.Random, max_operand: int = 4) -> tuple[str, int]:
    a = rng.randint(0, max_operand)
    b = rng.randint(0, max_operand)
    return PROMPT_TEMPLATE.format(a=a, b=b), a + b


def format_answer(answer: int) -> str:
    return ANSWER_TEMPLATE.format(answer=answer) + STOP


def parse_answer(completion: str) -> int | None:
    """The first integer of the completion's first line, or None."""
    first_line = completion.split(STOP, 1)[0]
    match = _NUMBER_RE.search(first_line)
    return int(match.group()) if match else None


def score(completion: str, answer: int, max_operand: int = 4, near_miss_credit: float = 0.0) -> float:
    """1.0 for the exact answer, 0 for no number; a wrong number gets up to `near_miss_credit`,
    less the further it is from the answer (0: right or wrong, nothing in between)."""
    guess = parse_answer(completion)
    if guess is None:
        return 0.0
    if guess == answer:
        return 1.0
    span = 2 * max_operand + 1
    return max(0.0, near_miss_credit * (1.0 - abs(guess - answer) / span))


def score_reply(reply: str, answer: int, wordy_credit: float = 0.0) -> float:
    """A chat reply: 1.0 when it is the number alone (a trailing full stop allowed), `wordy_credit`
    when its last number is the answer among other words, 0 otherwise."""
    text = reply.strip().removesuffix(".").strip()
    if text == str(answer):
        return 1.0
    numbers = _NUMBER_RE.findall(reply)
    return wordy_credit if numbers and int(numbers[-1]) == answer else 0.0
