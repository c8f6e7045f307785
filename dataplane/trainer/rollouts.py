"""The scored groups the trainer takes from /batch, written to the run folder as rollouts.jsonl.

One line per group: {"step", "time", "group", "prompt", "completions": [{"text", "reward", "advantage",
"tokens", "finish"}], "sampled"}. `step` is the step the group trains (the metrics row of that step);
`advantage` is the GRPO advantage the trainer uses (reward minus the group's mean); `tokens` counts the
completion's tokens; `finish` is "stop", "length" or null when it cannot be told; `expected` (when the
environment puts it in the group's `group_overrides`) is the answer its scorer expected.

Nothing here runs on the training step: `record()` hands the batch to one writer thread through a
small queue and returns (a batch that finds the queue full is skipped and counted, never waited on).
The writer decodes with the run's tokenizer.

Bound: every group is kept while the file is under FULL_BYTES (16 MB: a short local run keeps all of
it); past that, each step keeps SAMPLE_GROUPS groups drawn by a step-seeded RNG (the same groups on
every rerun of the same data) plus the groups holding the step's best and worst completion; at
MAX_BYTES (64 MB) one {"capped": true, "step"} line is written and recording stops. Texts are cut at
TEXT_CHARS characters.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import threading
import time
from pathlib import Path

from hermes_rl.core.base.fsutil import open_regular
from hermes_rl.core.readers.rollouts import ROLLOUTS_FILE

log = logging.getLogger("trainer.rollouts")

__all__ = ["ROLLOUTS_FILE", "RolloutRecorder", "select_groups"]

FULL_BYTES = 16 << 20
MAX_BYTES = 64 << 20
SAMPLE_GROUPS = 2
TEXT_CHARS = 4000
PROMPT_MASK = -100


def select_groups(step: int, groups: list[dict], sample: int) -> list[int]:
    """Indices of the groups a sampled step keeps: `sample` drawn by a step-seeded RNG, plus the group
    with the step's highest score and the one with the lowest (in batch order, no repeats)."""
    scored = [(i, [float(s) for s in g.get("scores") or []]) for i, g in enumerate(groups)]
    scored = [(i, s) for i, s in scored if s]
    if not scored:
        return []
    keep = set(random.Random(step).sample([i for i, _ in scored], min(sample, len(scored))))
    keep.add(max(scored, key=lambda item: max(item[1]))[0])
    keep.add(min(scored, key=lambda item: min(item[1]))[0])
    return sorted(keep)


def _prompt_length(masks: list[int]) -> int:
    """Tokens before the first trained one: the prompt the episode started from."""
    return next((i for i, m in enumerate(masks) if m != PROMPT_MASK), len(masks))


def _eos_ids(tokenizer) -> set[int]:
    ids = getattr(tokenizer, "eos_token_id", None)
    if isinstance(ids, int):
        return {ids}
    if isinstance(ids, (list, tuple)):
        return {i for i in ids if isinstance(i, int)}
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos:
        try:
            encoded = tokenizer.encode(eos, add_special_tokens=False)
        except Exception:
            return set()
        if len(encoded) == 1:
            return {int(encoded[0])}
    return set()


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "…"


