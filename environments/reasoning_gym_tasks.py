"""reasoning-gym tasks for environments/reasoning_gym_env.py: task mixes, difficulty levels, answer
extraction, scoring with reasoning-gym's own scorer, and the curriculum. No atroposlib here (tests and the
task listing import it cheaply); reasoning_gym itself is imported where it is used.

A difficulty *level* maps to a task's generator parameters: level 0 is the configured (easiest) setting;
each level up grows one parameter of the task's ladder (GROWTH) in turn, up to its cap. A task without a
ladder here climbs reasoning-gym's own curriculum for it (level L = its global level L - 1), or stays put.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import logging
import random
import re
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("reasoning_gym")
# A generator that has not returned its items by then is said to be slow in the env log: some settings never
# finish (base_conversion with min_base == max_base draws a second base until it differs, forever).
SLOW_GENERATION_S = 30.0

# task -> steps a level up applies in turn: (parameter, "add" | "mul", amount, cap). Level 0 is the config's
# setting, kept as easy as SmolLM2-135M needs to get any signal (the measurements).
GROWTH: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "chain_sum": (("max_digits", "add", 1, 4), ("max_terms", "add", 1, 6)),
    "count_bits": (("max_n", "mul", 2, 2**31 - 1),),
    "gcd": (("max_value", "mul", 2, 1000),),
    "spell_backward": (("max_word_len", "add", 1, 10),),
    "letter_counting": (("max_words", "add", 1, 15),),
    "basic_arithmetic": (("max_terms", "add", 1, 6), ("max_digits", "add", 1, 4)),
    # reasoning-gym's own curriculum jumps from a few words to 10-25 at its first level
    "word_sequence_reversal": (("max_words", "add", 1, 8),),
}
ANSWER_FORMATS = ("first_line", "answer_tag")
# What the model is told, per answer format (SmolLM2-135M follows the first far more often than tags).
INSTRUCTIONS = {
    "first_line": "Reply with the final answer only, on one line, nothing else.",
    "answer_tag": "Give only the final answer between <answer> and </answer> tags, nothing else.",
}
_TAG_RE = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_INT_RE = re.compile(r"-?\d+")
_WORD_RE = re.compile(r"\w+")
_STATED_INT_RE = re.compile(r"\A\s*(-?\d+)(?![\w(])")
_QUOTES = "`*\"' "


def parse_mix(text: str) -> dict[str, float]:
    """'chain_sum' or 'chain_sum:3,count_bits:1' -> {task: weight}; ValueError (one line) on bad input."""
    from reasoning_gym.factory import DATASETS

    mix: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, _, weight = part.partition(":")
        name = name.strip()
        if name not in DATASETS:
            close = difflib.get_close_matches(name, sorted(DATASETS), n=3)
            close += [n for n in sorted(DATASETS) if name and (name in n or n in name) and n not in close]
            close = close[:5]
            hint = (
                f" (did you mean {', '.join(close)}?)"
                if close
                else " (`python -m hermes_rl.environments.reasoning_gym_env tasks` lists them)"
            )
            raise ValueError(f"unknown reasoning-gym task {name!r}{hint}")
        if name == "composite":
            raise ValueError("give a mix as 'task:weight,task:weight' instead of the composite task")
        try:
            value = float(weight) if weight.strip() else 1.0
        except ValueError:
            raise ValueError(f"weight of {name!r} must be a number, got {weight!r}") from None
        if not value > 0:
            raise ValueError(f"weight of {name!r} must be > 0, got {weight!r}")
        mix[name] = mix.get(name, 0.0) + value
    if not mix:
        raise ValueError("task is empty: name a reasoning-gym task, e.g. chain_sum or 'chain_sum:2,gcd:1'")
    return mix


def task_descriptions() -> dict[str, str]:
    """Every reasoning-gym task -> the first line of its dataset class's docstring."""
    from reasoning_gym.factory import DATASETS

    out = {}
    for name, (dataset_cls, _config) in sorted(DATASETS.items()):
        doc = (dataset_cls.__doc__ or "").strip()
        out[name] = doc.splitlines()[0].strip() if doc else ""
    return out


def params_at(task: str, base: dict, level: int) -> dict:
    """The generator parameters of `task` at `level` (level 0: `base` itself)."""
    params = dict(base)
    if level <= 0:
        return params
    steps = GROWTH.get(task)
    if steps:
        for i in range(level):
            name, op, amount, cap = steps[i % len(steps)]
            from reasoning_gym.factory import DATASETS

            current = params.get(name, getattr(DATASETS[task][1](), name))
            params[name] = min(cap, current + amount if op == "add" else current * amount)
        return params
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(task):
        return params
    from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode

    curriculum = create_curriculum(task)
    curriculum.set_global_level(level - 1)
    config = curriculum.generate_configuration(
        defaults=params, context=DefaultCurriculumContext(mode=RangeAttributeMode.UPPER_BOUND)
    )
    return {k: v for k, v in vars(config).items() if k not in ("seed", "size")}


