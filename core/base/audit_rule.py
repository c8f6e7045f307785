"""Is it learning, and if not, why: the audit of a run's learning signals (docs/audit.md).

`audit(...)` turns what a run recorded (the trainer's metrics rows with their `signals/...` keys, the
environments' env_metrics rows, the groups the environments dropped for scoring alike, the last groups
recorded in rollouts.jsonl) into `{verdict, reasons, signals}`. One rule for every client (status, the
agent tools, the dashboard, the HTML report, the alerts). Pure: the caller reads the files (core.daemons.run_audit).

Verdicts, first that applies:
- no_signal: at least NO_SIGNAL_SHARE of the recent groups scored alike (or were dropped for it), or
  the recent batches were empty: GRPO has nothing to learn from, whatever the curves look like. The
  reason names the cause (_alike_cause): answers cut at the token limit, identical samples, a reward
  that does not depend on the completion, every answer wrong (too hard, or a missed format), every
  answer right (too easy). Every answer right (or right with words around it, where greedy eval agrees) after
  the reward or eval rose is a task learned: `learning`, with that reason
- suspect: the reward rises while greedy eval falls; completions run into the token limit or grow
  LENGTH_DRIFT_MAX times their first length; one part of a multi-part reward carries it while eval
  does not follow; the entropy collapsed while the reward stayed flat
- unknown: fewer than MIN_STEPS trained steps (and no sign of the above)
- learning: reward or greedy eval rose by at least RISE between the run's first and last steps
- flat: neither rose
"""

from __future__ import annotations

import math
import re
from typing import Any

VERDICTS = ("learning", "flat", "no_signal", "suspect", "unknown")
WINDOW = 10  # steps averaged at each end of the run
MIN_STEPS = 5
MIN_GROUPS = 2  # groups seen before "no signal" can be said
NO_SIGNAL_SHARE = 0.9
WARN_ZERO_SHARE = 0.5
RISE = 0.05  # a reward or eval gain smaller than this is noise on a small batch
EVAL_FALL = 0.02
TRUNCATED_WARN = 0.2
TRUNCATED_SUSPECT = 0.5
LENGTH_DRIFT_MAX = 2.0
ENTROPY_COLLAPSE = 0.25  # recent entropy under this share of the first steps' (and under ENTROPY_FLOOR)
ENTROPY_FLOOR = 0.1
DOMINANT_SHARE = 0.8
STALE_WARN = 2.0
ROLLOUT_GROUPS = 64  # the most recent recorded groups the cause of alike groups is read from
IDENTICAL_SHARE = 0.5  # of the alike groups holding one completion repeated: the samples do not explore
LOW_ENTROPY = 0.2  # nats/token: without rollouts, samples this sure are likely identical
DISTINCT_SHARE = 0.5  # of the alike groups holding different completions that scored the same
EXPECTED_HITS = 0.5  # of completions holding the expected answer: a wrong-scored group found it anyway
ALIKE_SHARED = 0.75  # the share of alike groups at one value for it to be the value they share
EVAL_GAP = 0.5  # greedy eval this far from the sampled reward: the reward does not measure the task
LEARNED_PART = 0.5  # a right answer paid at least this much (not full marks: words around it) ...
LEARNED_EVAL = 0.5  # ... is a task learned where greedy eval gets at least this share right
EXAMPLE_CHARS = 80

_OWN_REWARD_KEYS = {"reward/mean"}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _col(rows: list[dict], key: str, fallback=None) -> list[float]:
    out = []
    for row in rows:
        value = _num(row.get(key))
        if value is None and fallback is not None:
            value = fallback(row)
        if value is not None:
            out.append(value)
    return out


def _entropy_of(row: dict) -> float | None:
    """Older rows without signals/entropy: the sampler's mean logprob of the trained tokens."""
    lp = _num(row.get("logprobs/mean"))
    return -lp if lp is not None else None


def _tokens_of(row: dict) -> float | None:
    tokens, sequences = _num(row.get("train/completion_tokens")), _num(row.get("batch/sequences"))
    return tokens / sequences if tokens is not None and sequences else None


def _pct(share: float | None) -> str:
    return "unknown" if share is None else f"{100 * share:.0f} %"


