"""The worker's running sample batch (continuous batching): sample requests for one set of weights
decode together, a request that arrives while they decode joins at the next step (if it fits the
batch's rows and KV-cache budget), and each request is answered as soon as its last sample finishes."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from .decoding import Decoding, SampleResult, SampleSpec
from .engine import Adapter, CausalLM, adapter_key
from .sample_request import SAMPLE_CACHE_BYTES, cache_bytes

SAMPLE_BATCH_ROWS = 512  # the most sequences one batch decodes at a time


def weights_key(adapter: Adapter | None, scale: float) -> Hashable:
    """Equal for requests that sample the same weights: the base model, or the same adapter (adapter_key)."""
    return None if adapter is None else adapter_key(adapter, scale)


@dataclass
class _Waiting:
    token: Any  # the caller's handle for the request (the worker's job)
    sampler: Any
    spec: SampleSpec
    cache_bytes: int


class SampleBatch:
    """One Decoding and the requests in it. `admit` says whether a request may join (and counts it in);
    `add` prefills the admitted ones; `step` decodes one token and returns the requests it finished,
    each with `answer(sampler, spec, result)`'s value."""

    def __init__(
        self,
        lm: CausalLM,
        key: Hashable,
        adapter: Adapter | None,
        scale: float,
        key_of: Callable[[Any], Hashable],
        answer: Callable[[Any, SampleSpec, SampleResult], Any],
        decode: Callable[[list[int]], str] | None,
    ):
        with torch.inference_mode():
            weights = lm.w if adapter is None else lm.merged_weights(adapter, scale)
        self.lm, self.key, self.key_of, self.answer = lm, key, key_of, answer
        self.adapter = adapter  # held, so the ids in `key` stay this adapter's
        self.decoding = Decoding(lm, weights, decode)
        self.waiting: dict[int, _Waiting] = {}
        self.planned_rows = 0  # rows admitted, decoding or about to
        self.planned_bytes = 0
        self.joined = 0  # requests that joined after the first step
        self.most_rows = 0

    @property
    def rows(self) -> int:
        return self.decoding.rows

    def admit(self, sampler: Any, spec: SampleSpec) -> bool:
        """Whether this request samples the same weights and fits beside those admitted (the first always
        fits); if so it is counted in, to be passed to `add`."""
        need = cache_bytes(spec, self.lm)
        if self.planned_rows and (
            self.planned_rows + spec.num_samples > SAMPLE_BATCH_ROWS or self.planned_bytes + need > SAMPLE_CACHE_BYTES
        ):
            return False
        try:
            same = self.key_of(sampler) == self.key
        except Exception:  # (a checkpoint that cannot be read) it runs in a batch of its own, and fails there
            return False
        if not same:
            return False
        self.planned_rows += spec.num_samples
        self.planned_bytes += need
        return True

    def add(self, items: list[tuple[Any, Any, SampleSpec]]) -> None:
        """Prefill admitted requests (token, sampler, spec) into the batch; if that fails they are not in it."""
        try:
            tickets = self.decoding.add([spec for _, _, spec in items])
        except BaseException:
            for _, _, spec in items:
                self._release(spec, cache_bytes(spec, self.lm))
            raise
        if self.decoding.steps:
            self.joined += len(items)
        for ticket, (token, sampler, spec) in zip(tickets, items, strict=True):
            self.waiting[ticket] = _Waiting(token, sampler, spec, cache_bytes(spec, self.lm))
        self.most_rows = max(self.most_rows, self.rows)

    def step(self) -> list[tuple[Any, Any]]:
        """One decoding step; (token, answer) for each request it finished."""
        done = []
        for ticket in self.decoding.step():
            waiting = self.waiting.pop(ticket)
            self._release(waiting.spec, waiting.cache_bytes)
            result = self.decoding.take(ticket)
            done.append((waiting.token, self.answer(waiting.sampler, waiting.spec, result)))
        return done

    def tokens(self) -> list[Any]:
        """The tokens of every request still in the batch."""
        return [waiting.token for waiting in self.waiting.values()]

    def _release(self, spec: SampleSpec, need: int) -> None:
        self.planned_rows -= spec.num_samples
        self.planned_bytes -= need
