"""What the engine needs to know about a model folder, read from its files without loading torch.

A servable folder is a Hugging Face causal LM checkpoint: config.json, *.safetensors and a fast
tokenizer (tokenizer.json), of an architecture the engine implements. Anything else is refused with
a ModelError naming what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hermes_rl.core.base.fsutil import read_regular_text

# model_type -> what differs from Llama. Mistral and Qwen2 are Llama with (optional) q/k/v biases and
# a sliding window; Qwen3 adds an RMSNorm over each head's queries and keys.
SUPPORTED_ARCHITECTURES = {"llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {"qk_norm": True}}
SUPPORTED_ROPE_TYPES = ("default", "llama3")


class ModelError(ValueError):
    """A model folder the engine cannot serve; the message names what is missing or unsupported."""


@dataclass(frozen=True)
class ModelSpec:
    model_dir: Path
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    context_length: int
    eos_token_ids: tuple[int, ...]
    tied: bool
    qk_norm: bool
    rope: dict  # rope_type, rope_theta and the scaling parameters of its type
    weight_files: tuple[Path, ...]
    raw: dict = field(repr=False)

    def required_weights(self) -> list[str]:
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        for layer in range(self.num_layers):
            p = f"model.layers.{layer}."
            names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
            names += [p + f"self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj")]
            names += [p + f"mlp.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
            if self.qk_norm:
                names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        return names

    def parameter_estimate(self) -> int:
        """Parameters from the shapes alone (for sizing thread counts before the weights load)."""
        intermediate = int(self.raw.get("intermediate_size") or 4 * self.hidden_size)
        attention = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        per_layer = attention + 3 * self.hidden_size * intermediate
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied else 2)
        return self.num_layers * per_layer + embeddings


def _eos_ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def read_model_config(model_dir: Path) -> ModelSpec:
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise ModelError(f"{model_dir} is not a model folder: it has no config.json")
    try:
        cfg = json.loads(read_regular_text(config_path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{config_path} cannot be read: {exc}") from exc
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"{model_dir}: architecture {model_type!r} is not served by tinker-local "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ModelError(f"{model_dir}: hidden_act {act!r} is not served (only silu)")

    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rope.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    rope["rope_type"] = rope.get("rope_type") or rope.get("type") or "default"
    if rope["rope_type"] not in SUPPORTED_ROPE_TYPES:
        raise ModelError(
            f"{model_dir}: RoPE type {rope['rope_type']!r} is not served (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    if float(cfg.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ModelError(f"{model_dir}: partial rotary embeddings are not served")

    weight_files = tuple(sorted(model_dir.glob("*.safetensors")))
    if not weight_files:
        found = sorted(p.name for p in model_dir.glob("*.bin")) or sorted(p.name for p in model_dir.glob("*.gguf"))
        hint = f" (found {', '.join(found[:3])}: convert it to safetensors first)" if found else ""
        raise ModelError(f"{model_dir}: no *.safetensors weights{hint}")
    if not (model_dir / "tokenizer.json").is_file():
        raise ModelError(f"{model_dir}: no tokenizer.json (a fast tokenizer is needed)")

    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    context = int(cfg.get("max_position_embeddings", 2048))
    # A sliding window changes nothing for sequences no longer than the window: serve up to it.
    window = cfg.get("sliding_window")
    uses_window = model_type == "mistral" or cfg.get("use_sliding_window", False)
    if uses_window and window and int(window) < context:
        context = int(window)

    eos = _eos_ids(cfg.get("eos_token_id"))
    generation = model_dir / "generation_config.json"
    if generation.is_file():
        try:
            eos += [t for t in _eos_ids(json.loads(read_regular_text(generation)).get("eos_token_id"))]
        except (OSError, ValueError):
            pass
    return ModelSpec(
        model_dir=model_dir,
        model_type=model_type,
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        context_length=context,
        eos_token_ids=tuple(sorted(set(eos))),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        qk_norm=bool(SUPPORTED_ARCHITECTURES[model_type].get("qk_norm")),
        rope=rope,
        weight_files=weight_files,
        raw=cfg,
    )
