"""From Atropos scored groups to Tinker training data, GRPO style.

Advantage of a completion = its reward minus the mean reward of its group (same prompt).
We do NOT divide by the group's standard deviation (the "Dr. GRPO" choice): dividing
gives near-unanimous groups (all right but one, or a graded score that barely differs)
the same weight as genuinely contested ones, which amplifies reward noise and biases the
update towards questions that are already nearly solved or hopeless. Without it the
update is proportional to how much the group actually disagreed; the learning rate sets
the scale. Groups whose rewards are all equal carry no signal and are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Sequence:
    """One completion ready for training: next-token targets with per-position advantage."""

    input_tokens: list[int]  # tokens[:-1]
    target_tokens: list[int]  # tokens[1:]
    sampling_logprobs: list[float]  # logprob of each target under the sampler (0 on prompt positions)
    advantages: list[float]  # the completion's advantage on completion positions, 0 on prompt
    completion_mask: list[float]  # 1.0 where the target is a generated token
    reward: float
    advantage: float
    has_sampling_logprobs: bool


@dataclass
class BatchStats:
    rewards: list[float]
    advantages: list[float]
    groups: int
    groups_dropped: int
    sequences_dropped: int
    groups_not_finite: int = 0  # dropped for a score that is not a finite number (NaN, ±inf, not a number)


def group_advantages(scores: list[float]) -> list[float]:
    mean = sum(scores) / len(scores)
    return [score - mean for score in scores]


def build_sequences(groups: list[dict], max_length: int) -> tuple[list[Sequence], BatchStats]:
    """Turn a /batch payload (a list of ScoredData dicts) into training sequences."""
    sequences: list[Sequence] = []
    rewards: list[float] = []
    advantages: list[float] = []
    dropped_groups = 0
    dropped_sequences = 0
    not_finite = 0
    for group in groups:
        tokens_list = group.get("tokens") or []
        masks_list = group.get("masks") or []
        scores = finite_scores(group.get("scores"))
        if scores is None:  # one NaN would make every advantage of the step NaN: the group is refused
            dropped_groups += 1
            not_finite += 1
            continue
        if not tokens_list or len(scores) != len(tokens_list) or len(masks_list) != len(tokens_list):
            dropped_groups += 1
            continue
        rewards.extend(scores)
        group_adv = group_advantages(scores)
        if all(abs(a) < 1e-12 for a in group_adv):
            dropped_groups += 1
            continue
        inference_logprobs = group.get("inference_logprobs") or [None] * len(tokens_list)
        for tokens, masks, score, advantage, logprobs in zip(
            tokens_list, masks_list, scores, group_adv, inference_logprobs
        ):
            advantages.append(advantage)
            if len(tokens) < 2 or len(tokens) > max_length or len(masks) != len(tokens):
                dropped_sequences += 1
                continue
            have_logprobs = logprobs is not None and len(logprobs) == len(tokens)
            completion = [1.0 if m != -100 else 0.0 for m in masks[1:]]
            if not any(completion):
                dropped_sequences += 1
                continue
            sampled = [
                float(lp) if (have_logprobs and c) else 0.0
                for lp, c in zip((logprobs or [0.0] * len(tokens))[1:], completion)
            ]
            sequences.append(
                Sequence(
                    input_tokens=[int(t) for t in tokens[:-1]],
                    target_tokens=[int(t) for t in tokens[1:]],
                    sampling_logprobs=sampled,
                    advantages=[advantage * c for c in completion],
                    completion_mask=completion,
                    reward=score,
                    advantage=advantage,
                    has_sampling_logprobs=have_logprobs,
                )
            )
    return sequences, BatchStats(rewards, advantages, len(groups), dropped_groups, dropped_sequences, not_finite)


def finite_scores(raw: object) -> list[float] | None:
    """A group's scores as floats; None when one is not a finite number (NaN, ±inf, text, a bool): the
    boundary where an environment's numbers enter training, whatever kind of environment sent them."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return None
    out = []
    for score in raw:
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            return None
        out.append(float(score))
    return out


def to_datums(sequences: list[Sequence]):
    """Tinker Datums for the policy losses (importance_sampling, ppo, cispo, dro: same inputs)."""
    from tinker import types  # noqa: PLC0415 - tinker imports torch (seconds): only the trainer's steps build datums

    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(seq.input_tokens),
            loss_fn_inputs={
                "target_tokens": seq.target_tokens,
                "logprobs": seq.sampling_logprobs,
                "advantages": seq.advantages,
            },
        )
        for seq in sequences
    ]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def std(values) -> float:
    values = list(values)
    if not values:
        return float("nan")
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def step_statistics(sequences: list[Sequence], training_logprobs: list[list[float]]) -> dict:
    """Loss and logprob metrics from the pre-update training logprobs the forward pass returned.

    train/loss is the importance-sampling objective per completion token:
    -sum(exp(lp_train - lp_sample) * A) / tokens.
    """
    sampled_all: list[float] = []
    trained_all: list[float] = []
    loss_sum = 0.0
    tokens = 0
    for seq, trained in zip(sequences, training_logprobs):
        for c, lp_sample, lp_train, adv in zip(seq.completion_mask, seq.sampling_logprobs, trained, seq.advantages):
            if not c:
                continue
            tokens += 1
            trained_all.append(lp_train)
            if seq.has_sampling_logprobs:
                sampled_all.append(lp_sample)
                ratio = math.exp(max(-50.0, min(50.0, lp_train - lp_sample)))
            else:
                ratio = 1.0
            loss_sum += -ratio * adv
    mean_sampled = mean(sampled_all) if sampled_all else mean(trained_all)
    mean_trained = mean(trained_all)
    return {
        "train/loss": loss_sum / tokens if tokens else float("nan"),
        "logprobs/mean": mean_sampled,
        "logprobs/mean_training": mean_trained,
        "logprobs/diff": mean_trained - mean_sampled,
        "train/completion_tokens": tokens,
    }
