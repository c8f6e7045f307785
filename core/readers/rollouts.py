"""A run's recorded rollouts (rollouts.jsonl, written by the trainer): what the policy generated, by step.

A line is one scored group: {"step", "time", "group", "prompt", "completions": [{"text", "reward",
"advantage", "tokens", "finish"}], "sampled"}; a {"capped": true, "step"} line says recording stopped
there (the file reached its bound). `RunRollouts` follows the file incrementally for a live view (a
summary per step, every group's byte offsets, the recent steps' groups parsed); `read_rollouts` and
`sample_completions` answer the CLI and the agent reports, the latter from the file's tail only.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..base.errors import BadInput, NotFound
from ..base.fsutil import iter_jsonl, open_regular, parse_jsonl_line
from ..base.paths import run_dir
from .env_ids import env_names
from .metrics import JsonlTail

ROLLOUTS_FILE = "rollouts.jsonl"
MAX_GROUPS = 100_000  # groups a live reader indexes, 16 bytes each (the oldest steps go first)
PARSED_GROUPS = 1_000  # groups a live reader keeps parsed; it reads any other step back by offset
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
        "env_id": row.get("env_id") if isinstance(row.get("env_id"), int) else None,
        "environment": None,  # named from the run's env_ids.jsonl by the reader
    }


class StepSummary:
    """What a steps list shows of one step, kept up to date as its groups arrive (no re-reading)."""

    __slots__ = ("groups", "completions", "scored", "total", "best", "worst", "zero", "positive", "version")

    def __init__(self) -> None:
        self.groups = self.completions = self.scored = self.zero = self.positive = 0
        self.total = 0.0
        self.best: float | None = None
        self.worst: float | None = None
        self.version = 0  # the reader's version when this step last changed

    def add(self, group: dict, version: int) -> None:
        self.groups += 1
        self.version = version
        for item in group["completions"]:
            self.completions += 1
            reward = item["reward"]
            if reward is None:
                continue
            self.scored += 1
            self.total += reward
            self.zero += reward == 0
            self.positive += reward > 0
            self.best = reward if self.best is None else max(self.best, reward)
            self.worst = reward if self.worst is None else min(self.worst, reward)

    @property
    def mean(self) -> float | None:
        return self.total / self.scored if self.scored else None


class RunRollouts:
    """The rollouts of one run folder, read incrementally and lazily, for a live view.

    Each line is parsed once, as it is appended: its step's summary (StepSummary) is updated and its
    byte span indexed; the parsed groups of the most recent steps are kept (at most `parsed_groups`
    groups, least recently used steps go first), any other step is read back from the file by its
    offsets when asked for (`groups`). The index covers the newest `max_groups` groups (the oldest
    steps go first). Safe to poll from one thread while another reads."""

    def __init__(
        self,
        folder: str | os.PathLike,
        max_groups: int = MAX_GROUPS,
        tail_bytes: int | None = None,
        parsed_groups: int = PARSED_GROUPS,
    ):
        self.tail = JsonlTail(Path(folder) / ROLLOUTS_FILE, tail_bytes)
        self.max_groups = max(1, max_groups)
        self.parsed_groups = max(1, parsed_groups)
        self.capped_at: int | None = None  # the step recording stopped at, when the file hit its bound
        self.version = 0
        self.reads = 0  # steps read back from the file (their groups were no longer kept parsed)
        self._spans: dict[int, tuple[array, array]] = {}  # step -> (line starts, line lengths)
        self._summaries: dict[int, StepSummary] = {}
        self._steps: list[int] = []  # ascending
        self._parsed: OrderedDict[int, list[dict]] = OrderedDict()  # step -> all its groups, LRU order
        self._parsed_count = 0
        self._count = 0
        self._resets = 0
        self._lock = threading.RLock()
        self._folder = Path(folder)
        self._env_names: dict[int, str] = {}

    def poll(self) -> int:
        """Read what was appended; returns how many groups arrived."""
        rows = self.tail.poll_spans()
        with self._lock:
            if self.tail.resets != self._resets:
                self._resets = self.tail.resets
                self._spans.clear()
                self._summaries.clear()
                self._steps.clear()
                self._parsed.clear()
                self._parsed_count = self._count = 0
                self.capped_at = None
                self.version += 1
            added = 0
            for start, end, row in rows:
                if row.get("capped") is True and isinstance(row.get("step"), int):
                    self.capped_at = row["step"]
                    continue
                group = self._named(_group(row))
                if group is None:
                    continue
                if not added:
                    self.version += 1  # one new version per poll that brought groups
                self._add(group, start, end - start)
                added += 1
            if added:
                self._count += added
                while self._count > self.max_groups and len(self._steps) > 1:
                    self._drop(self._steps[0])
                self._trim_parsed(keep=None)
            return added

    def _named(self, group: dict | None) -> dict | None:
        """The group with its environment's name (env_ids.jsonl is read again when an id is new to us)."""
        if group is None or group["env_id"] is None:
            return group
        if group["env_id"] not in self._env_names:
            self._env_names = env_names(self._folder)
        group["environment"] = self._env_names.get(group["env_id"])
        return group

    def environments(self) -> list[str]:
        """The environments whose groups were seen, by name."""
        return sorted(set(self._env_names.values()))

    def _add(self, group: dict, start: int, length: int) -> None:
        step = group["step"]
        spans = self._spans.get(step)
        if spans is None:
            spans = self._spans[step] = (array("q"), array("q"))
            self._summaries[step] = StepSummary()
            if not self._steps or step > self._steps[-1]:
                self._steps.append(step)
            else:
                bisect.insort(self._steps, step)
            self._parsed[step] = []  # a new step: every group of it is seen here
        spans[0].append(start)
        spans[1].append(length)
        self._summaries[step].add(group, self.version)
        parsed = self._parsed.get(step)
        if parsed is not None:  # (a step no longer kept parsed is read back whole when asked for)
            parsed.append(group)
            self._parsed.move_to_end(step)
            self._parsed_count += 1

    def _drop(self, step: int) -> None:
        self._count -= len(self._spans.pop(step)[0])
        del self._summaries[step]
        self._steps.remove(step)
        self._parsed_count -= len(self._parsed.pop(step, ()))

    def _trim_parsed(self, keep: int | None) -> None:
        while self._parsed_count > self.parsed_groups and len(self._parsed) > 1:
            step = next(iter(self._parsed))
            if step == keep:
                self._parsed.move_to_end(step)
                continue
            self._parsed_count -= len(self._parsed.pop(step))

    def steps(self) -> list[int]:
        """Recorded steps, newest first."""
        with self._lock:
            return self._steps[::-1]

    def summary(self, step: int) -> StepSummary | None:
        return self._summaries.get(step)

    def groups(self, step: int, keep: bool = True) -> list[dict]:
        """The groups of a step, in file order: kept parsed, or read back from the file by offset (and
        then kept, as the most recently used, unless `keep` is False: a scan over every step)."""
        with self._lock:
            parsed = self._parsed.get(step)
            if parsed is not None:
                if keep:
                    self._parsed.move_to_end(step)
                return parsed
            spans = self._spans.get(step)
            if spans is None:
                return []
            groups = self._read_back(step, spans)
            self.reads += 1
            if not keep:
                return groups
            self._parsed[step] = groups
            self._parsed_count += len(groups)
            self._trim_parsed(keep=step)
            return groups

    def _read_back(self, step: int, spans: tuple[array, array]) -> list[dict]:
        groups = []
        try:
            with open_regular(self.tail.path) as handle:
                for start, length in zip(*spans):
                    handle.seek(start)
                    row = parse_jsonl_line(handle.read(length))
                    group = self._named(_group(row)) if row is not None else None
                    if group is not None and group["step"] == step:  # (else the file was replaced meanwhile)
                        groups.append(group)
        except OSError:
            pass
        return groups

    def latest_step(self) -> int | None:
        return self._steps[-1] if self._steps else None

    def first_step(self) -> int | None:
        return self._steps[0] if self._steps else None

    def nearest_step(self, step: int) -> int | None:
        """The recorded step closest to `step` (the later one on a tie), None when none is recorded."""
        with self._lock:
            steps = self._steps
            if not steps:
                return None
            index = bisect.bisect_left(steps, step)
            candidates = steps[max(0, index - 1) : index + 1]
            return min(candidates, key=lambda s: (abs(s - step), -s))


