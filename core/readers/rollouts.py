"""A run's recorded rollouts (rollouts.jsonl, written by the trainer): what the policy generated, by step.

A line is one scored group: {"step", "time", "group", "prompt", "completions": [{"text", "reward",
"advantage", "tokens", "finish"}], "sampled"}; a {"capped": true, "step"} line says recording stopped
there (the file reached its bound). `RunRollouts` follows the file incrementally for a live view and
keeps the newest MAX_GROUPS groups; `read_rollouts` and `sample_completions` answer the CLI and the
agent reports, the latter from the file's tail only.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.fsutil import iter_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.readers.metrics import JsonlTail

ROLLOUTS_FILE = "rollouts.jsonl"
MAX_GROUPS = 5_000  # groups a live reader keeps (the oldest steps go first)
SAMPLE_TAIL_BYTES = 1 << 20  # what a report reads to find the latest step
ORDERS = ("best", "worst")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _group(row: dict) -> dict | None:
    """A well-formed group record (numbers checked, completions a list of dicts), else None."""
    step = row.get("step")
    completions = row.get("completions")
    if isinstance(step, bool) or not isinstance(step, int) or not isinstance(completions, list):
        return None
    clean = []
    for item in completions:
        if not isinstance(item, dict):
            continue
        clean.append(
            {
                "text": str(item.get("text") or ""),
                "reward": _number(item.get("reward")),
                "advantage": _number(item.get("advantage")),
                "tokens": item.get("tokens") if isinstance(item.get("tokens"), int) else None,
                "finish": item.get("finish") if isinstance(item.get("finish"), str) else None,
            }
        )
    return {
        "step": step,
        "time": _number(row.get("time")),
        "group": row.get("group") if isinstance(row.get("group"), int) else None,
        "prompt": str(row.get("prompt") or ""),
        "completions": clean,
        "sampled": bool(row.get("sampled")),
    }


class RunRollouts:
    """The rollouts of one run folder, read incrementally: groups by step, newest steps kept."""

    def __init__(self, folder: str | os.PathLike, max_groups: int = MAX_GROUPS, tail_bytes: int | None = None):
        self.tail = JsonlTail(Path(folder) / ROLLOUTS_FILE, tail_bytes)
        self.max_groups = max(1, max_groups)
        self.by_step: dict[int, list[dict]] = {}
        self.capped_at: int | None = None  # the step recording stopped at, when the file hit its bound
        self.version = 0
        self._count = 0
        self._resets = 0

    def poll(self) -> int:
        """Read what was appended; returns how many groups arrived."""
        rows = self.tail.poll()
        if self.tail.resets != self._resets:
            self._resets = self.tail.resets
            self.by_step.clear()
            self._count = 0
            self.capped_at = None
            self.version += 1
        added = 0
        for row in rows:
            if row.get("capped") is True and isinstance(row.get("step"), int):
                self.capped_at = row["step"]
                continue
            group = _group(row)
            if group is None:
                continue
            self.by_step.setdefault(group["step"], []).append(group)
            added += 1
        if added:
            self._count += added
            while self._count > self.max_groups and len(self.by_step) > 1:
                self._count -= len(self.by_step.pop(min(self.by_step)))
            self.version += 1
        return added

    def steps(self) -> list[int]:
        """Recorded steps, newest first."""
        return sorted(self.by_step, reverse=True)

    def groups(self, step: int) -> list[dict]:
        return self.by_step.get(step, [])

    def latest_step(self) -> int | None:
        return max(self.by_step) if self.by_step else None


def rollouts_path(run_id: str) -> Path:
    return run_dir(run_id) / ROLLOUTS_FILE


def _flatten(groups: list[dict], chars: int | None) -> list[dict]:
    out = []
    for group in groups:
        for index, item in enumerate(group["completions"]):
            text = item["text"]
            prompt = group["prompt"]
            if chars is not None:
                text = text if len(text) <= chars else text[:chars] + "…"
                prompt = prompt if len(prompt) <= chars else prompt[:chars] + "…"
            out.append({"step": group["step"], "group": group["group"], "index": index, "prompt": prompt,
                        **item, "text": text})  # fmt: skip
    return out


def _ordered(completions: list[dict], order: str | None) -> list[dict]:
    if order is None:
        return completions
    low = float("-inf") if order == "best" else float("inf")
    key = [(c["reward"] if c["reward"] is not None else low) for c in completions]
    pairs = sorted(zip(key, range(len(completions))), key=lambda p: p[0], reverse=order == "best")
    return [completions[i] for _, i in pairs]


def read_rollouts(
    run_id: str,
    *,
    step: int | None = None,
    order: str | None = None,
    limit: int | None = None,
    chars: int | None = None,
) -> dict:
    """The completions of one recorded step (the latest by default), best or worst first when asked,
    at most `limit`, texts cut at `chars`. NotFound when the run recorded no rollouts (or not that step)."""
    if order is not None and order not in ORDERS:
        raise BadInput(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if limit is not None and limit < 1:
        raise BadInput(f"limit must be at least 1, got {limit}")
    path = rollouts_path(run_id)
    if not path.exists():
        raise NotFound(
            f"run {run_id} has no rollouts.jsonl",
            hint="rollouts are recorded by the trainer from its first step; an older run has none",
        )
    first = last = None
    capped_at = None
    groups: list[dict] = []
    for _end, row in iter_jsonl(path):
        if row.get("capped") is True:
            capped_at = row.get("step")
            continue
        group = _group(row)
        if group is None:
            continue
        s = group["step"]
        first = s if first is None else min(first, s)
        if step is None:
            if last is None or s > last:
                groups = []
            if last is None or s >= last:
                groups.append(group)
        elif s == step:
            groups.append(group)
        last = s if last is None else max(last, s)
    if first is None:
        raise NotFound(f"run {run_id} has recorded no rollouts yet", hint="they appear with the first trained step")
    if step is not None and not groups:
        raise NotFound(
            f"run {run_id} recorded no rollouts at step {step}",
            hint=f"recorded steps run from {first} to {last}; past the file's bound only some steps keep groups",
        )
    completions = _ordered(_flatten(groups, chars), order)
    if limit is not None:
        completions = completions[:limit]
    return {
        "run_id": run_id,
        "step": groups[0]["step"],
        "first_step": first,
        "last_step": last,
        "capped_at_step": capped_at,
        "groups": len(groups),
        "completions": completions,
    }


def sample_completions(run_id: str, per_side: int = 2, chars: int = 160) -> dict | None:
    """The best and worst `per_side` completions of the latest recorded step, texts cut at `chars`,
    read from the file's last MB; None when the run has recorded none."""
    reader = RunRollouts(run_dir(run_id), tail_bytes=SAMPLE_TAIL_BYTES)
    try:
        reader.poll()
    except OSError:
        return None
    step = reader.latest_step()
    if step is None:
        return None
    completions = _flatten(reader.groups(step), chars)

    def brief(item: dict) -> dict:
        return {k: item[k] for k in ("group", "prompt", "text", "reward", "advantage", "finish")}

    best = _ordered(completions, "best")[:per_side]
    worst = _ordered(completions, "worst")[:per_side]
    rewards = [c["reward"] for c in completions if c["reward"] is not None]
    return {
        "step": step,
        "completions": len(completions),
        "zero_reward": sum(1 for r in rewards if r == 0),
        "best": [brief(c) for c in best],
        "worst": [brief(c) for c in worst],
    }
