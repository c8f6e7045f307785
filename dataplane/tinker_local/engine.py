"""The tiny Llama-style model in plain torch, with LoRA adapters passed per call.

Why not transformers + peft here: importing them costs ~6-8 s on this machine (the server has
to be ready in seconds) and their per-call overhead dominates a model this small. The weights
are the builder's `save_pretrained` output, read directly; tests check the logits against
`transformers.LlamaForCausalLM` and the LoRA against `peft`, and adapters are saved in peft's
format so they load there too.

An adapter is `{module_name: (A, B)}` with A: (rank, in), B: (out, rank); a LoRA linear is
`x @ W.T + scale * (x @ A.T) @ B.T`, as in peft.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

Adapter = dict[str, tuple[torch.Tensor, torch.Tensor]]

ATTN_MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP_MODULES = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
UNEMBED_MODULE = "lm_head"
LORA_ALPHA = 32.0


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


class TinyLM:
    """Frozen base weights of a Llama-architecture checkpoint, evaluated functionally."""

    def __init__(self, model_dir: Path):
        from safetensors.torch import load_file

        self.model_dir = Path(model_dir)
        cfg = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
        if cfg.get("model_type") not in ("llama", "qwen2", "mistral"):
            raise ValueError(f"unsupported model_type {cfg.get('model_type')!r} in {self.model_dir}")
        self.config = cfg
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden = int(cfg["hidden_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.n_heads)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.max_positions = int(cfg.get("max_position_embeddings", 2048))
        rope = cfg.get("rope_parameters") or {}
        theta = float(rope.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
        if rope.get("rope_type", "default") != "default" or cfg.get("rope_scaling"):
            raise ValueError("only default RoPE is supported")
        eos = cfg.get("eos_token_id")
        self.eos_token_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])

        weights = {}
        for path in sorted(self.model_dir.glob("*.safetensors")):
            weights.update(load_file(str(path)))
        self.w = {name: tensor.float().contiguous() for name, tensor in weights.items()}
        if "lm_head.weight" not in self.w:  # tied embeddings
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))

    # ------------------------------------------------------------------ adapters

    def lora_modules(self, train_attn: bool, train_mlp: bool, train_unembed: bool) -> list[tuple[str, int, int]]:
        """(module name, in features, out features) of every linear a LoRA config adapts."""
        names = []
        for layer in range(self.n_layers):
            prefix = f"model.layers.{layer}."
            if train_attn:
                names += [prefix + m for m in ATTN_MODULES]
            if train_mlp:
                names += [prefix + m for m in MLP_MODULES]
        if train_unembed:
            names.append(UNEMBED_MODULE)
        out = []
        for name in names:
            out_features, in_features = self.w[name + ".weight"].shape
            out.append((name, in_features, out_features))
        return out

    def new_adapter(self, rank: int, modules: list[tuple[str, int, int]], seed: int | None) -> Adapter:
        """peft's initialisation: A kaiming-uniform (a=sqrt(5)), B zero, so training starts at the base."""
        generator = torch.Generator().manual_seed(seed if seed is not None else torch.seed() % (2**63))
        adapter: Adapter = {}
        for name, in_features, out_features in modules:
            bound = 1.0 / math.sqrt(in_features)  # kaiming_uniform_(a=sqrt(5)) on (rank, in)
            a = (torch.rand(rank, in_features, generator=generator) * 2 - 1) * bound
            adapter[name] = (a, torch.zeros(out_features, rank))
        return adapter

    # ------------------------------------------------------------------ forward

    def _linear(self, x: torch.Tensor, name: str, adapter: Adapter | None, scale: float) -> torch.Tensor:
        y = F.linear(x, self.w[name + ".weight"])
        if adapter is not None and name in adapter:
            a, b = adapter[name]
            y = y + F.linear(F.linear(x, a), b) * scale
        return y

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.w[name] * (x * torch.rsqrt(variance + self.eps))

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, T, head_dim)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        adapter: Adapter | None = None,
        scale: float = 1.0,
        attn_mask: torch.Tensor | None = None,
        cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        cache_start: int = 0,
        causal: bool = True,
    ) -> torch.Tensor:
        """Logits (B, T, V). Without a mask attention is causal if `causal` (right padding is
        then harmless); a one-token decode step passes causal=False.

        With `cache`, keys/values of these T tokens are written at [cache_start, cache_start+T)
        and attention covers the cache up to there; `attn_mask` (B, 1, T, cache_start+T) says
        which of those keys each query may see.
        """
        batch, length = ids.shape
        h = F.embedding(ids, self.w["model.embed_tokens.weight"])
        cos, sin = self._rope(positions)
        groups = self.n_heads // self.n_kv  # grouped-query attention, no copies of K/V
        for layer in range(self.n_layers):
            p = f"model.layers.{layer}."
            x = self._norm(h, p + "input_layernorm.weight")
            q = self._linear(x, p + "self_attn.q_proj", adapter, scale).view(batch, length, self.n_heads, self.head_dim)
            k = self._linear(x, p + "self_attn.k_proj", adapter, scale).view(batch, length, self.n_kv, self.head_dim)
            v = self._linear(x, p + "self_attn.v_proj", adapter, scale).view(batch, length, self.n_kv, self.head_dim)
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            if cache is not None:
                cache_k, cache_v = cache[layer]
                cache_k[:, :, cache_start : cache_start + length] = k
                cache_v[:, :, cache_start : cache_start + length] = v
                k = cache_k[:, :, : cache_start + length]
                v = cache_v[:, :, : cache_start + length]
            attn = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, is_causal=causal and attn_mask is None, enable_gqa=groups > 1
            )
            attn = attn.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
            h = h + self._linear(attn, p + "self_attn.o_proj", adapter, scale)
            x = self._norm(h, p + "post_attention_layernorm.weight")
            gated = F.silu(self._linear(x, p + "mlp.gate_proj", adapter, scale)) * self._linear(
                x, p + "mlp.up_proj", adapter, scale
            )
            h = h + self._linear(gated, p + "mlp.down_proj", adapter, scale)
        h = self._norm(h, "model.norm.weight")
        return self._linear(h, UNEMBED_MODULE, adapter, scale)

    def target_logprobs(
        self, sequences: list[list[int]], targets: list[torch.Tensor], adapter: Adapter | None, scale: float
    ) -> list[torch.Tensor] | torch.Tensor:
        """log p(targets[i][t] | sequences[i][:t+1]) per datum; targets are (T,) or (T, K) int64.

        When every target is 1-D the result is one right-padded (B, width) tensor (one autograd
        node instead of one per datum); otherwise a list of per-datum tensors.
        """
        width = max(len(s) for s in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        positions = torch.arange(width).expand(len(sequences), width)
        logprobs = torch.log_softmax(self.forward(ids, positions, adapter, scale), dim=-1)
        if all(target.dim() == 1 for target in targets):
            padded = torch.zeros(len(sequences), width, dtype=torch.long)
            for row, target in enumerate(targets):
                padded[row, : target.shape[0]] = target
            return logprobs.gather(-1, padded[..., None])[..., 0]
        out = []
        for row, target in enumerate(targets):
            rows = logprobs[row, : target.shape[0]]
            if target.dim() == 1:
                out.append(rows.gather(-1, target[:, None])[:, 0])
            else:
                out.append(rows.gather(-1, target))
        return out

    # ------------------------------------------------------------------ sampling

    @torch.no_grad()
    def sample(
        self,
        specs: list[SampleSpec],
        adapter: Adapter | None,
        scale: float,
        decode=None,
        generator: torch.Generator | None = None,
    ) -> list[SampleResult]:
        """Complete every spec in one left-padded batch with a KV cache.

        The returned logprob of a sampled token is under the temperature-scaled distribution it
        was drawn from (top-k/top-p truncation aside); at temperature 1 it equals the training
        forward pass's logprob. `decode(tokens) -> str` is needed only for stop strings.
        """
        rows = [(index, spec) for index, spec in enumerate(specs) for _ in range(spec.num_samples)]
        batch = len(rows)
        lengths = torch.tensor([len(spec.prompt) for _, spec in rows])
        width = int(lengths.max())
        steps = max(spec.max_tokens for spec in specs)
        pads = width - lengths
        ids = torch.zeros(batch, width, dtype=torch.long)
        for row, (_, spec) in enumerate(rows):
            ids[row, int(pads[row]) :] = torch.tensor(spec.prompt, dtype=torch.long)
        total = width + steps
        cache = [
            (torch.zeros(batch, self.n_kv, total, self.head_dim), torch.zeros(batch, self.n_kv, total, self.head_dim))
            for _ in range(self.n_layers)
        ]
        key_index = torch.arange(total)
        padded = bool(pads.any())  # masks only when prompts differ in length
        valid_key = key_index[None, :] >= pads[:, None]  # (B, total): left padding is never attended
        prefill_mask = None
        if padded:
            causal = key_index[None, :width] <= key_index[:width, None]  # (width, width)
            prefill_mask = causal[None] & valid_key[:, None, :width]
            prefill_mask |= torch.eye(width, dtype=torch.bool)[None]  # pad queries see themselves: no NaN rows
            prefill_mask = prefill_mask[:, None]
        positions = (key_index[None, :width] - pads[:, None]).clamp(min=0)
        logits = self.forward(ids, positions, adapter, scale, prefill_mask, cache, 0)

        results = [SampleResult(sequences=[]) for _ in specs]
        first_row: dict[int, int] = {}
        for row, (index, _) in enumerate(rows):
            first_row.setdefault(index, row)
        for index, spec in enumerate(specs):
            prompt_logits = logits[first_row[index], int(pads[first_row[index]]) :]
            if spec.prompt_logprobs or spec.topk_prompt_logprobs:
                self._prompt_scores(spec, prompt_logits, results[index])
            if spec.target_prompt_ids is not None:
                self._target_prompt_scores(spec, prompt_logits, results[index])
            if spec.prompt_alt_tokens_k:
                self._prompt_alt_tokens(spec, prompt_logits, results[index], generator)

        temperature = torch.tensor([spec.temperature for _, spec in rows])[:, None]
        greedy = temperature[:, 0] <= 0
        top_k = torch.tensor([spec.top_k for _, spec in rows])
        top_p = torch.tensor([spec.top_p for _, spec in rows])
        max_tokens = torch.tensor([spec.max_tokens for _, spec in rows])
        stop_table = torch.zeros(batch, self.vocab_size, dtype=torch.bool)
        for row, (_, spec) in enumerate(rows):
            stop_table[row, [t for t in spec.stop_token_ids if 0 <= t < self.vocab_size]] = True
        string_rows = [row for row, (_, spec) in enumerate(rows) if spec.stop_strings]
        # Enough trailing tokens to contain any stop string (a token is at least one byte).
        tail = 2 + max((len(s.encode()) for _, spec in rows for s in spec.stop_strings), default=0)
        topk_sample = max(spec.topk_sample_logprobs for spec in specs)

        tokens = torch.zeros(batch, steps, dtype=torch.long)
        token_logprobs = torch.zeros(batch, steps)
        topk_ids = torch.zeros(batch, steps, topk_sample, dtype=torch.long) if topk_sample else None
        topk_values = torch.zeros(batch, steps, topk_sample) if topk_sample else None
        lengths = torch.zeros(batch, dtype=torch.long)
        done = torch.zeros(batch, dtype=torch.bool)
        stopped = torch.zeros(batch, dtype=torch.bool)
        arange = torch.arange(batch)
        last = logits[:, -1]
        for step in range(steps):
            scaled = last / torch.where(greedy[:, None], torch.ones_like(temperature), temperature)
            dist = torch.log_softmax(scaled, dim=-1)
            chosen = self._choose(dist, greedy, top_k, top_p, generator)
            active = ~done
            tokens[:, step] = chosen
            token_logprobs[:, step] = dist[arange, chosen]
            if topk_sample:
                values, indices = dist.topk(topk_sample, dim=-1)
                topk_ids[:, step], topk_values[:, step] = indices, values
            lengths += active.long()
            hit = stop_table[arange, chosen] & active
            for row in string_rows:
                if active[row] and not hit[row]:
                    text = decode(tokens[row, max(0, step + 1 - tail) : step + 1].tolist())
                    hit[row] = any(s in text for s in rows[row][1].stop_strings)
            stopped |= hit
            done |= hit | (lengths >= max_tokens)
            if bool(done.all()) or step == steps - 1:
                break
            start = width + step
            step_mask = valid_key[:, None, None, : start + 1] if padded else None
            positions = (start - pads)[:, None]
            last = self.forward(chosen[:, None], positions, adapter, scale, step_mask, cache, start, causal=False)[
                :, -1
            ]

        for row, (index, spec) in enumerate(rows):
            n = int(lengths[row])
            seq = SampledSeq(
                tokens=tokens[row, :n].tolist(),
                logprobs=token_logprobs[row, :n].tolist(),
                stop_reason="stop" if bool(stopped[row]) else "length",
            )
            if spec.topk_sample_logprobs:
                k = spec.topk_sample_logprobs
                seq.topk = list(zip(topk_ids[row, :n, :k].tolist(), topk_values[row, :n, :k].tolist(), strict=True))
            results[index].sequences.append(seq)
        return results

    @staticmethod
    def _choose(
        dist: torch.Tensor,
        greedy: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        filtered = dist
        if bool((top_k > 0).any()) or bool((top_p < 1).any()):
            sorted_lp, order = dist.sort(dim=-1, descending=True)
            rank = torch.arange(dist.shape[-1])[None, :]
            drop = (top_k[:, None] > 0) & (rank >= top_k[:, None])
            # top-p: keep the smallest prefix whose mass reaches p (the first token always stays)
            mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
            drop |= mass_before >= top_p[:, None]
            sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
            filtered = torch.full_like(dist, float("-inf")).scatter(-1, order, sorted_lp)
        # Inverse-CDF draw: one uniform per row (torch.multinomial is ~10x slower here).
        cdf = filtered.softmax(-1).cumsum(-1)
        uniform = torch.rand(dist.shape[0], 1, generator=generator) * cdf[:, -1:]
        drawn = torch.searchsorted(cdf, uniform)[:, 0].clamp(max=dist.shape[-1] - 1)
        return torch.where(greedy, dist.argmax(-1), drawn) if bool(greedy.any()) else drawn

    @staticmethod
    def _target_prompt_scores(spec: SampleSpec, logits: torch.Tensor, result: SampleResult) -> None:
        """Row i scores the requested ids at prompt position i + 1 (from the logits at position i)."""
        ids = torch.tensor(spec.target_prompt_ids, dtype=torch.long).reshape(len(spec.prompt) - 1, -1)
        logprobs = torch.log_softmax(logits[:-1], dim=-1)
        scored = logprobs.gather(-1, ids.clamp(min=0))
        result.target_prompt = scored.masked_fill(ids < 0, float("nan")).tolist()

    def _prompt_alt_tokens(
        self, spec: SampleSpec, logits: torch.Tensor, result: SampleResult, generator: torch.Generator | None
    ) -> None:
        """k independent draws per prompt position after the first, at the request's temperature."""
        k = spec.prompt_alt_tokens_k
        rows = logits[:-1]
        if spec.temperature <= 0:
            dist = torch.log_softmax(rows, dim=-1)
            ids = dist.argmax(-1, keepdim=True).expand(-1, k)
        else:
            dist = torch.log_softmax(rows / spec.temperature, dim=-1)
            ids = torch.multinomial(dist.exp(), k, replacement=True, generator=generator)
        result.alt_tokens = (ids.tolist(), dist.gather(-1, ids).tolist())

    @staticmethod
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