def rollouts_path(run_id: str) -> Path:
    return run_dir(run_id) / ROLLOUTS_FILE


def _flatten(groups: list[dict], chars: int | None) -> list[dict]:
    out = []
    for group in groups:
        where = {"environment": group["environment"]} if group["environment"] else {}
        for index, item in enumerate(group["completions"]):
            text = item["text"]
            prompt = group["prompt"]
            if chars is not None:
                text = text if len(text) <= chars else text[:chars] + "…"
                prompt = prompt if len(prompt) <= chars else prompt[:chars] + "…"
            out.append({"step": group["step"], "group": group["group"], "index": index, "prompt": prompt,
                        **where, **item, "text": text})  # fmt: skip
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
    environment: str | None = None,
) -> dict:
    """The completions of one recorded step (the latest by default), best or worst first when asked,
    at most `limit`, texts cut at `chars`; with `environment`, only that environment's groups (a run
    training several). NotFound when the run recorded no rollouts (or not that step, or environment)."""
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
    names = env_names(run_dir(run_id))
    for _end, row in iter_jsonl(path):
        if row.get("capped") is True:
            capped_at = row.get("step")
            continue
        group = _group(row)
        if group is None:
            continue
        group["environment"] = names.get(group["env_id"]) if group["env_id"] is not None else None
        if environment is not None and group["environment"] != environment:
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
    if first is None and environment is not None:
        known = ", ".join(sorted(set(names.values()))) or "none named yet"
        raise NotFound(f"run {run_id} recorded no rollouts of environment {environment!r}", hint=f"its: {known}")
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
