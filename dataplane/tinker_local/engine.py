"""Llama-family causal LMs in plain torch, with LoRA adapters passed per call.

Why not transformers + peft here: importing them costs ~6-8 s on this machine (the server has
to be ready in seconds), their per-call overhead dominates small models, and sampling needs what
`generate` does not do: one prefill per prompt shared by its samples, finished rows leaving the
batch, per-request LoRA weights. The weights are a Hugging Face folder's safetensors, read directly
(model_config says which architectures); tests check the logits against transformers and the LoRA
against peft, and adapters are saved in peft's format so they load there too.

This module is the model: its weights, adapters and forward, and the scores training asks for
(target_logprobs); sampling on it is decoding.py's.

An adapter is `{module_name: (A, B)}` with A: (rank, in), B: (out, rank); a LoRA linear is
`x @ W.T + scale * (x @ A.T) @ B.T`, as in peft.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F

from . import native_decode
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
# Training rows that begin with this many tokens in common (a GRPO group's prompt) run that prefix once.
SHARED_PREFIX_TOKENS = 32


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


def adapter_key(adapter: Adapter, scale: float) -> tuple:
    """Equal for the same adapter tensors at the same in-place versions and scale: the same merged weights."""
    return (scale, tuple((name, id(a), a._version, id(b), b._version) for name, (a, b) in adapter.items()))


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


class KeyValues(Protocol):
    """Where a pass keeps its keys and values: a KVCache, or a shared prefix's (_PrefixKeyValues)."""

    def reserve(self, length: int) -> None: ...

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class _PrefixKeyValues:
    """A shared-prefix pass (target_logprobs): each layer's prefix keys and values, kept with their graph; the
    rows' pass after it attends to its row's prefix (`rows`: the prefix of each row) followed by its own."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows: torch.Tensor | None = None

    def reserve(self, length: int) -> None:
        pass

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rows is None:  # the prefix pass
            self.keys.append(k)
            self.values.append(v)
            return k, v
        prefix_k = self.keys[layer].index_select(0, self.rows)
        prefix_v = self.values[layer].index_select(0, self.rows)
        return torch.cat((prefix_k, k), dim=2), torch.cat((prefix_v, v), dim=2)


def shared_prefixes(sequences: list[list[int]], least: int) -> list[tuple[list[int], int]]:
    """Groups of rows that begin with the same `least` or more tokens (a GRPO group's prompt): (rows, the length
    of their common prefix, at most each row's length less one), largest saving first; rows alone are left out."""
    order = sorted(range(len(sequences)), key=sequences.__getitem__)
    groups: list[tuple[list[int], int]] = []
    rows, shared = [order[0]], 0
    for before, row in zip(order, order[1:]):
        a, b = sequences[before], sequences[row]
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if common >= least:
            shared = common if len(rows) == 1 else min(shared, common)
            rows.append(row)
            continue
        if len(rows) > 1:
            groups.append((rows, shared))
        rows, shared = [row], 0
    if len(rows) > 1:
        groups.append((rows, shared))
    groups = [(sorted(rows), min(shared, *(len(sequences[r]) - 1 for r in rows))) for rows, shared in groups]
    return sorted((g for g in groups if g[1] >= least), key=lambda g: -(len(g[0]) - 1) * g[1])


class DecodeAttention(Protocol):
    """What a one-token decoding step attends with instead of a KVCache (decoding.DecodeCache)."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...

    def native_hidden(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, model: tuple) -> torch.Tensor: ...


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
        half = self.inv_freq.shape[0]
        self._rope_signs = torch.cat((-torch.ones(half), torch.ones(half))).to(self.device)
        self._merged: tuple[tuple, Adapter, dict[str, torch.Tensor]] | None = None
        # Forwards without an adapter (sampling, base logprobs) on a CPU in bf16 multiply by oneDNN's blocked
        # copies of the weights (_packed).
        self._packs_weights = (
            self.device.type == "cpu" and self.dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
        )
        self._packs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._native: tuple[dict[str, torch.Tensor], list[torch.Tensor] | None] | None = None
        if self.device.type == "cpu" and spec.parameter_estimate() >= native_decode.WORTH_BUILDING_PARAMETERS:
            native_decode.start()

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

    def _dense(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pack: bool) -> torch.Tensor:
        """x @ weight.T + bias; with `pack`, by oneDNN's blocked copy of the weight (_packed)."""
        if pack and self._packs_weights:
            return torch.ops.mkldnn._linear_pointwise(x, self._packed(weight), bias, "none", [], "")
        return F.linear(x, weight, bias)

    def _packed(self, weight: torch.Tensor) -> torch.Tensor:
        """A bf16 weight reordered once into oneDNN's blocked layout: F.linear takes the plain layout and,
        at a few rows, spent up to 2x the time on this CPU (SmolLM2's projections at 8 rows), at one row
        ~25x (the 49k-token head: 75 ms against 3 ms, a prefill's last position); at 196 rows the two are
        within 3 %. The results are bit-equal. Weights are never changed in place (a merge makes new ones)."""
        entry = self._packs.get(id(weight))  # the entry holds the weight: its id is not reused meanwhile
        if entry is None:
            if len(self._packs) > 4 * len(self.w):  # merges come and go: keep the base weights' copies
                base = {id(t) for t in self.w.values()}
                self._packs = {key: value for key, value in self._packs.items() if key in base}
            entry = (weight, torch.ops.mkldnn._reorder_linear_weight(weight, 8))
            self._packs[id(weight)] = entry
        return entry[1]

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        # As transformers' LlamaRMSNorm: the statistics in float32, the result in the weights' dtype.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.w[name] * normed.to(x.dtype)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (the first half negated, see _rotate), each (B, 1, T, head_dim)."""
        freqs = positions.to(self.device, torch.float32)[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        signed_sin = emb.sin() * self._rope_signs
        return emb.cos().to(self.dtype)[:, None], signed_sin.to(self.dtype)[:, None]

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        # transformers' x * cos + cat(-x2, x1) * sin, bit for bit (negating is exact), in 4 ops, not 7
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        adapter: Adapter | None = None,
        scale: float = 1.0,
        attn_mask: torch.Tensor | None = None,
        cache: KeyValues | None = None,
        cache_start: int = 0,
        causal: bool = True,
        last_only: bool = False,
        weights: dict[str, torch.Tensor] | None = None,
        decode: DecodeAttention | None = None,
    ) -> torch.Tensor:
        """Float32 logits (B, T, V), or (B, 1, V) for the last position only with `last_only`.
        Without a mask attention is causal if `causal` (right padding is then harmless); a one-token
        decode step passes causal=False.

        With `cache`, keys/values of these T tokens are written at [cache_start, cache_start+T)
        and attention covers the cache up to there; `attn_mask` (B, 1, T, cache_start+T) says
        which of those keys each query may see. `weights` replaces the base weights (a merged adapter).
        With `decode` (one token per row, T = 1) attention is its `attend` instead (decoding.DecodeCache).
        """
        weights = self.w if weights is None else weights
        h = self.final_hidden(ids, positions, adapter, scale, attn_mask, cache, cache_start, causal, weights, decode)
        if last_only:  # contiguous: on a slice F.linear copied the head's weight once per row (0.6 s at 8 rows)
            h = h[:, -1:].contiguous()
        if adapter is None:
            return self._dense(
                h, weights[UNEMBED_MODULE + ".weight"], weights.get(UNEMBED_MODULE + ".bias"), True
            ).float()
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
        cache: KeyValues | None,
        cache_start: int,
        causal: bool,
        weights: dict[str, torch.Tensor],
        decode: DecodeAttention | None = None,
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
        if decode is not None and adapter is None:
            layers = self._native_layers(weights)
            if layers is not None:
                model = (layers, self.w["model.norm.weight"], self._packs_weights, self.eps, self.n_heads)
                return decode.native_hidden(h, cos, sin, model)
        if cache is not None:
            cache.reserve(cache_start + length)

        pack = adapter is None  # merged or base weights alone: oneDNN's packed copies where they apply (_dense)

        def linear(x: torch.Tensor, name: str) -> torch.Tensor:
            if pack:
                return self._dense(x, weights[name + ".weight"], weights.get(name + ".bias"), True)
            return self._linear(x, name, adapter, scale, weights)

        def linears(x: torch.Tensor, prefix: str, fused: str) -> tuple[list[torch.Tensor], torch.Tensor | None]:
            """The outputs of a FUSED_MODULES group, and the one matmul's output they are views of (None
            where the adapter adapts a part, which then runs alone)."""
            parts = FUSED_MODULES[fused]
            whole = weights.get(prefix + fused + ".weight")
            if whole is None or (adapter is not None and any(prefix + part in adapter for part in parts)):
                return [linear(x, prefix + part) for part in parts], None
            y = self._dense(x, whole, weights.get(prefix + fused + ".bias"), pack)
            return list(y.split([weights[prefix + part + ".weight"].shape[0] for part in parts], dim=-1)), y

        for layer in range(self.n_layers):
            p = f"model.layers.{layer}."
            x = self._norm(h, p + "input_layernorm.weight")
            (q, k, v), qkv = linears(x, p, "self_attn.qkv_proj")
            v = v.view(batch, length, self.n_kv, self.head_dim).transpose(1, 2)
            if qkv is not None and not qk_norm:  # queries and keys side by side in qkv: one rotation
                heads = self.n_heads + self.n_kv
                qk = qkv[..., : heads * self.head_dim].view(batch, length, heads, self.head_dim)
                qk = self._rotate(qk.transpose(1, 2), cos, sin)
                q, k = qk[:, : self.n_heads], qk[:, self.n_heads :]
            else:
                q = q.view(batch, length, self.n_heads, self.head_dim)
                k = k.view(batch, length, self.n_kv, self.head_dim)
                if qk_norm:  # Qwen3: RMSNorm over each head's query and key, before RoPE
                    q = self._norm(q, p + "self_attn.q_norm.weight")
                    k = self._norm(k, p + "self_attn.k_norm.weight")
                q = self._rotate(q.transpose(1, 2), cos, sin)
                k = self._rotate(k.transpose(1, 2), cos, sin)
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
            (gate, up), _ = linears(x, p, "mlp.gate_up_proj")
            gated = F.silu(gate) * up
            h = h + linear(gated, p + "mlp.down_proj")
        return self._norm(h, "model.norm.weight")

    def _native_layers(self, weights: dict[str, torch.Tensor]) -> list[torch.Tensor] | None:
        """Each layer's tensors as native_decode's C++ step takes them, or None where it cannot run (not
        built, not a CPU, per-head query/key norms, unfused or unequal gate/up weights)."""
        if native_decode.op() is None:
            return None
        if self._native is not None and self._native[0] is weights:
            return self._native[1]
        none = torch.empty(0, device=self.device)

        def matrix(name: str) -> list[torch.Tensor]:
            weight = weights[name + ".weight"]
            packed = self._packed(weight) if self._packs_weights else weight
            return [packed, weights.get(name + ".bias", none)]

        def runs(p: str) -> bool:
            fused = all(p + name + ".weight" in weights for name in FUSED_MODULES)
            return fused and weights[p + "mlp.gate_proj.weight"].shape == weights[p + "mlp.up_proj.weight"].shape

        prefixes = [f"model.layers.{layer}." for layer in range(self.n_layers)]
        layers: list[torch.Tensor] | None = None
        if self.device.type == "cpu" and not self.spec.qk_norm and all(runs(p) for p in prefixes):
            layers = []
            for p in prefixes:
                layers += [self.w[p + "input_layernorm.weight"], *matrix(p + "self_attn.qkv_proj")]
                layers += [*matrix(p + "self_attn.o_proj"), self.w[p + "post_attention_layernorm.weight"]]
                layers += [*matrix(p + "mlp.gate_up_proj"), *matrix(p + "mlp.down_proj")]
        self._native = (weights, layers)
        return layers

    def merged_weights(self, adapter: Adapter, scale: float) -> dict[str, torch.Tensor]:
        """The base weights with `adapter` folded in (W + scale * B @ A), for sampling.

        A merged linear is one matmul instead of three plus an add, at every decoding step of every
        adapted linear (211 for SmolLM2 with every linear adapted); the merge costs about one prefill
        and the merged copy the adapted weights' memory. Kept for the latest adapter
        (keyed by its tensors and their in-place version counters, so an inflight sampler's weights
        updated in place are merged again); the cache holds the tensors, so their ids cannot be reused.
        """
        key = adapter_key(adapter, scale)
        if self._merged is not None and self._merged[0] == key:
            return self._merged[2]
        # Free the previous merge before building the next, its packed copies too (they hold its tensors:
        # kept until a size bound instead, 4 GB stayed alive after four GRPO steps); a batch that still
        # decodes on it packs what it uses again, once.
        self._merged = None
        self._native = None  # the C++ step's tensors of the previous merge go with it
        base_ids = {id(t) for t in self.w.values()}
        self._packs = {ident: entry for ident, entry in self._packs.items() if ident in base_ids}
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
        same as without the mask. With 1-D targets, rows that begin with SHARED_PREFIX_TOKENS or more tokens
        in common (a GRPO group's prompt) run that prefix once (_hidden_sharing): the same values.
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
            groups = shared_prefixes(sequences, SHARED_PREFIX_TOKENS) if len(sequences) > 1 else []
            if groups:
                h = self._hidden_sharing(sequences, groups, width, adapter, scale)
            else:
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

    def _hidden_sharing(
        self,
        sequences: list[list[int]],
        groups: list[tuple[list[int], int]],
        width: int,
        adapter: Adapter | None,
        scale: float,
    ) -> torch.Tensor:
        """final_hidden of right-padded `sequences` (B, width, hidden), each group's common prefix run once:
        a pass over the prefixes, then one over every row's rest attending to its prefix's keys and values
        (rows in no group have an empty prefix). Gradients reach the prefix through every row that reads it."""
        device = self.device
        prefix_of = [-1] * len(sequences)  # per row, its group
        shared = [0] * len(sequences)
        for index, (rows, length) in enumerate(groups):
            for row in rows:
                prefix_of[row], shared[row] = index, length
        longest = max(length for _, length in groups)
        prefix_ids = torch.zeros(len(groups), longest, dtype=torch.long)
        for index, (rows, length) in enumerate(groups):
            prefix_ids[index, :length] = torch.tensor(sequences[rows[0]][:length], dtype=torch.long)
        keys_values = _PrefixKeyValues()
        prefix_positions = torch.arange(longest).expand(len(groups), longest)
        prefix_h = self.final_hidden(prefix_ids, prefix_positions, adapter, scale, None, keys_values, 0, True, self.w)

        rest = max(len(seq) - start for seq, start in zip(sequences, shared))
        ids = torch.zeros(len(sequences), rest, dtype=torch.long)
        for row, (seq, start) in enumerate(zip(sequences, shared)):
            ids[row, : len(seq) - start] = torch.tensor(seq[start:], dtype=torch.long)
        starts = torch.tensor(shared)
        positions = starts[:, None] + torch.arange(rest)[None, :]
        sees_prefix = torch.arange(longest)[None, :] < starts[:, None]  # (B, longest): its own prefix only
        causal = torch.ones(rest, rest, dtype=torch.bool).tril()
        mask = torch.cat((sees_prefix[:, None, :].expand(-1, rest, -1), causal.expand(len(sequences), -1, -1)), dim=2)
        prefix_row = torch.tensor([max(group, 0) for group in prefix_of])  # a row in no group: any (unseen)
        keys_values.rows = prefix_row.to(device)
        rest_h = self.final_hidden(ids, positions, adapter, scale, mask[:, None], keys_values, 0, False, self.w)

        # each (row, position) from where it was computed: its prefix's pass, or its own
        at = torch.arange(width)[None, :].expand(len(sequences), -1)
        from_prefix = prefix_row[:, None] * longest + at
        own = len(groups) * longest + torch.arange(len(sequences))[:, None] * rest + (at - starts[:, None])
        own = torch.where(at - starts[:, None] < rest, own, 0)  # right padding: any row will do
        index = torch.where(at < starts[:, None], from_prefix, own).reshape(-1).to(device)
        flat = torch.cat((prefix_h.reshape(-1, prefix_h.shape[-1]), rest_h.reshape(-1, rest_h.shape[-1])))
        return flat.index_select(0, index).view(len(sequences), width, -1)

    def _scored(self, h: torch.Tensor, target: torch.Tensor, adapter: Adapter | None, scale: float) -> torch.Tensor:
        """log p(target) under the head's distribution at each hidden state (any leading shape)."""
        if h.numel() == 0:
            return h.new_zeros(target.shape, dtype=torch.float32)
        logprobs = torch.log_softmax(self.head(h, adapter, scale), dim=-1)
        return logprobs.gather(-1, target[..., None])[..., 0]