class RolloutRecorder:
    """Writes scored groups to `path` from a background thread. `finish_reason(tokens)` may name the
    finish reason the trainer's inference server saw for a completion's tokens (None when unknown)."""

    def __init__(
        self,
        path: str | os.PathLike,
        tokenizer,
        *,
        finish_reason=None,
        full_bytes: int = FULL_BYTES,
        max_bytes: int = MAX_BYTES,
        sample_groups: int = SAMPLE_GROUPS,
        queue_size: int = 8,
    ):
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.finish_reason = finish_reason
        self.full_bytes = full_bytes
        self.max_bytes = max_bytes
        self.sample_groups = sample_groups
        self.skipped_batches = 0  # batches that found the writer busy
        self.written_groups = 0
        self.capped = False
        self._eos = _eos_ids(tokenizer)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._size = self.path.stat().st_size if self.path.exists() else 0
        self._thread = threading.Thread(target=self._run, name="rollouts", daemon=True)
        self._thread.start()

    def record(self, step: int, groups: list[dict]) -> None:
        """Queue one step's groups for writing; returns at once."""
        if self.capped:
            return
        try:
            self._queue.put_nowait((step, time.time(), groups))
        except queue.Full:
            self.skipped_batches += 1

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (within `timeout`) and stop the writer."""
        try:
            self._queue.put((None, 0.0, None), timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout=timeout)

    # -- the writer thread --------------------------------------------------------------------------
    def _run(self) -> None:
        handle = None
        try:
            while True:
                step, when, groups = self._queue.get()
                if groups is None:
                    return
                if self.capped:
                    continue
                if handle is None:
                    handle = open_regular(self.path, "a")
                handle.write(self._lines(step, when, groups))
                handle.flush()
        except Exception as exc:  # rollouts are a view of training, never a reason to stop it
            self.capped = True
            log.warning("rollout recording stopped: %s: %s", type(exc).__name__, exc)
        finally:
            if handle is not None:
                handle.close()

    def _lines(self, step: int, when: float, groups: list[dict]) -> str:
        sampled = self._size >= self.full_bytes
        indices = select_groups(step, groups, self.sample_groups) if sampled else range(len(groups))
        out = []
        for index in indices:
            record = self.group_record(step, when, index, groups[index])
            if record is None:
                continue
            record["sampled"] = sampled
            line = json.dumps(record, ensure_ascii=False) + "\n"
            if self._size + len(line) > self.max_bytes:
                self.capped = True
                line = json.dumps({"capped": True, "step": step, "time": when}) + "\n"
                out.append(line)
                self._size += len(line)
                log.info("rollouts.jsonl reached %d MB: recording stops at step %d", self.max_bytes >> 20, step)
                break
            out.append(line)
            self._size += len(line)
            self.written_groups += 1
        return "".join(out)

    def group_record(self, step: int, when: float, index: int, group: dict) -> dict | None:
        """One group as a rollouts.jsonl record (None for a group without usable sequences)."""
        tokens_list = group.get("tokens") or []
        masks_list = group.get("masks") or []
        scores = [float(s) for s in group.get("scores") or []]
        if not tokens_list or len(scores) != len(tokens_list) or len(masks_list) != len(tokens_list):
            return None
        mean = sum(scores) / len(scores)
        overrides = group.get("overrides") or [None] * len(tokens_list)
        prompt_ids = tokens_list[0][: _prompt_length(masks_list[0])]
        completions = []
        for tokens, masks, score, override in zip(tokens_list, masks_list, scores, overrides):
            ids = [int(t) for t, m in zip(tokens, masks) if m != PROMPT_MASK]
            episode = [int(t) for t in tokens[_prompt_length(masks) :]]
            # A multi-turn episode holds the environment's turns (untrained) between the policy's: the text
            # is the whole episode, with the chat template's markers so a reader sees who said what.
            multi_turn = len(episode) != len(ids)
            completions.append(
                {
                    "text": _cut(self.tokenizer.decode(episode, skip_special_tokens=not multi_turn)),
                    "reward": score,
                    "advantage": score - mean,
                    "tokens": len(ids),
                    "finish": self._finish(ids, override),
                }
            )
        record = {
            "step": step,
            "time": when,
            "group": index,
            "prompt": _cut(self.tokenizer.decode(prompt_ids, skip_special_tokens=False)),
            "completions": completions,
        }
        shared = group.get("group_overrides")
        if isinstance(shared, dict) and isinstance(shared.get("expected"), (str, int, float)):
            record["expected"] = _cut(str(shared["expected"]))  # the answer the environment's scorer expected
        if isinstance(group.get("env_id"), int):
            record["env_id"] = group["env_id"]  # which registered environment made it (run's env_ids.jsonl)
        return record

    def _finish(self, ids: list[int], override) -> str | None:
        if isinstance(override, dict) and isinstance(override.get("finish_reason"), str):
            return override["finish_reason"]
        if self.finish_reason is not None:
            reason = self.finish_reason(ids)
            if reason:
                return reason
        if ids and ids[-1] in self._eos:
            return "stop"
        return None