def max_level(task: str, base: dict, limit: int) -> int:
    """The highest level (≤ limit) that still changes the parameters: the curriculum stops there."""
    top, previous = 0, params_at(task, base, 0)
    for level in range(1, limit + 1):
        current = params_at(task, base, level)
        if current == previous:
            break
        top, previous = level, current
    return top


def task_seed(seed: int, task: str, level: int, salt: str = "train") -> int:
    """A stable seed per (run seed, task, level, train|eval): the same config gives the same items."""
    digest = hashlib.sha256(f"{seed}:{task}:{level}:{salt}".encode()).hexdigest()
    return int(digest[:12], 16)


POOL_FACTOR, MIN_POOL = 4, 1000  # a balanced dataset is drawn from a pool this many times its size (at least)


def check_params(task: str, params: dict) -> None:
    """ValueError (one line) when reasoning-gym's generator for `task` refuses `params`: a parameter it
    does not have (with "did you mean"), or values its own config check refuses. Only the config is
    built, no item: what a start checks before anything runs (the run would fail a minute later)."""
    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[task][1]
    known = [f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")]
    for name in params:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            guess = f"did you mean {close[0]}? " if close else ""
            listed = ", ".join(known)
            raise ValueError(f"reasoning-gym's {task} has no parameter {name!r} ({guess}its parameters: {listed})")
    try:
        config = config_cls(**params)
        if hasattr(config, "validate"):
            config.validate()
    except (AssertionError, ValueError, TypeError) as exc:
        raise ValueError(f"reasoning-gym's {task} refuses {params}: {exc or type(exc).__name__}") from None


def make_dataset(
    task: str, params: dict, size: int, seed: int, balance: bool = False, warn_after: float = SLOW_GENERATION_S
):
    import reasoning_gym

    # reasoning-gym generates items when they are read: read the first (the whole pool when balancing) under
    # a timer that names the task and its parameters if it hangs, rather than a run that stalls in silence.
    timer = threading.Timer(
        warn_after,
        lambda: log.warning(
            "reasoning-gym's %s generator has not returned its items in %.0f s with %s: some settings never "
            "finish (base_conversion with min_base == max_base loops forever); check task_params",
            task,
            warn_after,
            params,
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        if not balance:
            dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **params)
            dataset[0]
            return dataset
        pool = reasoning_gym.create_dataset(task, size=max(size * POOL_FACTOR, MIN_POOL), seed=seed, **params)
        return BalancedDataset(pool, size, seed)
    finally:
        timer.cancel()


class BalancedDataset:
    """A reasoning-gym dataset whose answers are spread as evenly as its pool allows: items taken in turn
    from each answer value of a pool POOL_FACTOR times the size (MIN_POOL at least), then shuffled
    (seeded). On some tasks' easy levels one answer dominates (84 % of letter_counting's 1–2 word items
    are "1", a third of gcd's ≤ 12 are "2"): a policy that always gives it would score like one that
    learned the task. Everything else (the scorer, the generator's config) is the pool's."""

    def __init__(self, pool, size: int, seed: int):
        buckets: dict[str, deque] = {}
        for index in range(len(pool)):
            entry = pool[index]
            buckets.setdefault(str(entry.get("answer")), deque()).append(entry)
        queues = list(buckets.values())
        items: list[dict] = []
        while queues and len(items) < size:
            for queue in queues[: size - len(items)]:
                items.append(queue.popleft())
            queues = [q for q in queues if q]
        random.Random(seed).shuffle(items)
        self.items, self.pool = items, pool

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]

    def __iter__(self):
        return iter(self.items)

    def __getattr__(self, name: str):
        return getattr(self.pool, name)


def constant_answer_share(entries) -> float:
    """What always giving one answer would score on these items: the share of their most common answer."""
    counts = Counter(str(e.get("answer")) for e in entries)
    return max(counts.values()) / sum(counts.values()) if counts else 0.0


def answer_kind(expected: str) -> str:
    """How a task's answers look, from its reference answer: "int", "word" (one token) or "text"."""
    expected = str(expected).strip()
    if _INT_RE.fullmatch(expected):
        return "int"
    return "word" if expected and len(expected.split()) == 1 else "text"


def _after_marker(line: str) -> str | None:
    """What follows the line's last `=`, ` is ` or `:` (where a stated answer sits), None without one."""
    cut = max(line.rfind("="), line.rfind(" is "), line.rfind(":"))
    if cut < 0:
        return None
    return line[cut:].removeprefix("=").removeprefix(" is ").removeprefix(":")


def extract_answer(reply: str, answer_format: str, kind: str = "text") -> tuple[str | None, bool]:
    """(the reply's final answer, or None; whether the reply has the asked format).

    answer_tag: the last <answer>…</answer>; well formatted when there is one.
    first_line: the first non-empty line, read as the task's answers look (`kind`): the line when it is
    one number / one word alone, else the number / first word that opens what follows its last `=`,
    ` is ` or `:` (`8 - 0 = 8`, `The answer is 8.`), none otherwise, so that a reply echoing the question
    (`The GCD of 3 and`, `7 - 4 =`, `GCD = GCD(38`) answers nothing; any other task: the line, or what
    follows its last `=`.
    Well formatted: the reply is the answer alone on one line (a trailing full stop allowed).
    """
    if answer_format == "answer_tag":
        matches = _TAG_RE.findall(reply or "")
        return (matches[-1].strip(), True) if matches else (None, False)
    lines = [line.strip() for line in (reply or "").strip().splitlines() if line.strip()]
    if not lines:
        return None, False
    line = lines[0].removesuffix(".").strip()
    bare = line.strip(_QUOTES)
    if kind == "int":
        if _INT_RE.fullmatch(bare):
            answer = bare
        else:  # the number must open what follows the marker: `GCD = GCD(38` states no answer, it echoes
            stated = _STATED_INT_RE.search(_after_marker(line) or "")
            answer = stated.group(1) if stated else None
    elif kind == "word":
        if bare and len(bare.split()) == 1:
            answer = bare
        else:
            words = [w.strip(_QUOTES + ".,;!?()") for w in (_after_marker(line) or "").split()]
            answer = next((w for w in words if w), None)
    else:
        answer = (line.rsplit("=", 1)[-1] if "=" in line else line).strip() or None
    formatted = answer is not None and len(lines) == 1 and bare == answer
    return answer, formatted


def score_reply(dataset, entry: dict, reply: str, answer_format: str) -> tuple[float, bool]:
    """(reasoning-gym's score of the extracted answer, 0.0 when there is none or the scorer fails; format ok)."""
    expected = str(entry.get("answer", ""))
    kind = answer_kind(expected)
    answer, formatted = extract_answer(reply, answer_format, kind)
    if formatted and kind == "text" and answer_format == "first_line":
        # Any one line passes as "the answer alone" for free text, so the format credit would go to every reply
        # (no signal): the reference's shape, its number of words, is the format asked. Words, not
        # whitespace-split pieces: SmolLM2 found that `- Aqua` passes for two.
        formatted = len(_WORD_RE.findall(str(answer))) == len(_WORD_RE.findall(expected))
    if answer is None:
        return 0.0, formatted
    try:
        score = float(dataset.score_answer(answer, entry))
    except Exception:  # a scorer that chokes on a malformed answer scores it 0, never ends the run
        return 0.0, formatted
    score = score if 0.0 <= score <= 1.0 else 0.0
    if formatted and score < 1.0 and echoes(answer, str(entry.get("question", ""))):
        # Copying part of the question back is not an answer: paid for its format, SmolLM2 settles on it (the list
        # it should reverse, the number it should take the gcd of) and every reply of a group scores alike.
        formatted = False
    return score, formatted


def echoes(answer: str, question: str) -> bool:
    """Whether the answer is a span of the question, whole words, any case (`from, the` in `…words: from, the`)."""
    answer = answer.strip()
    return bool(answer) and re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", question, re.IGNORECASE) is not None


@dataclass
class Curriculum:
    """Level moves on the mean reward of the last `window` groups: ≥ up → one level harder, ≤ down → one
    easier; after a move the window starts afresh (the new level's rewards decide the next move). `fits(level)`,
    when given, says whether a reply within the run's token limit can hold that level's answers: a level it
    cannot is never reached (the top comes down to the level below, `capped` says so). A level whose replies
    the run cuts (a window with `cut_back` of them at the token limit) is left for the one below, which becomes
    the top: the model works longer than the limit lets it, and cut replies only teach it to stop (`cut_level`
    and `cut_share` say which level and how many)."""

    up: float = 0.7
    down: float = 0.2
    window: int = 8
    top: int = 10
    level: int = 0
    rewards: deque = field(default_factory=deque)
    moves: int = 0
    fits: Callable[[int], bool] | None = None
    capped: bool = False
    cut_back: float = 0.5
    cuts: deque = field(default_factory=deque)
    cut_level: int | None = None
    cut_share: float | None = None

    def record(self, reward: float, cut: float = 0.0) -> int:
        """Add one group's mean reward and the share of its replies cut at the token limit; returns the move
        made (+1, -1 or 0)."""
        self.rewards.append(float(reward))
        self.cuts.append(float(cut))
        while len(self.rewards) > self.window:
            self.rewards.popleft()
        while len(self.cuts) > self.window:
            self.cuts.popleft()
        if len(self.rewards) < self.window:
            return 0
        mean = sum(self.rewards) / len(self.rewards)
        cut_mean = sum(self.cuts) / len(self.cuts)
        move = 0
        if self.level > 0 and cut_mean >= self.cut_back:
            self.cut_level, self.cut_share = self.level, cut_mean
            self.top, self.capped, move = self.level - 1, True, -1
        elif mean >= self.up and self.level < self.top:
            if self.fits is not None and not self.fits(self.level + 1):
                self.top, self.capped = self.level, True  # its answers do not fit a reply: stay
            else:
                move = 1
        elif mean <= self.down and self.level > 0:
            move = -1
        if move:
            self.level += move
            self.moves += 1
            self.rewards.clear()
            self.cuts.clear()
        return move

    def recent(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None
