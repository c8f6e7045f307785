"""Sampling on the local engine: a running decode batch that requests join and finished rows leave.

A `Decoding` holds one set of weights (the base model, or one adapter merged into it) and the rows it
decodes. `add` prefills each new prompt once (its samples share the prompt's keys and values, see
DecodeCache) and appends its rows; `step` draws one token for every live row, lets the rows that
finished leave, and runs one forward for the rest. The server's worker adds the sample requests that
arrive while a batch decodes between two steps (continuous batching: worker.py, batch.py), so one read
of the weights serves every request in flight; `sample` runs a fixed list of requests to the end.

Tokens are drawn from the temperature-scaled, top-k/top-p truncated distribution, but every logprob
returned (of the sampled token and its top-k) is the untempered model's, as compute_logprobs and the
training forward pass report it: an importance ratio is 1 on-policy at any temperature
(docs/tinker_local.md, "Logprobs and temperature"). A request with a seed draws from a generator of
its own, so its samples do not depend on the requests it shares a batch with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import native_decode
from .engine import Adapter, CausalLM, KVCache

NEG_INF = float("-inf")
DRAW_BLOCK = 256  # tokens per block of the two-level inverse-CDF draw (_draw)


@dataclass(frozen=True)
class SampleSpec:
    """One prompt to complete `num_samples` times."""

    prompt: list[int]
    num_samples: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    prompt_logprobs: bool = False
    prompt_logprobs_last_n: int | None = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    # [len(prompt) - 1, K] token ids to score at prompt positions 1.. (-1 = nothing requested)
    target_prompt_ids: tuple[tuple[int, ...], ...] | None = None
    target_prompt_csr: tuple[list[int], list[int]] | None = None  # (crow, cols) when the request was sparse
    prompt_alt_tokens_k: int = 0  # draws from the next-token distribution at prompt positions 1..


@dataclass
class SampledSeq:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    topk: list[tuple[list[int], list[float]]] = field(default_factory=list)
    stop_reason: str = "length"  # "stop" | "length"


@dataclass
class SampleResult:
    sequences: list[SampledSeq]
    prompt_logprobs: list[float] | None = None  # NaN where not scored (always position 0)
    topk_prompt: list[tuple[list[int], list[float]]] | None = None
    target_prompt: list[list[float]] | None = None  # NaN where the id was -1
    alt_tokens: tuple[list[list[int]], list[list[float]]] | None = None  # (ids, logprobs), [len(prompt)-1, k]


class DecodeCache:
    """The keys and values a decoding step attends to, and its attention, for one-token queries.

    Each prompt's keys/values are kept once (the prefix, left-padded to the widest prompt), shared by
    all its samples; each row's generated tokens have their own (the suffix). A step scores both: the
    prefix as one batched query of all the rows of a prompt against its one copy (a group of 8 reads its
    200-token prompt once, not 8 times), the suffix row by row; one softmax runs over each row's scores.
    Explicit `q @ kᵀ → softmax → @ v`, all in float32 (exact for the bf16 keys a bf16 model writes):
    torch's SDPA on CPU picks its flash kernel, built for long queries, which took ~3.6x the CPU on
    these shapes, and bf16 scores moved logprobs by up to 0.02 nat.

    Prompts and rows join between steps (`join`): every row writes its step's key at the same suffix
    index (`length`), so a row that joined later masks the suffix before its `start`. Rows stay in
    prompt order (a joining prompt is numbered after every other).
    """

    def __init__(self, lm: CausalLM):
        self.n_kv, self.groups, self.head_dim = lm.n_kv, lm.n_heads // lm.n_kv, lm.head_dim
        self.n_layers, self.device = lm.n_layers, lm.device
        self.scale = 1.0 / math.sqrt(lm.head_dim)
        self.prefix_k: list[torch.Tensor] = []  # per layer (prompts, kv heads, width, head dim), float32
        self.prefix_v: list[torch.Tensor] = []
        self.prompt_lengths = torch.zeros(0, dtype=torch.long)  # per prompt (its keys end at `width`)
        self.prefix_bias: torch.Tensor | None = None  # -inf on each prompt's left padding
        self.suffix_k: list[torch.Tensor] = []  # per layer (rows, kv heads, capacity, head dim), float32
        self.suffix_v: list[torch.Tensor] = []
        self.starts = torch.zeros(0, dtype=torch.long)  # per row: the suffix index its own tokens start at
        self.suffix_bias: torch.Tensor | None = None  # this step's -inf before each row's start
        self.row_spec = torch.zeros(0, dtype=torch.long)  # per row: its prompt
        self.length = 0  # the suffix index the next step writes

    @property
    def width(self) -> int:
        return self.prefix_k[0].shape[2] if self.prefix_k else 0

    @property
    def capacity(self) -> int:
        return self.suffix_k[0].shape[2] if self.suffix_k else 0

    def join(self, prefix: KVCache, lengths: torch.Tensor, row_spec: torch.Tensor, room: int) -> None:
        """Add prompts (their keys/values left-padded in `prefix`, and their lengths) and their rows
        (`row_spec`: each row's prompt among them, in prompt order), which write their first key at the
        next step; `room`: the most keys a new row will write."""
        width = max(self.width, prefix.capacity)

        def widened(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.shape[2] == width:
                return tensor
            pad = tensor.new_zeros(tensor.shape[0], tensor.shape[1], width - tensor.shape[2], tensor.shape[3])
            return torch.cat((pad, tensor), dim=2)

        prompts = self.prompt_lengths.shape[0]
        first = not self.prefix_k
        for layer in range(self.n_layers):
            keys, values = widened(prefix.keys[layer].float()), widened(prefix.values[layer].float())
            if first:
                self.prefix_k.append(keys)
                self.prefix_v.append(values)
            else:
                self.prefix_k[layer] = torch.cat((widened(self.prefix_k[layer]), keys))
                self.prefix_v[layer] = torch.cat((widened(self.prefix_v[layer]), values))
        self.prompt_lengths = torch.cat((self.prompt_lengths, lengths))
        self.reserve(self.length + room)
        shape = (len(row_spec), self.n_kv, max(self.capacity, self.length + room, 1), self.head_dim)
        for group in (self.suffix_k, self.suffix_v):
            fresh = [torch.zeros(shape, device=self.device) for _ in range(self.n_layers)]
            group[:] = [torch.cat((old, new)) for old, new in zip(group, fresh, strict=True)] if group else fresh
        self.starts = torch.cat((self.starts, torch.full((len(row_spec),), self.length, dtype=torch.long)))
        self._layout(torch.cat((self.row_spec, row_spec + prompts)))

    def reserve(self, need: int) -> None:
        """Room for suffix indices below `need`: first by dropping the indices before every row's start,
        then by doubling."""
        capacity = self.capacity
        if need <= capacity or not self.suffix_k:
            return
        drop = int(self.starts.min()) if self.starts.numel() else self.length
        size = capacity if need - drop <= capacity else max(need - drop, 2 * capacity)
        kept = self.length - drop
        for group in (self.suffix_k, self.suffix_v):
            for layer, tensor in enumerate(group):
                fresh = tensor.new_zeros(tensor.shape[0], tensor.shape[1], size, tensor.shape[3])
                fresh[:, :, :kept] = tensor[:, :, drop : self.length]
                group[layer] = fresh
        self.starts -= drop
        self.length -= drop

    def _layout(self, row_spec: torch.Tensor) -> None:
        """Where each row's query goes in the prefix's batched query: (prompt, rank among its rows), padded
        to the most rows any prompt has; prompts without rows left are dropped, and the prefix narrowed to
        the widest prompt left. Rows stay in prompt order."""
        counts = torch.bincount(row_spec, minlength=self.prompt_lengths.shape[0])
        if not bool((counts > 0).all()):
            kept = (counts > 0).nonzero()[:, 0]
            self.prompt_lengths = self.prompt_lengths.index_select(0, kept)
            width = int(self.prompt_lengths.max()) if kept.numel() else 0
            on_device = kept.to(self.device)
            self.prefix_k = [t.index_select(0, on_device)[:, :, t.shape[2] - width :] for t in self.prefix_k]
            self.prefix_v = [t.index_select(0, on_device)[:, :, t.shape[2] - width :] for t in self.prefix_v]
            row_spec = torch.cumsum(counts > 0, 0).index_select(0, row_spec) - 1
            counts = counts.index_select(0, kept)
        self.row_spec = row_spec
        if not row_spec.numel():
            return
        pads = self.width - self.prompt_lengths
        self.prefix_bias = None
        if bool(pads.any()):
            masked = torch.arange(self.width)[None, :] < pads[:, None]
            bias = torch.zeros(masked.shape).masked_fill(masked, NEG_INF)
            self.prefix_bias = bias[:, None, None, :].to(self.device)
        self.specs, self.rows_per_spec = int(counts.shape[0]), int(counts.max())
        self.slot: torch.Tensor | None = None  # None: rows are already the padded layout
        if not bool((counts == self.rows_per_spec).all()):
            first_row = torch.cumsum(counts, 0) - counts
            rank = torch.arange(len(row_spec)) - first_row.index_select(0, row_spec)
            self.slot = (row_spec * self.rows_per_spec + rank).to(self.device)

    def select(self, rows: torch.Tensor) -> None:
        """Keep these rows (finished ones leave the batch)."""
        on_device = rows.to(self.device)
        self.suffix_k = [t.index_select(0, on_device) for t in self.suffix_k]
        self.suffix_v = [t.index_select(0, on_device) for t in self.suffix_v]
        self.starts = self.starts.index_select(0, rows)
        self._layout(self.row_spec.index_select(0, rows))

    def prepare(self) -> None:
        """Before a step's forward: room for its keys, and the mask of rows that joined after index 0."""
        self.reserve(self.length + 1)
        self.suffix_bias = None
        if bool(self.starts.any()):
            masked = torch.arange(self.length + 1)[None, :] < self.starts[:, None]
            bias = torch.zeros(masked.shape).masked_fill(masked, NEG_INF)
            self.suffix_bias = bias[:, None, None, :].to(self.device)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention output (B, heads, 1, head dim) of this step's queries q (B, heads, 1, head dim), after
        storing its keys/values k, v (B, kv heads, 1, head dim) in the suffix (`length` moves on per step).

        On a CPU on one thread: these matmuls are too small to share, and each parallel region is a barrier
        where a thread descheduled by other work stalls the step (one took 1.2 ms on 2 threads beside busy
        processes, 0.07 ms on one; switching the count costs ~0.1 µs)."""
        threads = torch.get_num_threads() if q.device.type == "cpu" else 1
        if threads == 1:
            return self._attend(layer, q, k, v)
        torch.set_num_threads(1)
        try:
            return self._attend(layer, q, k, v)
        finally:
            torch.set_num_threads(threads)

    def native_hidden(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, model: tuple) -> torch.Tensor:
        """The step's final hidden states by native_decode's C++ layers (bit-equal to CausalLM.final_hidden with
        this cache's attend), from the embeddings h and the rotation cos, sin; `model`: the model's part of the
        op's arguments (its layers' tensors, final norm, packed or not, eps, heads)."""
        none = torch.empty(0, device=self.device)
        return native_decode.op()(
            h, cos, sin, *model,
            self.prefix_k, self.prefix_v, self.suffix_k, self.suffix_v,
            none if self.prefix_bias is None else self.prefix_bias,
            none if self.suffix_bias is None else self.suffix_bias,
            none if self.slot is None else self.slot,
            self.length, self.specs, self.rows_per_spec, self.scale, NEG_INF,
        )  # fmt: skip

    def _attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # One softmax over each row's prefix and suffix scores side by side: ~15 small ops a layer, where
        # joining two softmaxes by log-sum-exp took ~35 (each op costs a few µs at these shapes).
        end = self.length + 1
        suffix_k, suffix_v = self.suffix_k[layer], self.suffix_v[layer]
        suffix_k[:, :, self.length] = k[:, :, 0]
        suffix_v[:, :, self.length] = v[:, :, 0]
        batch, kv, groups, dim = q.shape[0], self.n_kv, self.groups, self.head_dim
        specs, per_spec, width = self.specs, self.rows_per_spec, self.width
        query = q.float().view(batch, kv, groups, dim) * self.scale
        own = query @ suffix_k[:, :, :end].transpose(-1, -2)  # (rows, kv, groups, suffix)
        if self.suffix_bias is not None:
            own = own + self.suffix_bias
        if self.slot is not None:  # into the padded layout: (prompt, rank among its rows)
            query = query.new_zeros(specs * per_spec, kv, groups, dim).index_copy_(0, self.slot, query)
            own = own.new_full((specs * per_spec, kv, groups, end), NEG_INF).index_copy_(0, self.slot, own)
        grouped = query.view(specs, per_spec, kv, groups, dim).transpose(1, 2).reshape(specs, kv, -1, dim)
        shared = grouped @ self.prefix_k[layer].transpose(-1, -2)  # (prompts, kv, rows x groups, width)
        if self.prefix_bias is not None:
            shared = shared + self.prefix_bias
        shared = shared.view(specs, kv, per_spec, groups, width).transpose(1, 2)
        weights = torch.cat((shared, own.view(specs, per_spec, kv, groups, end)), dim=-1).softmax(-1)
        shared_weights = weights[..., :width].transpose(1, 2).reshape(specs, kv, -1, width)
        out = (shared_weights @ self.prefix_v[layer]).view(specs, kv, per_spec, groups, dim).transpose(1, 2)
        out = out.reshape(specs * per_spec, kv, groups, dim)
        own_weights = weights[..., width:].reshape(specs * per_spec, kv, groups, end)
        if self.slot is not None:
            out, own_weights = out.index_select(0, self.slot), own_weights.index_select(0, self.slot)
        out = out + own_weights @ suffix_v[:, :, :end]
        return out.reshape(batch, kv * groups, 1, dim).to(q.dtype)


@dataclass
class _Request:
    spec: SampleSpec
    result: SampleResult
    generator: torch.Generator | None
    left: int  # rows still decoding


class Decoding:
    """A decode batch on one set of weights that requests join (`add`) and rows leave as they finish.

    Each prompt is prefilled once (without padding, batched with prompts of its length) and its
    keys/values kept once, left-padded, for all its samples (DecodeCache); each `step` then draws one
    token for every live row and runs one forward for the rows that go on. `decode(tokens) -> str` is
    needed only for stop strings; `generator` draws for the requests without a seed of their own.
    """

    def __init__(
        self,
        lm: CausalLM,
        weights: dict[str, torch.Tensor],
        decode: Callable[[list[int]], str] | None = None,
        generator: torch.Generator | None = None,
    ):
        self.lm, self.weights, self.decode, self.generator = lm, weights, decode, generator
        self.requests: dict[int, _Request] = {}
        self._tickets = 0
        self.steps = 0  # forwards run
        self._empty()

    def _empty(self) -> None:
        """No live rows: every per-row field empty."""
        self.cache = DecodeCache(self.lm)
        self.last: torch.Tensor | None = None  # (rows, vocab) logits the next token is drawn from
        self.seqs: list[SampledSeq] = []  # per live row, in the compute batch's order
        self.row_ticket: list[int] = []
        self.temperature = torch.zeros(0)
        self.top_k = torch.zeros(0, dtype=torch.long)
        self.top_p = torch.zeros(0)
        self.max_tokens = torch.zeros(0, dtype=torch.long)
        self.prompt_lengths = torch.zeros(0, dtype=torch.long)
        self.lengths = torch.zeros(0, dtype=torch.long)
        self.stop_table = torch.zeros(0, self.lm.vocab_size, dtype=torch.bool)

    @property
    def rows(self) -> int:
        return len(self.seqs)

    @torch.inference_mode()
    def add(self, specs: list[SampleSpec]) -> list[int]:
        """Prefill these requests and append their rows, which draw their first token at the next step;
        returns a ticket per request (`take` gives its result once `step` has named it finished)."""
        generators = [
            torch.Generator().manual_seed(spec.seed) if spec.seed is not None else self.generator for spec in specs
        ]
        results = [SampleResult(sequences=[SampledSeq() for _ in range(spec.num_samples)]) for spec in specs]
        width = max(len(spec.prompt) for spec in specs)
        prefix, last_logits = _prefill(self.lm, specs, self.weights, width, results, generators)
        # Nothing changes until the prefill has succeeded: a request that fails leaves the batch as it was.
        counts = torch.tensor([spec.num_samples for spec in specs])
        row_spec = torch.repeat_interleave(torch.arange(len(specs)), counts)
        tickets = list(range(self._tickets, self._tickets + len(specs)))
        self._tickets += len(specs)
        rows = [
            (ticket, sample, spec)
            for ticket, spec in zip(tickets, specs, strict=True)
            for sample in range(spec.num_samples)
        ]
        lengths = torch.tensor([len(spec.prompt) for spec in specs])
        self.cache.join(prefix, lengths, row_spec, max(spec.max_tokens for spec in specs))
        del prefix
        new_last = last_logits.index_select(0, row_spec.to(self.lm.device))
        self.last = new_last if self.last is None else torch.cat((self.last, new_last))
        for ticket, spec, result, generator in zip(tickets, specs, results, generators, strict=True):
            self.requests[ticket] = _Request(spec, result, generator, spec.num_samples)
        self.seqs += [self.requests[ticket].result.sequences[sample] for ticket, sample, _ in rows]
        self.row_ticket += [ticket for ticket, _, _ in rows]

        def joined(old: torch.Tensor, values: list) -> torch.Tensor:
            return torch.cat((old, torch.tensor(values, dtype=old.dtype)))

        self.temperature = joined(self.temperature, [spec.temperature for _, _, spec in rows])
        self.top_k = joined(self.top_k, [spec.top_k for _, _, spec in rows])
        self.top_p = joined(self.top_p, [spec.top_p for _, _, spec in rows])
        self.max_tokens = joined(self.max_tokens, [spec.max_tokens for _, _, spec in rows])
        self.prompt_lengths = joined(self.prompt_lengths, [len(spec.prompt) for _, _, spec in rows])
        self.lengths = joined(self.lengths, [0] * len(rows))
        stops = torch.zeros(len(rows), self.lm.vocab_size, dtype=torch.bool)
        for row, (_, _, spec) in enumerate(rows):
            stops[row, [t for t in spec.stop_token_ids if 0 <= t < self.lm.vocab_size]] = True
        self.stop_table = torch.cat((self.stop_table, stops))
        return tickets

    def take(self, ticket: int) -> SampleResult:
        """The result of a finished request (and the batch forgets it)."""
        return self.requests.pop(ticket).result

    @torch.inference_mode()
    def step(self) -> list[int]:
        """One token for every live row; finished rows leave, and the rest run one forward. Returns the
        tickets of the requests whose every sample is now finished."""
        assert self.last is not None, "step() on a batch without rows"
        last, device = self.last, self.lm.device
        raw = torch.log_softmax(last, dim=-1)  # the model's own distribution: what logprobs report
        greedy = self.temperature <= 0
        divisor = torch.where(greedy, torch.ones_like(self.temperature), self.temperature)[:, None].to(device)
        # softmax, not exp: torch's exp took 1.6-3.8 ms on 8 x 49k logits that reach below -87 (softmax 0.16)
        if bool((self.top_k > 0).any()) or bool((self.top_p < 1).any()):
            tempered = _truncated(torch.log_softmax(last / divisor, dim=-1), self.top_k, self.top_p).softmax(-1)
        elif bool((divisor == 1).all()):
            tempered = last.softmax(-1)
        else:
            tempered = (last / divisor).softmax(-1)
        chosen = _draw(tempered, self._uniforms())
        if bool(greedy.any()):
            chosen = torch.where(greedy.to(device), last.argmax(-1), chosen)
        chosen_cpu = chosen.cpu()
        logprobs = raw.gather(-1, chosen[:, None])[:, 0].cpu().tolist()
        topk = max((self.requests[ticket].spec.topk_sample_logprobs for ticket in set(self.row_ticket)), default=0)
        if topk:
            values, indices = raw.topk(topk, dim=-1)
            topk_values, topk_ids = values.cpu().tolist(), indices.cpu().tolist()
        self.lengths += 1
        hit = self.stop_table.gather(1, chosen_cpu[:, None])[:, 0]
        for row, (seq, token) in enumerate(zip(self.seqs, chosen_cpu.tolist(), strict=True)):
            seq.tokens.append(token)
            seq.logprobs.append(logprobs[row])
            spec = self.requests[self.row_ticket[row]].spec
            if spec.topk_sample_logprobs:
                k = spec.topk_sample_logprobs
                seq.topk.append((topk_ids[row][:k], topk_values[row][:k]))
            if spec.stop_strings and not hit[row]:
                # Enough trailing tokens to contain any stop string (a token is at least one byte).
                tail = 2 + max(len(s.encode()) for s in spec.stop_strings)
                text = self.decode(seq.tokens[-tail:])  # type: ignore[misc]
                hit[row] = any(s in text for s in spec.stop_strings)
        done = hit | (self.lengths >= self.max_tokens)
        finished = []
        for row in done.nonzero()[:, 0].tolist():
            self.seqs[row].stop_reason = "stop" if bool(hit[row]) else "length"
            request = self.requests[self.row_ticket[row]]
            request.left -= 1
            if request.left == 0:
                finished.append(self.row_ticket[row])
        if bool(done.all()):
            self._empty()
            return finished
        if bool(done.any()):  # finished rows leave the batch
            self._keep((~done).nonzero()[:, 0])
            chosen = chosen[(~done).to(chosen.device)]
        self.cache.prepare()
        positions = (self.prompt_lengths + self.lengths - 1)[:, None]
        self.last = self.lm.forward(chosen[:, None], positions, weights=self.weights, decode=self.cache)[:, -1]
        self.cache.length += 1
        self.steps += 1
        return finished

    def _keep(self, kept: torch.Tensor) -> None:
        rows = kept.tolist()
        self.seqs = [self.seqs[row] for row in rows]
        self.row_ticket = [self.row_ticket[row] for row in rows]
        for name in ("temperature", "top_k", "top_p", "max_tokens", "prompt_lengths", "lengths", "stop_table"):
            setattr(self, name, getattr(self, name).index_select(0, kept))
        assert self.last is not None
        self.last = self.last.index_select(0, kept.to(self.lm.device))
        self.cache.select(kept)

    def _uniforms(self) -> torch.Tensor:
        """One uniform draw per live row: a seeded request's rows from its own generator, the others from
        the batch's (in row order, so a request alone draws as it always did)."""
        uniform = torch.empty(self.rows, 1)
        by_generator: dict[int, tuple[torch.Generator | None, list[int]]] = {}
        for row, ticket in enumerate(self.row_ticket):
            generator = self.requests[ticket].generator
            by_generator.setdefault(id(generator), (generator, []))[1].append(row)
        for generator, rows in by_generator.values():
            draws = torch.rand(len(rows), 1, generator=generator)
            if len(rows) == self.rows:
                return draws
            uniform[rows] = draws
        return uniform


def sample(
    lm: CausalLM,
    specs: list[SampleSpec],
    adapter: Adapter | None,
    scale: float,
    decode: Callable[[list[int]], str] | None = None,
    generator: torch.Generator | None = None,
) -> list[SampleResult]:
    """Complete every spec `num_samples` times, all in one batch (a Decoding run to its end). The adapter
    is merged into the weights once (CausalLM.merged_weights)."""
    with torch.inference_mode():
        weights = lm.w if adapter is None else lm.merged_weights(adapter, scale)
    run = Decoding(lm, weights, decode, generator)
    tickets = run.add(specs)
    while run.rows:
        run.step()
    return [run.take(ticket) for ticket in tickets]


def _prefill(
    lm: CausalLM,
    specs: list[SampleSpec],
    weights: dict[str, torch.Tensor],
    width: int,
    results: list[SampleResult],
    generators: list[torch.Generator | None],
) -> tuple[KVCache, torch.Tensor]:
    """Every prompt's keys and values in one cache (left-padded to `width`) and the logits after its
    last token; the prompt scores a spec asks for go into its result."""
    scores_prompt = any(
        spec.prompt_logprobs or spec.topk_prompt_logprobs or spec.target_prompt_ids is not None for spec in specs
    ) or any(spec.prompt_alt_tokens_k for spec in specs)
    # Prefill without padding: one forward per distinct prompt length (a short prompt batched with a
    # long one would cost the long one's length), placed left-padded into the shared cache.
    cache = KVCache(lm, len(specs), width)
    last_logits = torch.empty(len(specs), lm.vocab_size, device=lm.device)
    by_length: dict[int, list[int]] = {}
    for index, spec in enumerate(specs):
        by_length.setdefault(len(spec.prompt), []).append(index)
    for length, members in by_length.items():
        ids = torch.tensor([specs[i].prompt for i in members], dtype=torch.long)
        part = KVCache(lm, len(members), length)
        positions = torch.arange(length).expand(len(members), length)
        logits = lm.forward(ids, positions, None, 1.0, None, part, 0, last_only=not scores_prompt, weights=weights)
        members_index = torch.tensor(members, device=lm.device)
        for layer in range(lm.n_layers):
            cache.keys[layer][members_index, :, width - length :] = part.keys[layer]
            cache.values[layer][members_index, :, width - length :] = part.values[layer]
        last_logits[members_index] = logits[:, -1]
        if not scores_prompt:
            continue
        for row, index in enumerate(members):
            spec, prompt_logits = specs[index], logits[row].cpu()
            if spec.prompt_logprobs or spec.topk_prompt_logprobs:
                _prompt_scores(spec, prompt_logits, results[index])
            if spec.target_prompt_ids is not None:
                _target_prompt_scores(spec, prompt_logits, results[index])
            if spec.prompt_alt_tokens_k:
                _prompt_alt_tokens(spec, prompt_logits, results[index], generators[index])
    return cache, last_logits


def _truncated(dist: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Log-probabilities `dist` with what each row's top-k and top-p leave out set to -inf."""
    sorted_lp, order = dist.sort(dim=-1, descending=True)
    rank = torch.arange(dist.shape[-1], device=dist.device)[None, :]
    top_k, top_p = top_k.to(dist.device), top_p.to(dist.device)
    drop = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    # top-p: keep the smallest prefix whose mass reaches p (the first token always stays)
    mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
    drop |= mass_before >= top_p[:, None]
    return torch.full_like(dist, NEG_INF).scatter(-1, order, sorted_lp.masked_fill(drop, NEG_INF))


def _draw(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse CDF: the first whose running total of `weights` (rows, vocab; not
    negative, not normalised) passes u x the row's total, u its uniform in [0, 1) (rows, 1). In two
    levels: running totals of DRAW_BLOCK-token blocks pick the block, then one within it (one running
    total over all 49k tokens was ~3 % of a decoding step; torch.multinomial is ~10x slower still)."""
    rows, vocab = weights.shape
    padded = weights if vocab % DRAW_BLOCK == 0 else F.pad(weights, (0, -vocab % DRAW_BLOCK))
    blocks = padded.view(rows, -1, DRAW_BLOCK)
    running = blocks.sum(-1).cumsum(-1)  # (rows, blocks)
    target = uniform.to(weights.device) * running[:, -1:]
    block = torch.searchsorted(running, target, right=True).clamp_(max=running.shape[1] - 1)
    before = running.gather(1, (block - 1).clamp(min=0)).masked_fill_(block == 0, 0.0)
    within = blocks.gather(1, block[:, :, None].expand(rows, 1, DRAW_BLOCK))[:, 0].cumsum(-1)
    index = torch.searchsorted(within, target - before, right=True).clamp_(max=DRAW_BLOCK - 1)
    chosen = block * DRAW_BLOCK + index
    chosen_weight = padded.gather(1, chosen)
    if bool((chosen_weight <= 0).any()):  # float rounding at a block's edge: the row's likeliest token
        chosen = torch.where(chosen_weight > 0, chosen, weights.argmax(-1, keepdim=True))
    return chosen[:, 0]


def _target_prompt_scores(spec: SampleSpec, logits: torch.Tensor, result: SampleResult) -> None:
    """Row i scores the requested ids at prompt position i + 1 (from the logits at position i)."""
    ids = torch.tensor(spec.target_prompt_ids, dtype=torch.long).reshape(len(spec.prompt) - 1, -1)
    logprobs = torch.log_softmax(logits[:-1], dim=-1)
    scored = logprobs.gather(-1, ids.clamp(min=0))
    result.target_prompt = scored.masked_fill(ids < 0, float("nan")).tolist()


def _prompt_alt_tokens(
    spec: SampleSpec, logits: torch.Tensor, result: SampleResult, generator: torch.Generator | None
) -> None:
    """k independent draws per prompt position after the first, at the request's temperature; their
    logprobs are the untempered model's, like every logprob this engine reports."""
    k = spec.prompt_alt_tokens_k
    rows = logits[:-1]
    raw = torch.log_softmax(rows, dim=-1)
    if spec.temperature <= 0:
        ids = raw.argmax(-1, keepdim=True).expand(-1, k)
    else:
        tempered = torch.log_softmax(rows / spec.temperature, dim=-1)
        ids = torch.multinomial(tempered.exp(), k, replacement=True, generator=generator)
    result.alt_tokens = (ids.tolist(), raw.gather(-1, ids).tolist())


def _prompt_scores(spec: SampleSpec, logits: torch.Tensor, result: SampleResult) -> None:
    """Prompt logprobs (NaN at position 0 and before the last-n window) and their top-k."""
    prompt = torch.tensor(spec.prompt)
    logprobs = torch.log_softmax(logits, dim=-1)  # position t predicts prompt[t+1]
    scored = torch.full((len(spec.prompt),), float("nan"))
    if len(spec.prompt) > 1:
        scored[1:] = logprobs[:-1].gather(-1, prompt[1:, None])[:, 0]
    first = 1 if spec.prompt_logprobs_last_n is None else len(spec.prompt) - spec.prompt_logprobs_last_n
    scored[:first] = float("nan")
    if spec.prompt_logprobs:
        result.prompt_logprobs = scored.tolist()
    if spec.topk_prompt_logprobs:
        rows: list[tuple[list[int], list[float]]] = [([], [])]
        for position in range(1, len(spec.prompt)):
            if position < first:
                rows.append(([], []))
                continue
            values, indices = logprobs[position - 1].topk(spec.topk_prompt_logprobs)
            rows.append((indices.tolist(), values.tolist()))
        result.topk_prompt = rows
