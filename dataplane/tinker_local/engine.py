"""Llama-family causal LMs in plain torch, with LoRA adapters passed per call.

Why not transformers + peft here: importing them costs ~6-8 s on this machine (the server has
to be ready in seconds), their per-call overhead dominates small models, and sampling needs what
`generate` does not do: one prefill per prompt shared by its samples, finished rows leaving the
batch, per-request LoRA weights. The weights are a Hugging Face folder's safetensors, read directly
(model_config says which architectures); tests check the logits against transformers and the LoRA
against peft, and adapters are saved in peft's format so they load there too.

An adapter is `{module_name: (A, B)}` with A: (rank, in), B: (out, rank); a LoRA linear is
`x @ W.T + scale * (x @ A.T) @ B.T`, as in peft.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .model_config import ModelError, ModelSpec, read_model_config

Adapter = dict[str, tuple[torch.Tensor, torch.Tensor]]

ATTN_MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP_MODULES = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# Linears that read the same input, stored as one matrix (their weights are views into it): a decoding
# step, where per-matmul overhead dominates, then runs 4 matmuls a layer instead of 7.
FUSED_MODULES = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
UNEMBED_MODULE = "lm_head"
LORA_ALPHA = 32.0
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Below this a model's matmuls are too small for bf16 to gain on a CPU, and float32 keeps every
# logprob exact (the tiny model has ~0.3M parameters, SmolLM2-135M 135M).
CPU_BF16_MIN_PARAMETERS = 50_000_000


def _fused_name(name: str) -> bool:
    return any(name.endswith(f".{fused}.weight") or name.endswith(f".{fused}.bias") for fused in FUSED_MODULES)


def cpu_multiplies_bf16() -> bool:
    """Whether oneDNN runs bf16 matmuls natively here (AMX or AVX512-BF16): on a 2-core Xeon with AMX a
    SmolLM2-sized matmul took 1/4 to 1/8 of float32's time; without them bf16 is emulated and slower."""
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def choose_dtype(device: torch.device, requested: str | torch.dtype | None, parameters: int) -> torch.dtype:
    """`auto`: bf16 on a GPU, and on a CPU that multiplies bf16 natively for a model of
    CPU_BF16_MIN_PARAMETERS or more; float32 otherwise. `float32`/`bfloat16` (or a torch dtype) force it."""
    if isinstance(requested, torch.dtype):
        return requested
    if requested not in (None, "auto"):
        if requested not in DTYPES:
            raise ModelError(f"unknown dtype {requested!r}: use auto, float32 or bfloat16")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu" and parameters >= CPU_BF16_MIN_PARAMETERS and cpu_multiplies_bf16():
        return torch.bfloat16
    return torch.float32


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


