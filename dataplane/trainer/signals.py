"""Whether a batch can teach the policy anything: the learning-signal statistics of one step.

The trainer adds these `signals/...` keys to every metrics.jsonl row (docs/audit.md says what each
means and what to do about it; core.base.audit_rule turns them into a verdict):

- signals/groups_zero_variance, signals/zero_variance_share: groups whose completions all scored the
  same (GRPO advantage 0 for every member: nothing to learn from them), of the batch's groups
- signals/completions, signals/batch_fill: completions in the batch, and that count over batch_size
  (below 1: a short batch; 0: an empty one)
- signals/truncated_share: completions that ended at the token limit ("length"), of those whose end
  is known (the trainer's inference server remembers it; an override `finish_reason` says it too)
- signals/completion_tokens_mean, signals/length_drift: mean completion length, and its ratio to the
  mean of the run's first BASELINE_STEPS steps
- signals/entropy: mean negative logprob of the sampled completion tokens, under the sampler
  (a single-sample estimate of the policy's entropy per token)
- signals/advantage_abs_mean: mean |advantage| over the batch's completions (the update's size)
- signals/staleness_mean, signals/staleness_max: policy versions between the weights that sampled a
  completion and the ones it trains (known for completions the trainer's own server sampled)

Pure Python on the /batch payload: a few list passes per step, nothing on the device.
"""

from __future__ import annotations

from collections.abc import Callable

PROMPT_MASK = -100
BASELINE_STEPS = 3  # the first steps' mean completion length is what drift is measured against


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class SignalTracker:
    """Per-step signal rows; keeps the first steps' completion length for the drift ratio.

    `sampled(tokens)` may say (finish reason, policy version) of a completion's tokens when the
    trainer's inference server served it recently; None when it cannot be told."""

    def __init__(self, batch_size: int, sampled: Callable[[list[int]], tuple[str | None, int | None]] | None = None):
        self.batch_size = max(1, int(batch_size))
        self.sampled = sampled
        self._baseline: list[float] = []

    def row(self, groups: list[dict], policy_version: int) -> dict:
        """The signals of one /batch payload, trained by weights of `policy_version`."""
        zero_variance = scored_groups = completions = 0
        lengths: list[float] = []
        finishes: list[str] = []
        neg_logprobs: list[float] = []
        abs_advantages: list[float] = []
        staleness: list[int] = []
        for group in groups:
            tokens_list = group.get("tokens") or []
            masks_list = group.get("masks") or []
            scores = [float(s) for s in group.get("scores") or []]
            if not tokens_list or len(scores) != len(tokens_list):
                continue
            scored_groups += 1
            completions += len(tokens_list)
            mean = sum(scores) / len(scores)
            if all(abs(s - mean) < 1e-12 for s in scores):
                zero_variance += 1
            abs_advantages.extend(abs(s - mean) for s in scores)
            overrides = group.get("overrides") or [None] * len(tokens_list)
            logprobs_list = group.get("inference_logprobs") or [None] * len(tokens_list)
            for tokens, masks, override, logprobs in zip(tokens_list, masks_list, overrides, logprobs_list):
                completion = [i for i, m in enumerate(masks) if m != PROMPT_MASK]
                ids = [int(tokens[i]) for i in completion if i < len(tokens)]
                lengths.append(float(len(ids)))
                if logprobs is not None and len(logprobs) == len(tokens):
                    neg_logprobs.extend(-float(logprobs[i]) for i in completion)
                finish, version = self._sampled(ids, override)
                if finish:
                    finishes.append(finish)
                if isinstance(version, int):
                    staleness.append(max(0, policy_version - version))
        mean_tokens = _mean(lengths)
        if mean_tokens is not None and len(self._baseline) < BASELINE_STEPS:
            self._baseline.append(mean_tokens)
        baseline = _mean(self._baseline)
        return {
            "signals/groups_zero_variance": zero_variance,
            "signals/zero_variance_share": zero_variance / scored_groups if scored_groups else None,
            "signals/completions": completions,
            "signals/batch_fill": completions / self.batch_size,
            "signals/truncated_share": sum(f == "length" for f in finishes) / len(finishes) if finishes else None,
            "signals/completion_tokens_mean": mean_tokens,
            "signals/length_drift": mean_tokens / baseline if mean_tokens is not None and baseline else None,
            "signals/entropy": _mean(neg_logprobs),
            "signals/advantage_abs_mean": _mean(abs_advantages),
            "signals/staleness_mean": _mean([float(s) for s in staleness]),
            "signals/staleness_max": max(staleness) if staleness else None,
        }

    def _sampled(self, ids: list[int], override) -> tuple[str | None, int | None]:
        finish = version = None
        if isinstance(override, dict):
            if isinstance(override.get("finish_reason"), str):
                finish = override["finish_reason"]
            if isinstance(override.get("weight_version"), int):
                version = override["weight_version"]
        if self.sampled is not None and (finish is None or version is None):
            known_finish, known_version = self.sampled(ids)
            finish = finish or known_finish
            version = version if version is not None else known_version
        return finish, version