def _f(value: float | None, digits: int = 2) -> str:
    return "unknown" if value is None else f"{value:.{digits}f}"


def _components(env_rows: list[dict]) -> dict[str, float]:
    """Mean of each reward part an environment logs (`reward/<name>`) over its recent rows."""
    seen: dict[str, list[float]] = {}
    for row in env_rows:
        for key, value in row.items():
            if key.startswith("reward/") and key not in _OWN_REWARD_KEYS and _num(value) is not None:
                seen.setdefault(key[len("reward/") :], []).append(float(value))
    return {name: round(sum(v[-WINDOW:]) / len(v[-WINDOW:]), 4) for name, v in seen.items()}


def _clip(text: Any, tail: bool = False) -> str:
    text = " ".join(str(text or "").split())
    if len(text) <= EXAMPLE_CHARS:
        return text
    return "…" + text[-EXAMPLE_CHARS:] if tail else text[:EXAMPLE_CHARS] + "…"


def _holds(text: str, expected: str) -> bool:
    """Whether a completion holds the expected answer as a whole token (7 is not in 17 or 7.5)."""
    return re.search(rf"(?<![\w.]){re.escape(expected)}(?![\w]|\.\d)", text) is not None


def rollout_signals(groups: list[dict]) -> dict[str, Any]:
    """What the most recent recorded groups (rollouts.jsonl lines) say about groups that scored alike:
    how many hold one completion repeated, how many hold different completions that scored the same,
    whether their completions hold the answer the environment expected (`expected`, when it records it),
    and one of them as an example."""
    recent = [
        g
        for g in groups[-ROLLOUT_GROUPS:]
        if isinstance(g, dict) and isinstance(g.get("completions"), list) and len(g["completions"]) >= 2
    ]
    alike = identical = identical_right = distinct = hits = known = 0
    values: list[float] = []
    example: dict[str, Any] | None = None
    for group in recent:
        completions = [c for c in group["completions"] if isinstance(c, dict)]
        rewards = [r for r in (_num(c.get("reward")) for c in completions) if r is not None]
        texts = [str(c.get("text") or "").strip() for c in completions]
        if len(set(texts)) == 1:
            identical += 1
            identical_right += bool(rewards) and min(rewards) >= 0.95
        if len(rewards) < 2 or len(rewards) != len(completions) or max(rewards) - min(rewards) > 1e-9:
            continue
        alike += 1
        values.append(round(rewards[0], 4))
        distinct += len(set(texts)) > 1
        expected = group.get("expected")
        if isinstance(expected, (str, int, float)) and str(expected).strip():
            known += len(texts)
            hits += sum(_holds(t, str(expected).strip()) for t in texts)
        others = [t for t in texts if t != texts[0]]
        example = {
            "prompt": _clip(group.get("prompt"), tail=True),
            "completion": _clip(texts[0]),
            "other": _clip(others[0]) if others else None,
            "reward": rewards[0],
            "expected": None if expected is None else _clip(expected),
        }
    return {
        "rollout_groups": len(recent),
        "identical_share": round(identical / len(recent), 4) if recent else None,
        "identical_right_share": round(identical_right / identical, 4) if identical else None,
        "alike_distinct_share": round(distinct / alike, 4) if alike else None,
        "alike_value": _shared_value(values),
        "alike_values": len(set(values)),
        "expected_hits": round(hits / known, 4) if known else None,
        "example": example,
    }


def _shared_value(values: list[float]) -> float | None:
    """The value (nearly) every alike group scored; None where they differ (all right on some prompts, all wrong
    on others) or no group is alike."""
    if not values:
        return None
    common = max(values, key=values.count)
    return common if values.count(common) >= ALIKE_SHARED * len(values) else None