def rope_inv_freq(spec: ModelSpec) -> torch.Tensor:
    """RoPE inverse frequencies as transformers computes them for the default and llama3 types."""
    dim = spec.head_dim
    inv_freq = 1.0 / (float(spec.rope["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if spec.rope["rope_type"] != "llama3":
        return inv_freq
    factor = float(spec.rope["factor"])
    low, high = float(spec.rope["low_freq_factor"]), float(spec.rope["high_freq_factor"])
    old_context = float(spec.rope["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_context / high) & ~(wavelen > old_context / low)
    return torch.where(medium, smoothed, scaled)


class KVCache:
    """Keys and values per layer, (batch, kv heads, capacity, head dim), as a prefill writes them; a write
    past the capacity grows it by doubling."""

    def __init__(self, lm: CausalLM, batch: int, capacity: int):
        shape = (batch, lm.n_kv, capacity, lm.head_dim)
        self.keys = [torch.zeros(shape, device=lm.device, dtype=lm.dtype) for _ in range(lm.n_layers)]
        self.values = [torch.zeros(shape, device=lm.device, dtype=lm.dtype) for _ in range(lm.n_layers)]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def reserve(self, length: int) -> None:
        if length <= self.capacity:
            return
        extra = max(length, 2 * self.capacity) - self.capacity
        for group in (self.keys, self.values):
            for layer, tensor in enumerate(group):
                pad = tensor.new_zeros(tensor.shape[0], tensor.shape[1], extra, tensor.shape[3])
                group[layer] = torch.cat((tensor, pad), dim=2)

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k/v at [start, start+T) and return every key/value up to there."""
        end = start + k.shape[2]
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class DecodeCache:
    """The keys and values a decoding step attends to, and its attention, for one-token queries.

    Each prompt's keys/values are kept once (the prefix, left-padded to the widest prompt), shared by
    all its samples; each row's generated tokens have their own (the suffix). A step attends to both
    and joins them by log-sum-exp: the prefix as one batched query of all the rows of a prompt against
    its one copy (a group of 8 reads its 200-token prompt once, not 8 times), the suffix row by row.
    Explicit `q @ kᵀ → softmax → @ v`, all in float32 (exact for the bf16 keys a bf16 model writes):
    torch's SDPA on CPU picks its flash kernel, built for long queries, which took ~3.6x the CPU on
    these shapes, and bf16 scores moved logprobs by up to 0.02 nat.
    """

    def __init__(self, lm: CausalLM, prefix: KVCache, pads: torch.Tensor, row_spec: torch.Tensor, steps: int):
        self.n_kv, self.groups, self.head_dim = lm.n_kv, lm.n_heads // lm.n_kv, lm.head_dim
        self.scale = 1.0 / math.sqrt(lm.head_dim)
        self.prefix_k = [k.float() for k in prefix.keys]
        self.prefix_v = [v.float() for v in prefix.values]
        width = prefix.capacity
        self.prefix_bias: torch.Tensor | None = None  # -inf on each prompt's left padding
        if bool(pads.any()):
            masked = torch.arange(width)[None, :] < pads[:, None]
            bias = torch.zeros(masked.shape).masked_fill(masked, float("-inf"))
            self.prefix_bias = bias[:, None, None, :].to(lm.device)
        shape = (len(row_spec), lm.n_kv, max(1, steps), lm.head_dim)
        self.suffix_k = [torch.zeros(shape, device=lm.device) for _ in range(lm.n_layers)]
        self.suffix_v = [torch.zeros(shape, device=lm.device) for _ in range(lm.n_layers)]
        self.length = 0  # suffix tokens written (every row decodes in step)
        self._layout(row_spec.to(lm.device))

    def _layout(self, row_spec: torch.Tensor) -> None:
        """Where each row's query goes in the prefix's batched query: (prompt, rank among its rows), padded
        to the most rows any prompt has; prompts without rows left are dropped. Rows stay in prompt order."""
        counts = torch.bincount(row_spec, minlength=self.prefix_k[0].shape[0])
        if not bool((counts > 0).all()):
            kept = (counts > 0).nonzero()[:, 0]
            self.prefix_k = [t.index_select(0, kept) for t in self.prefix_k]
            self.prefix_v = [t.index_select(0, kept) for t in self.prefix_v]
            if self.prefix_bias is not None:
                self.prefix_bias = self.prefix_bias.index_select(0, kept)
            row_spec = torch.cumsum(counts > 0, 0).index_select(0, row_spec) - 1
            counts = counts.index_select(0, kept)
        self.specs, self.rows_per_spec = int(counts.shape[0]), int(counts.max())
        self.slot: torch.Tensor | None = None  # None: rows are already the padded layout
        if not bool((counts == self.rows_per_spec).all()):
            first_row = torch.cumsum(counts, 0) - counts
            rank = torch.arange(len(row_spec), device=row_spec.device) - first_row.index_select(0, row_spec)
            self.slot = row_spec * self.rows_per_spec + rank
        self.row_spec = row_spec

    def select(self, rows: torch.Tensor) -> None:
        """Keep these rows (finished ones leave the batch)."""
        self.suffix_k = [t.index_select(0, rows) for t in self.suffix_k]
        self.suffix_v = [t.index_select(0, rows) for t in self.suffix_v]
        self._layout(self.row_spec.index_select(0, rows))

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

    def _attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        end = self.length + 1
        suffix_k, suffix_v = self.suffix_k[layer], self.suffix_v[layer]
        suffix_k[:, :, self.length] = k[:, :, 0]
        suffix_v[:, :, self.length] = v[:, :, 0]
        batch, kv, groups, dim = q.shape[0], self.n_kv, self.groups, self.head_dim
        specs, per_spec = self.specs, self.rows_per_spec
        query = q.float().view(batch, kv, groups, dim) * self.scale
        padded = query if self.slot is None else query.new_zeros(specs * per_spec, kv, groups, dim)
        if self.slot is not None:
            padded.index_copy_(0, self.slot, query)
        grouped = padded.view(specs, per_spec, kv, groups, dim).transpose(1, 2).reshape(specs, kv, -1, dim)
        scores = grouped @ self.prefix_k[layer].transpose(-1, -2)  # (prompts, kv, rows x groups, width)
        if self.prefix_bias is not None:
            scores = scores + self.prefix_bias
        top = scores.amax(-1, keepdim=True)
        weights = (scores - top).exp_()
        joined = torch.cat((weights @ self.prefix_v[layer], top, weights.sum(-1, keepdim=True)), dim=-1)
        joined = joined.view(specs, kv, per_spec, groups, dim + 2).transpose(1, 2).reshape(-1, kv, groups, dim + 2)
        if self.slot is not None:
            joined = joined.index_select(0, self.slot)
        prefix_out, prefix_top, prefix_sum = joined.split((dim, 1, 1), dim=-1)
        own = query @ suffix_k[:, :, :end].transpose(-1, -2)  # (B, kv, groups, suffix)
        own_top = own.amax(-1, keepdim=True)
        own_weights = (own - own_top).exp_()
        top = torch.maximum(prefix_top, own_top)
        prefix_share, own_share = (prefix_top - top).exp_(), (own_top - top).exp_()
        out = prefix_out * prefix_share + (own_weights @ suffix_v[:, :, :end]) * own_share
        out = out / (prefix_sum * prefix_share + own_weights.sum(-1, keepdim=True) * own_share)
        return out.reshape(batch, kv * groups, 1, dim).to(q.dtype)


class CausalLM:
    """Frozen base weights of a Llama-family checkpoint (see model_config), evaluated functionally.

    One code path for every device: the weights in the compute dtype `choose_dtype` picks (bf16 on a
    GPU and for real models on a CPU with native bf16, float32 otherwise; `dtype` overrides). Logits and
    log-probabilities are always float32; LoRA parameters are float32 masters, cast to the compute
    dtype where they are used.
    """

    def __init__(self, model_dir: Path, device: str | None = None, dtype: torch.dtype | str | None = None):
        from safetensors import safe_open

        self.model_dir = Path(model_dir)
        self.spec = read_model_config(self.model_dir)
        spec = self.spec
        self.config = spec.raw
        self.vocab_size = spec.vocab_size
        self.hidden = spec.hidden_size
        self.n_layers = spec.num_layers
        self.n_heads = spec.num_heads
        self.n_kv = spec.num_kv_heads
        self.head_dim = spec.head_dim
        self.eps = spec.rms_norm_eps
        self.max_positions = spec.context_length
        self.eos_token_ids = frozenset(spec.eos_token_ids)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = choose_dtype(self.device, dtype, spec.parameter_estimate())

        self.w: dict[str, torch.Tensor] = {}
        for path in spec.weight_files:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    if name.startswith("model.") or name == "lm_head.weight":
                        self.w[name] = handle.get_tensor(name).to(self.device, self.dtype).contiguous()
        missing = [name for name in spec.required_weights() if name not in self.w]
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise ModelError(f"{self.model_dir}: the weights lack {shown}")
        if "lm_head.weight" not in self.w:  # tied embeddings
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self._fuse(self.w, changed=None)
        self.inv_freq = rope_inv_freq(spec).to(self.device)
        self._merged: tuple[tuple, Adapter, dict[str, torch.Tensor]] | None = None

    def describe(self) -> dict:
        """What a status or get_info shows about the served model."""
        return {
            "architecture": self.spec.model_type,
            "parameters": sum(
                t.numel() for t in {t.data_ptr(): t for name, t in self.w.items() if not _fused_name(name)}.values()
            ),
            "context_length": self.max_positions,
            "vocab_size": self.vocab_size,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    def _fuse(self, weights: dict[str, torch.Tensor], changed: set[str] | None) -> None:
        """Store each layer's FUSED_MODULES as one matrix (and bias) with the parts as views into it, so
        the parts take no memory of their own. `changed`: the module names whose weights were replaced
        (only their groups are fused again); None fuses every group."""
        for layer in range(self.n_layers):
            prefix = f"model.layers.{layer}."
            for fused, parts in FUSED_MODULES.items():
                if changed is not None and not any(prefix + part in changed for part in parts):
                    continue
                for kind in (".weight", ".bias"):
                    names = [prefix + part + kind for part in parts]
                    if not all(name in weights for name in names):
                        continue
                    whole = torch.cat([weights[name] for name in names])
                    weights[prefix + fused + kind] = whole
                    for name, view in zip(names, whole.split([weights[n].shape[0] for n in names]), strict=True):
                        weights[name] = view

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
            adapter[name] = (a.to(self.device), torch.zeros(out_features, rank, device=self.device))
        return adapter

    # ------------------------------------------------------------------ forward

    def _linear(
        self, x: torch.Tensor, name: str, adapter: Adapter | None, scale: float, weights: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        y = F.linear(x, weights[name + ".weight"], weights.get(name + ".bias"))
        if adapter is not None and name in adapter:
            a, b = adapter[name]
            y = y + F.linear(F.linear(x, a.to(x.dtype)), b.to(x.dtype)) * scale
        return y

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        # As transformers' LlamaRMSNorm: the statistics in float32, the result in the weights' dtype.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.w[name] * normed.to(x.dtype)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(self.device, torch.float32)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype)[:, None], emb.sin().to(self.dtype)[:, None]  # (B, 1, T, head_dim)

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
        cache: KVCache | None = None,
        cache_start: int = 0,
        causal: bool = True,
        last_only: bool = False,
        weights: dict[str, torch.Tensor] | None = None,
        decode: DecodeCache | None = None,
    ) -> torch.Tensor:
        """Float32 logits (B, T, V), or (B, 1, V) for the last position only with `last_only`.
        Without a mask attention is causal if `causal` (right padding is then harmless); a one-token
        decode step passes causal=False.

        With `cache`, keys/values of these T tokens are written at [cache_start, cache_start+T)
        and attention covers the cache up to there; `attn_mask` (B, 1, T, cache_start+T) says
        which of those keys each query may see. `weights` replaces the base weights (a merged adapter).
        With `decode` (one token per row, T = 1) attention is DecodeCache's instead.
        """
        weights = self.w if weights is None else weights
        h = self.final_hidden(ids, positions, adapter, scale, attn_mask, cache, cache_start, causal, weights, decode)
        if last_only:
            h = h[:, -1:]
        return self.head(h, adapter, scale, weights)

    def head(
        self, h: torch.Tensor, adapter: Adapter | None, scale: float, weights: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Float32 logits of final hidden states (any leading shape)."""
        return self._linear(h, UNEMBED_MODULE, adapter, scale, self.w if weights is None else weights).float()

    def final_hidden(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        adapter: Adapter | None,
        scale: float,
        attn_mask: torch.Tensor | None,
        cache: KVCache | None,
        cache_start: int,
        causal: bool,
        weights: dict[str, torch.Tensor],
        decode: DecodeCache | None = None,
    ) -> torch.Tensor:
        """The final normed hidden states (B, T, hidden) that the output head reads (see forward)."""
        ids = ids.to(self.device)
        if attn_mask is not None:
            attn_mask = attn_mask.to(self.device)
        batch, length = ids.shape
        h = F.embedding(ids, weights["model.embed_tokens.weight"])
        cos, sin = self._rope(positions)
        groups = self.n_heads // self.n_kv  # grouped-query attention, no copies of K/V
        qk_norm = self.spec.qk_norm
        if cache is not None:
            cache.reserve(cache_start + length)

        def linear(x: torch.Tensor, name: str) -> torch.Tensor:
            return self._linear(x, name, adapter, scale, weights)

        def linears(x: torch.Tensor, prefix: str, fused: str) -> list[torch.Tensor]:
            """The outputs of a FUSED_MODULES group: one matmul unless the adapter adapts a part."""
            parts = FUSED_MODULES[fused]
            whole = weights.get(prefix + fused + ".weight")
            if whole is None or (adapter is not None and any(prefix + part in adapter for part in parts)):
                return [linear(x, prefix + part) for part in parts]
            y = F.linear(x, whole, weights.get(prefix + fused + ".bias"))
            return list(y.split([weights[prefix + part + ".weight"].shape[0] for part in parts], dim=-1))

        for layer in range(self.n_layers):
            p = f"model.layers.{layer}."
            x = self._norm(h, p + "input_layernorm.weight")
            q, k, v = linears(x, p, "self_attn.qkv_proj")
            q = q.view(batch, length, self.n_heads, self.head_dim)
            k = k.view(batch, length, self.n_kv, self.head_dim)
            v = v.view(batch, length, self.n_kv, self.head_dim)
            if qk_norm:  # Qwen3: RMSNorm over each head's query and key, before RoPE
                q = self._norm(q, p + "self_attn.q_norm.weight")
                k = self._norm(k, p + "self_attn.k_norm.weight")
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            if decode is not None:
                attn = decode.attend(layer, q, k, v)
            else:
                if cache is not None:
                    k, v = cache.write(layer, cache_start, k, v)
                attn = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=attn_mask, is_causal=causal and attn_mask is None, enable_gqa=groups > 1
                )
            attn = attn.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
            h = h + linear(attn, p + "self_attn.o_proj")
            x = self._norm(h, p + "post_attention_layernorm.weight")
            gate, up = linears(x, p, "mlp.gate_up_proj")
            gated = F.silu(gate) * up
            h = h + linear(gated, p + "mlp.down_proj")
        return self._norm(h, "model.norm.weight")

    def merged_weights(self, adapter: Adapter, scale: float) -> dict[str, torch.Tensor]:
        """The base weights with `adapter` folded in (W + scale * B @ A), for sampling.

        A merged linear is one matmul instead of three plus an add, at every decoding step of every
        adapted linear (211 for SmolLM2 with every linear adapted); the merge costs about one prefill
        and the merged copy the adapted weights' memory. Kept for the latest adapter
        (keyed by its tensors and their in-place version counters, so an inflight sampler's weights
        updated in place are merged again); the cache holds the tensors, so their ids cannot be reused.
        """
        key = (scale, tuple((name, id(a), a._version, id(b), b._version) for name, (a, b) in adapter.items()))
        if self._merged is not None and self._merged[0] == key:
            return self._merged[2]
        self._merged = None  # free the previous merge before building the next
        weights = dict(self.w)
        for name, (a, b) in adapter.items():
            base = self.w[name + ".weight"]
            delta = (b.to(self.device, torch.float32) @ a.to(self.device, torch.float32)) * scale
            weights[name + ".weight"] = (base.float() + delta).to(self.dtype)
        self._fuse(weights, changed=set(adapter))
        self._merged = (key, adapter, weights)
        return weights

    def target_logprobs(
        self,
        sequences: list[list[int]],
        targets: list[torch.Tensor],
        adapter: Adapter | None,
        scale: float,
        grad_mask: torch.Tensor | None = None,
    ) -> list[torch.Tensor] | torch.Tensor:
        """log p(targets[i][t] | sequences[i][:t+1]) per datum; targets are (T,) or (T, K) int64.

        When every target is 1-D the result is one right-padded (B, width) tensor (one autograd
        node instead of one per datum); otherwise a list of per-datum tensors. `grad_mask` (B, width),
        with 1-D targets and gradients on, marks the positions whose loss can be non-zero: only they
        go through the output head with autograd (the full-vocabulary head and its log-softmax are
        the largest tensors of a step); the others are scored without a graph, so every value is the
        same as without the mask.
        """
        width = max(len(s) for s in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        positions = torch.arange(width).expand(len(sequences), width)
        if all(target.dim() == 1 for target in targets):
            padded = torch.zeros(len(sequences), width, dtype=torch.long)
            for row, target in enumerate(targets):
                padded[row, : target.shape[0]] = target
            padded = padded.to(self.device)
            if grad_mask is not None and not bool(grad_mask.any()):  # no loss anywhere: all advantages 0
                with torch.no_grad():
                    return self.target_logprobs(sequences, targets, adapter, scale)
            h = self.final_hidden(ids, positions, adapter, scale, None, None, 0, True, self.w)
            if grad_mask is None or not torch.is_grad_enabled():
                return self._scored(h, padded, adapter, scale)
            grad_mask = grad_mask.to(self.device)
            out = torch.zeros(len(sequences), width, device=self.device)
            with torch.no_grad():
                out[~grad_mask] = self._scored(h.detach()[~grad_mask], padded[~grad_mask], adapter, scale)
            out[grad_mask] = self._scored(h[grad_mask], padded[grad_mask], adapter, scale)
            return out
        logprobs = torch.log_softmax(self.forward(ids, positions, adapter, scale), dim=-1)
        out = []
        for row, target in enumerate(targets):
            rows = logprobs[row, : target.shape[0]]
            target = target.to(self.device)
            if target.dim() == 1:
                out.append(rows.gather(-1, target[:, None])[:, 0])
            else:
                out.append(rows.gather(-1, target))
        return out

    def _scored(self, h: torch.Tensor, target: torch.Tensor, adapter: Adapter | None, scale: float) -> torch.Tensor:
        """log p(target) under the head's distribution at each hidden state (any leading shape)."""
        if h.numel() == 0:
            return h.new_zeros(target.shape, dtype=torch.float32)
        logprobs = torch.log_softmax(self.head(h, adapter, scale), dim=-1)
        return logprobs.gather(-1, target[..., None])[..., 0]

    # ------------------------------------------------------------------ sampling

    @torch.inference_mode()
    def sample(
        self,
        specs: list[SampleSpec],
        adapter: Adapter | None,
        scale: float,
        decode=None,
        generator: torch.Generator | None = None,
    ) -> list[SampleResult]:
        """Complete every spec `num_samples` times, all in one batch with a KV cache.

        Each prompt is prefilled once (without padding, batched with prompts of its length) and its
        keys/values kept once, left-padded, for all its samples (DecodeCache); decoding then runs one
        token per step for every unfinished row, and rows that finish leave the batch. Tokens are drawn from the
        temperature-scaled, top-k/top-p truncated distribution, but every logprob returned (of the
        sampled token and its top-k) is the untempered model's, as compute_logprobs and the training
        forward pass report it: so an importance ratio is 1 on-policy at any temperature (docs/tinker_local.md,
        "Logprobs and temperature"). `decode(tokens) -> str` is
        needed only for stop strings. The adapter is merged into the weights once (merged_weights).
        """
        weights = self.w if adapter is None else self.merged_weights(adapter, scale)
        rows = [(index, spec) for index, spec in enumerate(specs) for _ in range(spec.num_samples)]
        batch = len(rows)
        row_spec = torch.tensor([index for index, _ in rows])
        spec_lengths = torch.tensor([len(spec.prompt) for spec in specs])
        width = int(spec_lengths.max())
        steps = max(spec.max_tokens for spec in specs)
        spec_pads = width - spec_lengths
        scores_prompt = any(
            spec.prompt_logprobs or spec.topk_prompt_logprobs or spec.target_prompt_ids is not None for spec in specs
        ) or any(spec.prompt_alt_tokens_k for spec in specs)
        results = [SampleResult(sequences=[]) for _ in specs]
        prefix, last_logits = self._prefill(specs, weights, width, scores_prompt, results, generator)

        # Every sample of a prompt attends to that prompt's one copy of its prefilled keys and values.
        cache = DecodeCache(self, prefix, spec_pads, row_spec, steps)
        del prefix
        last = last_logits.index_select(0, row_spec.to(self.device))
        pads = spec_pads[row_spec]
        temperature = torch.tensor([spec.temperature for _, spec in rows])
        top_k = torch.tensor([spec.top_k for _, spec in rows])
        top_p = torch.tensor([spec.top_p for _, spec in rows])
        max_tokens = torch.tensor([spec.max_tokens for _, spec in rows])
        stop_table = torch.zeros(batch, self.vocab_size, dtype=torch.bool)
        for row, (_, spec) in enumerate(rows):
            stop_table[row, [t for t in spec.stop_token_ids if 0 <= t < self.vocab_size]] = True
        string_rows = {row for row, (_, spec) in enumerate(rows) if spec.stop_strings}
        # Enough trailing tokens to contain any stop string (a token is at least one byte).
        tail = 2 + max((len(s.encode()) for _, spec in rows for s in spec.stop_strings), default=0)
        topk_sample = max(spec.topk_sample_logprobs for spec in specs)

        tokens = torch.zeros(batch, steps, dtype=torch.long)
        token_logprobs = torch.zeros(batch, steps)
        topk_ids = torch.zeros(batch, steps, topk_sample, dtype=torch.long) if topk_sample else None
        topk_values = torch.zeros(batch, steps, topk_sample) if topk_sample else None
        lengths = torch.zeros(batch, dtype=torch.long)
        stopped = torch.zeros(batch, dtype=torch.bool)
        live = torch.arange(batch)  # the rows still decoding, in the order of the compute batch
        for step in range(steps):
            live_temperature = temperature[live]
            greedy = live_temperature <= 0
            divisor = torch.where(greedy, torch.ones_like(live_temperature), live_temperature)
            dist = torch.log_softmax(last / divisor[:, None].to(last.device), dim=-1)
            chosen = self._choose(dist, greedy, top_k[live], top_p[live], generator)
            chosen_cpu = chosen.cpu()
            tokens[live, step] = chosen_cpu
            raw = torch.log_softmax(last, dim=-1)  # the model's own distribution: what logprobs report
            token_logprobs[live, step] = raw.gather(-1, chosen[:, None])[:, 0].cpu()
            if topk_sample:
                values, indices = raw.topk(topk_sample, dim=-1)
                topk_ids[live, step], topk_values[live, step] = indices.cpu(), values.cpu()
            lengths[live] += 1
            hit = stop_table[live, chosen_cpu]
            for position, row in enumerate(live.tolist()):
                if row in string_rows and not hit[position]:
                    text = decode(tokens[row, max(0, step + 1 - tail) : step + 1].tolist())
                    hit[position] = any(s in text for s in rows[row][1].stop_strings)
            stopped[live] |= hit
            keep = ~(hit | (lengths[live] >= max_tokens[live]))
            if not bool(keep.any()) or step == steps - 1:
                break
            if not bool(keep.all()):  # finished rows leave the batch
                kept = keep.nonzero()[:, 0]
                live, chosen = live[kept], chosen[kept.to(chosen.device)]
                cache.select(kept.to(self.device))
            cache.length = step
            positions = (width + step - pads[live])[:, None]
            last = self.forward(chosen[:, None], positions, weights=weights, decode=cache)[:, -1]

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

    def _prefill(
        self,
        specs: list[SampleSpec],
        weights,
        width: int,
        scores_prompt: bool,
        results: list[SampleResult],
        generator: torch.Generator | None,
    ) -> tuple[KVCache, torch.Tensor]:
        """Every prompt's keys and values in one cache (left-padded to `width`) and the logits after its
        last token; the prompt scores a spec asks for go into its result."""
        # Prefill without padding: one forward per distinct prompt length (a short prompt batched with a
        # long one would cost the long one's length), placed left-padded into the shared cache.
        cache = KVCache(self, len(specs), width)
        last_logits = torch.empty(len(specs), self.vocab_size, device=self.device)
        by_length: dict[int, list[int]] = {}
        for index, spec in enumerate(specs):
            by_length.setdefault(len(spec.prompt), []).append(index)
        for length, members in by_length.items():
            ids = torch.tensor([specs[i].prompt for i in members], dtype=torch.long)
            part = KVCache(self, len(members), length)
            positions = torch.arange(length).expand(len(members), length)
            logits = self.forward(
                ids, positions, None, 1.0, None, part, 0, last_only=not scores_prompt, weights=weights
            )
            members_index = torch.tensor(members, device=self.device)
            for layer in range(self.n_layers):
                cache.keys[layer][members_index, :, width - length :] = part.keys[layer]
                cache.values[layer][members_index, :, width - length :] = part.values[layer]
            last_logits[members_index] = logits[:, -1]
            if not scores_prompt:
                continue
            for row, index in enumerate(members):
                spec, prompt_logits = specs[index], logits[row].cpu()
                if spec.prompt_logprobs or spec.topk_prompt_logprobs:
                    self._prompt_scores(spec, prompt_logits, results[index])
                if spec.target_prompt_ids is not None:
                    self._target_prompt_scores(spec, prompt_logits, results[index])
                if spec.prompt_alt_tokens_k:
                    self._prompt_alt_tokens(spec, prompt_logits, results[index], generator)
        return cache, last_logits

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
            rank = torch.arange(dist.shape[-1], device=dist.device)[None, :]
            top_k, top_p = top_k.to(dist.device), top_p.to(dist.device)
            drop = (top_k[:, None] > 0) & (rank >= top_k[:, None])
            # top-p: keep the smallest prefix whose mass reaches p (the first token always stays)
            mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
            drop |= mass_before >= top_p[:, None]
            sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
            filtered = torch.full_like(dist, float("-inf")).scatter(-1, order, sorted_lp)
        # Inverse-CDF draw: one uniform per row (torch.multinomial is ~10x slower here).
        cdf = filtered.softmax(-1).cumsum(-1)
        uniform = torch.rand(dist.shape[0], 1, generator=generator).to(dist.device) * cdf[:, -1:]
        drawn = torch.searchsorted(cdf, uniform)[:, 0].clamp(max=dist.shape[-1] - 1)
        return torch.where(greedy.to(dist.device), dist.argmax(-1), drawn) if bool(greedy.any()) else drawn

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