def collect_signals(
    head: list[dict],
    tail: list[dict],
    env_head: list[dict],
    env_tail: list[dict],
    dropped: dict[str, int],
    rollouts: list[dict] | None = None,
) -> dict[str, Any]:
    """The signals of a run from the first and last trainer rows, the first and last env rows, the
    groups the environments dropped ({"same_scores": n, "too_long": n}) and the last recorded groups."""
    steps = max((int(r["step"]) for r in tail if isinstance(r.get("step"), int)), default=0)
    recent = tail[-WINDOW:]
    width = max(1, min(WINDOW, steps // 2)) if steps else WINDOW
    zv = _col(tail, "signals/groups_zero_variance", lambda r: _num(r.get("batch/groups_dropped")))
    groups = _col(tail, "batch/groups")
    zv_recent = _col(recent, "signals/groups_zero_variance", lambda r: _num(r.get("batch/groups_dropped")))
    groups_recent = _col(recent, "batch/groups")
    same = int(dropped.get("same_scores") or 0)
    if same:
        total = sum(groups) + same
        share = (sum(zv) + same) / total if total else None
        seen_groups = total
    else:
        share = sum(zv_recent) / sum(groups_recent) if sum(groups_recent) else None
        seen_groups = sum(groups_recent)
    sequences = _col(recent, "batch/sequences")
    fill = _col(recent, "signals/batch_fill")
    entropy_first = _mean(_col(head[:3], "signals/entropy", _entropy_of))
    entropy = _mean(_col(recent, "signals/entropy", _entropy_of))
    tokens_first = _mean(_col(head[:3], "signals/completion_tokens_mean", _tokens_of))
    tokens = _mean(_col(recent, "signals/completion_tokens_mean", _tokens_of))
    rewards_head = _col(head[:width], "reward/mean")
    rewards_tail = _col(tail[-width:], "reward/mean")
    evals = [
        (int(r["step"]), float(r["eval/percent_correct"]))
        for r in [*env_head, *env_tail]
        if isinstance(r.get("step"), int) and _num(r.get("eval/percent_correct")) is not None
    ]
    evals = sorted(dict(evals).items())
    kl = _mean(_col(recent, "signals/kl_start"))
    return {
        "steps": steps,
        "groups_seen": int(seen_groups),
        "zero_variance_share": None if share is None else round(share, 4),
        "groups_dropped_same_scores": same,
        "groups_dropped_too_long": int(dropped.get("too_long") or 0),
        "empty_batches": sum(1 for s in sequences if s == 0),
        "short_batches": sum(1 for f in fill if f < 1.0),
        "recent_steps": len(recent),
        "staleness": _mean(_col(recent, "signals/staleness_mean")),
        "truncated_share": _mean(_col(recent, "signals/truncated_share")),
        "mean_completion_tokens": None if tokens is None else round(tokens, 2),
        "first_completion_tokens": None if tokens_first is None else round(tokens_first, 2),
        "length_drift": round(tokens / tokens_first, 3) if tokens and tokens_first else None,
        "entropy": None if entropy is None else round(entropy, 4),
        "first_entropy": None if entropy_first is None else round(entropy_first, 4),
        "kl_start": kl,  # None: the backend does not report it cheaply (unknown)
        "advantage_spread": _mean(_col(recent, "advantages/std")),
        "reward_first": _mean(rewards_head),
        "reward_last": _mean(rewards_tail),
        "eval_first": evals[0][1] if evals else None,
        "eval_last": evals[-1][1] if evals else None,
        "evals": len(evals),
        "reward_components": _components(env_tail),
        **rollout_signals(rollouts or []),
    }


def _rise(first: float | None, last: float | None) -> float | None:
    return None if first is None or last is None else last - first


def verdict_of(signals: dict[str, Any]) -> tuple[str, list[str]]:
    """(verdict, reasons) from collect_signals' dict (see the module's rule)."""
    s = signals
    reasons: list[str] = []
    steps = s["steps"]
    share = s["zero_variance_share"]
    reward_rise = _rise(s["reward_first"], s["reward_last"])
    eval_rise = _rise(s["eval_first"], s["eval_last"]) if s["evals"] >= 2 else None
    learning = (reward_rise is not None and reward_rise >= RISE) or (eval_rise is not None and eval_rise >= RISE)
    no_signal = _no_signal(s, reasons)
    if no_signal and learning and share is not None and share >= NO_SIGNAL_SHARE and _learned_it(s):
        # the groups stopped differing because the policy now gets them right: the run learned its task
        reasons[-1] = (
            f"then {_pct(share)} of {s['groups_seen']:,} groups scored {_f(_alike_value(s))} alike: it has learned "
            "this task, so later steps teach little; a harder task or the next curriculum level keeps it learning"
        )
        no_signal = False
    suspect = _suspect(s, reward_rise, eval_rise, reasons)
    if not no_signal and share is not None and WARN_ZERO_SHARE <= share < NO_SIGNAL_SHARE:
        identical = s.get("identical_share")
        reasons.append(
            f"{_pct(share)} of groups scored alike: only the rest teach anything; "
            + (
                f"{_pct(identical)} of the last {s['rollout_groups']} groups repeat one completion (entropy "
                f"{_f(s['entropy'])} nats/token): raise temperature so a group's answers can differ"
                if identical is not None and identical >= IDENTICAL_SHARE
                else "a larger group_size or temperature gives a group more chances to differ"
            )
        )
    truncated = s["truncated_share"]
    if truncated is not None and TRUNCATED_WARN <= truncated < TRUNCATED_SUSPECT:
        reasons.append(
            f"{_pct(truncated)} of completions end at the token limit: raise max_token_length (or the "
            "environment's reply limit) or ask for shorter answers"
        )
    if s["staleness"] is not None and s["staleness"] >= STALE_WARN:
        reasons.append(
            f"samples are {s['staleness']:.1f} policy versions old when trained: lower max_batches_offpolicy "
            "or speed up the environment"
        )
    if no_signal:
        return "no_signal", reasons
    if suspect:
        return "suspect", reasons
    if steps < MIN_STEPS:
        reasons.insert(0, f"only {steps} trained step(s): too few to tell (the audit needs {MIN_STEPS})")
        return "unknown", reasons
    if learning:
        reasons.insert(0, _trend_words(s, reward_rise, eval_rise, "rose"))
        return "learning", reasons
    reasons.insert(
        0,
        _trend_words(s, reward_rise, eval_rise, "is flat")
        + ": more steps, a higher learning_rate, or an easier task; check the reward with hermes-rl test-inference",
    )
    return "flat", reasons


def _trend_words(s: dict, reward_rise: float | None, eval_rise: float | None, what: str) -> str:
    text = f"over {s['steps']} steps reward {_f(s['reward_first'])} → {_f(s['reward_last'])}"
    if eval_rise is not None:
        text += f", greedy eval {_f(s['eval_first'])} → {_f(s['eval_last'])} ({s['evals']} evals)"
    return f"{text}: {what}" if what == "rose" else f"{text} {what}"


def _example(ex: dict | None, *, other: bool = False, expected: bool = False) -> str:
    if not ex:
        return ""
    text = f"{ex['prompt']!r} → {ex['completion']!r}"
    if other and ex.get("other") is not None:
        text += f" and {ex['other']!r}"
    text += f" scored {_f(_num(ex.get('reward')))}"
    return text + (f", expected {ex['expected']!r}" if expected and ex.get("expected") is not None else "")


def _alike_value(s: dict) -> float | None:
    """The reward the alike groups share: from the rollouts, else (none recorded) the last steps' reward; None
    where the rollouts show groups alike at different values."""
    value = s.get("alike_value")
    if value is None and (s.get("alike_values") or 0) > 1:
        return None
    return s["reward_last"] if value is None else value


def _eval_gap(s: dict, value: float | None) -> bool:
    """Whether greedy eval is EVAL_GAP or more from the reward the alike groups share."""
    eval_last = s["eval_last"]
    return s["evals"] >= 1 and eval_last is not None and value is not None and abs(eval_last - value) >= EVAL_GAP


def _learned_it(s: dict) -> bool:
    """Whether the alike groups are right answers the scorer rightly pays: whole, not cut, and eval agrees.
    Right answers a scorer pays in part (words around the number: reasoning-gym paid `9 * 5 = 45` 0.90) count
    where they hold the expected answer and greedy eval gets the task right; a partial credit the policy
    settled on while eval stays low does not."""
    value, truncated, hits = _alike_value(s), s["truncated_share"], s.get("expected_hits")
    if value is None or (truncated is not None and truncated >= TRUNCATED_SUSPECT) or _eval_gap(s, value):
        return False
    if value >= 0.95:
        return not (hits is not None and hits < EXPECTED_HITS)
    return (
        value >= LEARNED_PART
        and hits is not None
        and hits >= EXPECTED_HITS
        and s["evals"] >= 1
        and (s["eval_last"] or 0.0) >= LEARNED_EVAL
    )


def _alike_cause(s: dict) -> str:
    """Why a run's groups score alike, and what to do about it, from the signals and the last rollouts."""
    truncated, entropy = s["truncated_share"], s["entropy"]
    ex, evals, eval_last = s.get("example"), s["evals"], s["eval_last"]
    expected = (ex or {}).get("expected")
    value = _alike_value(s)
    if truncated is not None and truncated >= TRUNCATED_SUSPECT:
        return (
            f"{_pct(truncated)} of completions are cut at the token limit "
            f"({_f(s['mean_completion_tokens'], 1)} tokens on average) before they can answer: raise "
            "max_token_length (or the environment's reply limit)"
        )
    identical = s.get("identical_share")
    low_entropy = identical is None and entropy is not None and entropy < LOW_ENTROPY
    # all right and identical is a task too easy: more temperature would only add wrong answers
    if ((identical is not None and identical >= IDENTICAL_SHARE) or low_entropy) and (value or 0) < 0.95:
        seen = (
            f"{_pct(identical)} of the last {s['rollout_groups']} groups repeat one completion"
            + (f" (e.g. {_example(ex, expected=True)})" if ex and ex.get("other") is None else "")
            + f", entropy {_f(entropy)} nats/token"
            if identical is not None
            else f"entropy {_f(entropy)} nats/token (no rollouts recorded to compare)"
        )
        first = s.get("first_entropy")
        right = s.get("identical_right_share")
        if first and first >= LOW_ENTROPY and entropy is not None and entropy < ENTROPY_COLLAPSE * first:
            # the first steps' samples differed: training, not the sampling temperature, made them one answer
            if right is not None and right >= IDENTICAL_SHARE / 2:
                return (
                    f"the policy now answers each prompt one way: {seen}, from {_f(first)} in the first steps; "
                    f"{_pct(right)} of those repeat a right answer, the rest a wrong one it no longer varies: raise "
                    "temperature or group_size so the prompts it gets wrong are tried other ways"
                )
            paid = f" (it pays {_f(value)})" if value else ""
            return (
                f"the policy collapsed onto one answer while training: {seen}, from {_f(first)} in the first "
                f"steps; lower the learning_rate, or stop paying for the answer it settled on{paid}"
            )
        return (
            f"the samples are identical: {seen}; raise temperature (1.0 samples the policy as it is) so a "
            "group's answers can differ"
        )
    distinct = s.get("alike_distinct_share")
    hits = s.get("expected_hits")
    differ = distinct is not None and distinct >= DISTINCT_SHARE
    eval_gap = _eval_gap(s, value)
    if (
        differ
        and value is not None
        # a partial score shared by different answers is the reward ignoring them, unless the expected answer
        # says they are all wrong (format credit alone, say): then it is the case below
        and (
            (0.05 < value < 0.95 and hits is None)
            or eval_gap
            or (hits is not None and value >= 0.95 and hits < EXPECTED_HITS)
        )
    ):
        because = (
            f", though only {_pct(hits)} of them hold the expected answer {expected!r}"
            if hits is not None and value >= 0.95 and hits < EXPECTED_HITS
            else f", while greedy eval is {_f(eval_last)}"
            if eval_gap
            else ""
        )
        return (
            f"the reward does not depend on the completion: {_pct(distinct)} of the alike groups hold different "
            f"completions that all scored {_f(value)} (e.g. {_example(ex, other=True)}){because}; check the reward "
            "function (hermes-rl test-inference --env ENV scores its answers)"
        )
    if value is not None and (value <= 0.05 or (value < 0.95 and hits is not None)):
        scored = f"reward {_f(value)}" if value <= 0.05 else f"each only the partial reward {_f(value)}"
        if eval_gap:
            return (
                f"every sample scores {_f(value)} while greedy eval is {_f(eval_last)}: the reward does not measure "
                "what eval does; check the reward function (hermes-rl test-inference --env ENV)"
            )
        shown = f": e.g. {_example(ex)}" if ex else ""
        if expected is not None:
            shown += f", and the scorer expected {expected!r}"
        if hits is not None and hits >= EXPECTED_HITS:
            return (
                f"every answer is scored wrong ({scored}) though {_pct(hits)} of them hold the expected "
                f"answer{shown}: the answers miss the format the scorer reads; ask for that format in the prompt "
                "or loosen the scorer"
            )
        return (
            f"every answer is wrong ({scored}){shown}: the task is too hard for the model (if the "
            "answers are right but in another format, the prompt must ask for the one the scorer reads); use an "
            "easier task or a lower curriculum level, or a larger model"
        )
    if value is not None and value >= 0.95:
        check = (
            f"; if these different answers are not all right (e.g. {_example(ex, other=True)}), check the reward "
            "function"
            if differ and ex and ex.get("other") is not None and hits is None and not evals
            else ""
        )
        return (
            f"every answer is right (reward {_f(value)}"
            + (f", greedy eval {_f(eval_last)}" if evals else "")
            + f"): the task is too easy now; use a harder task or the next curriculum level{check}"
        )
    if not s.get("rollout_groups") and s["groups_dropped_same_scores"] and not s["steps"]:
        return (
            "the environment dropped these groups before training (ensure_scores_are_not_same), so their answers "
            "are not recorded: see them scored with hermes-rl test-inference --env ENV, or set "
            "ensure_scores_are_not_same=false to train on and record them; a larger group_size or temperature "
            "gives a group more chances to differ"
        )
    if value is None and (s.get("alike_values") or 0) > 1:
        return (
            "each group's answers score the same, but not the same across groups (all right on some prompts, all "
            f"wrong on others; reward {_f(s['reward_last'])}): raise group_size or temperature so a group's "
            "answers can differ"
        )
    return (
        f"each group's answers score the same (reward {_f(value)}): raise group_size or temperature so a "
        "group's answers can differ"
    )


def _no_signal(s: dict, reasons: list[str]) -> bool:
    share = s["zero_variance_share"]
    if share is not None and share >= NO_SIGNAL_SHARE and s["groups_seen"] >= MIN_GROUPS:
        dropped = s["groups_dropped_same_scores"]
        said = f" ({dropped:,} dropped by the environment for it)" if dropped else ""
        reasons.append(
            f"{_pct(share)} of {s['groups_seen']:,} groups scored alike{said}, so GRPO has nothing to learn: "
            + _alike_cause(s)
        )
        return True
    recent = s["recent_steps"]
    if recent >= MIN_GROUPS and s["empty_batches"] >= NO_SIGNAL_SHARE * recent:
        reasons.append(
            f"{s['empty_batches']} of the last {recent} batches had nothing to train (every group dropped): "
            "read hermes-rl logs RUN --process env for why its groups are dropped"
        )
        return True
    return False


def _suspect(s: dict, reward_rise: float | None, eval_rise: float | None, reasons: list[str]) -> bool:
    found = False
    if reward_rise is not None and reward_rise >= RISE and eval_rise is not None and eval_rise <= -EVAL_FALL:
        reasons.append(
            f"reward rose {_f(s['reward_first'])} → {_f(s['reward_last'])} while greedy eval fell "
            f"{_f(s['eval_first'])} → {_f(s['eval_last'])}: the policy learns what the reward pays, not the task; "
            "check which part of the reward pays (reward_components) and tighten it"
        )
        found = True
    truncated = s["truncated_share"]
    if truncated is not None and truncated >= TRUNCATED_SUSPECT:
        reasons.append(
            f"{_pct(truncated)} of completions end at the token limit: scores of cut answers mislead the update; "
            "raise max_token_length (or the environment's reply limit) or ask for shorter answers"
        )
        found = True
    drift = s["length_drift"]
    if drift is not None and drift >= LENGTH_DRIFT_MAX and s["steps"] >= MIN_STEPS:
        reasons.append(
            f"completions grew {drift:.1f}× (from {_f(s['first_completion_tokens'], 1)} to "
            f"{_f(s['mean_completion_tokens'], 1)} tokens): the reward may pay for length; check it"
        )
        found = True
    found |= _dominant_part(s, reward_rise, eval_rise, reasons)
    entropy, first = s["entropy"], s["first_entropy"]
    if (
        entropy is not None
        and first
        and entropy < ENTROPY_COLLAPSE * first
        and entropy < ENTROPY_FLOOR
        and not (reward_rise is not None and reward_rise >= RISE)
    ):
        reasons.append(
            f"entropy collapsed {first:.3f} → {entropy:.3f} nats/token without a reward gain: the policy stopped "
            "exploring; lower the learning_rate or raise the temperature"
        )
        found = True
    return found


def _dominant_part(s: dict, reward_rise: float | None, eval_rise: float | None, reasons: list[str]) -> bool:
    parts = {k: v for k, v in s["reward_components"].items() if v > 0}
    total = sum(parts.values())
    if len(parts) < 2:  # a part that never pays is no part of the reward
        return False
    name, value = max(parts.items(), key=lambda item: item[1])
    share = value / total
    if share < DOMINANT_SHARE:
        return False
    text = ", ".join(f"{k} {v:.2f}" for k, v in sorted(parts.items(), key=lambda item: -item[1]))
    eval_follows = eval_rise is not None and eval_rise >= RISE
    if eval_follows:
        reasons.append(f"reward part {name!r} carries {_pct(share)} of the reward ({text}); greedy eval follows")
        return False
    reasons.append(
        f"reward part {name!r} carries {_pct(share)} of the reward ({text}) while greedy eval "
        + ("does not rise" if eval_rise is not None else "is unknown")
        + f": make sure {name!r} is what you want learned, or lower its weight"
    )
    return True


def audit(
    head: list[dict],
    tail: list[dict],
    env_head: list[dict] = (),  # type: ignore[assignment]
    env_tail: list[dict] = (),  # type: ignore[assignment]
    dropped: dict[str, int] | None = None,
    rollouts: list[dict] | None = None,
) -> dict[str, Any]:
    """{verdict, reasons, signals} of a run (see the module's rule); `rollouts`: its last recorded
    groups (rollouts.jsonl lines), which tell why groups scored alike."""
    signals = collect_signals(list(head), list(tail), list(env_head), list(env_tail), dropped or {}, rollouts)
    verdict, reasons = verdict_of(signals)
    return {"verdict": verdict, "reasons": reasons, "signals": signals}


def headline(result: dict | None) -> str:
    """One line for a listing or a status header: `no_signal: 94 % of groups scored alike ...`."""
    if not result:
        return "audit unknown"
    first = (result.get("reasons") or [""])[0]
    return f"{result.get('verdict')}" + (f": {first}" if first else "")


def signal_summary(signals: dict[str, Any] | None) -> str:
    """The headline signals in one line: `groups alike 94 % · truncated 0 % · 5.2 tokens · entropy 0.61`."""
    s = signals or {}
    parts = [
        f"groups alike {_pct(s.get('zero_variance_share'))}",
        f"truncated {_pct(s.get('truncated_share'))}",
        f"{_f(s.get('mean_completion_tokens'), 1)} tokens"
        + (f" ({s['length_drift']:.1f}× first)" if s.get("length_drift") else ""),
        f"entropy {_f(s.get('entropy'))}",
        f"adv spread {_f(s.get('advantage_spread'), 3)}",
    ]
    if s.get("staleness") is not None:
        parts.append(f"staleness {s['staleness']:.1f}")
    parts.append(f"KL {_f(s.get('kl_start'), 3)}")
    parts.extend(f"{name} {value:.2f}" for name, value in (s.get("reward_components") or {}).items())
    return " · ".join(parts)


def audit_lines(result: dict | None) -> list[str]:
    """What `hermes-rl status` prints: the verdict, the signals in a line, one line per reason."""
    if not result:
        return ["audit: unknown"]
    return [
        f"audit: {result.get('verdict')}  ({signal_summary(result.get('signals'))})",
        *(f"  - {reason}" for reason in result.get("reasons") or []),
    ]
