"""The state behind the protocol: training models (LoRA + Adam), sampler snapshots, and their saves
and loads (the files themselves: checkpoints.py).

Everything here runs on the server's single worker thread, in request order, except the
small registry reads/writes the HTTP layer does under `ModelState.lock`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from hermes_rl.core.base.fsutil import read_regular_text
from hermes_rl.core.base.names import is_name

from . import catalog
from .batch import SampleBatch, weights_key
from .billing_events import UsageLedger
from .checkpoints import (
    NAME_RE,
    age_recipients,
    checkpoint_path,
    encrypt_export,
    read_checkpoint,
    read_moments,
    write_checkpoint,
)
from .decoding import SampleResult, SampleSpec
from .engine import LORA_ALPHA, Adapter, CausalLM
from .sample_request import check_tokens, parse_spec
from .wire import (
    ForwardBackwardRequest,
    UserError,
    encode_forward_backward_output,
    encode_sample_response,
    number,
)

log = logging.getLogger("tinker_local")

SUPPORTED_LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
# loss_fn_config keys each loss accepts, with their defaults. Definitions and defaults follow
# https://tinker-docs.thinkingmachines.ai/tinker/losses (pages ppo, cispo, dro); DRO's page gives
# no default beta, so the value of its example (0.05) is used.
LOSS_CONFIG_DEFAULTS: dict[str, dict[str, float]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.05},
}
SNAPSHOTS_KEPT_PER_MODEL = 32
LOADED_CHECKPOINTS_KEPT = 16


@dataclass
class TrainModel:
    model_id: str
    session_id: str
    base_model: str
    rank: int
    flags: dict  # train_attn / train_mlp / train_unembed
    seed: int | None
    params: dict[str, tuple[torch.Tensor, torch.Tensor]]
    adam_step: int = 0
    adam_m: dict[str, torch.Tensor] = field(default_factory=dict)
    adam_v: dict[str, torch.Tensor] = field(default_factory=dict)
    pending_backward: int = 0  # forward_backward calls accumulated since the last optim_step
    last_request: float = field(default_factory=time.time)

    @property
    def scale(self) -> float:
        return LORA_ALPHA / self.rank

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, (a, b) in self.params.items():
            out[f"{name}.lora_A"] = a
            out[f"{name}.lora_B"] = b
        return out

    def snapshot(self) -> Adapter:
        return {name: (a.detach().clone(), b.detach().clone()) for name, (a, b) in self.params.items()}


@dataclass
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    owner: str | None  # training model id for snapshots
    adapter: Adapter | None = None
    scale: float = 1.0


class ModelState:
    def __init__(self, model_dir: Path, checkpoint_dir: Path, dtype: str = "auto"):
        self.model_dir = Path(model_dir).resolve()
        self.checkpoint_dir = Path(checkpoint_dir).resolve()
        self.base_model = str(self.model_dir)
        self.lm = CausalLM(self.model_dir, dtype=dtype)
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.lock = threading.RLock()
        self.models: dict[str, TrainModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self._snapshots: dict[str, list[str]] = {}  # owner model id -> snapshot sampler ids, oldest first
        self._loaded: OrderedDict[str, tuple[Adapter, float]] = OrderedDict()  # checkpoint path -> adapter
        self._inflight: dict[str, Adapter] = {}  # training model id -> the weights its inflight samplers use
        self.usage = UsageLedger()  # tokens processed per session and hour (billing usage events)

    # ------------------------------------------------------------------ names

    def canonical_base_model(self, name: str | None) -> str:
        """The served model accepts its folder path or its folder name."""
        if name and (name == self.base_model or name == self.model_dir.name or _same_path(name, self.model_dir)):
            return self.base_model
        raise UserError(
            f"unknown base model {name!r}: this tinker-local server serves {self.base_model!r} "
            f"(also accepted as {self.model_dir.name!r})"
        )

    def model(self, model_id: str) -> TrainModel:
        with self.lock:
            found = self.models.get(model_id)
        if found is None:
            raise UserError(f"unknown model id {model_id!r} (tinker-local keeps models only while it runs)")
        found.last_request = time.time()
        return found

    def info(self, model_id: str) -> dict:
        model = self.model(model_id)
        return {
            "type": "get_info",
            "model_id": model.model_id,
            "model_data": {
                "arch": self.lm.spec.model_type,
                "model_name": model.base_model,
                "tokenizer_id": self.base_model,
                **self.lm.describe(),
            },
            "is_lora": True,
            "lora_rank": model.rank,
            "model_name": model.base_model,
        }

    # ------------------------------------------------------------------ training

    def create_model(self, request: dict) -> dict:
        session_id = str(request.get("session_id") or "")
        base_model = self.canonical_base_model(request.get("base_model"))
        lora = request.get("lora_config") or {}
        optimizer = (request.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise UserError(
                f"create_model: optimizer {optimizer!r} is not available locally (tinker-local implements Adam only)"
            )
        rank = number(lora.get("rank", 0), "lora_config.rank", 1, 512, integer=True)
        flags = {key: bool(lora.get(key, True)) for key in ("train_attn", "train_mlp", "train_unembed")}
        if not any(flags.values()):
            raise UserError("at least one of train_attn, train_mlp, train_unembed must be true")
        model_id = f"{session_id}:train:{_seq_id(request)}"
        seed = lora.get("seed")
        seed = None if seed is None else number(seed, "lora_config.seed", -(2**63), 2**64 - 1, integer=True)
        model = self._new_model(model_id, session_id, base_model, rank, flags, seed)
        log.info("created model %s (LoRA rank %d, %d adapted modules)", model_id, rank, len(model.params))
        return {"type": "create_model", "model_id": model_id}

    def _new_model(
        self, model_id: str, session_id: str, base_model: str, rank: int, flags: dict, seed: int | None
    ) -> TrainModel:
        with self.lock:
            if model_id in self.models:
                raise UserError(f"model {model_id!r} already exists")
        modules = self.lm.lora_modules(**flags)
        adapter = self.lm.new_adapter(rank, modules, seed)
        params = {name: (a.requires_grad_(True), b.requires_grad_(True)) for name, (a, b) in adapter.items()}
        model = TrainModel(model_id, session_id, base_model, rank, flags, seed, params)
        with self.lock:
            self.models[model_id] = model
        return model

    def forward_backward(self, request: ForwardBackwardRequest) -> bytes:
        model = self.model(request.model_id)
        if request.loss_fn not in SUPPORTED_LOSSES:
            raise UserError(
                f"loss_fn {request.loss_fn!r} is not supported by tinker-local "
                f"(supported: {', '.join(SUPPORTED_LOSSES)})"
            )
        if not request.data:
            raise UserError("forward_backward needs at least one datum")
        config = loss_config(request.loss_fn, request.loss_fn_config)
        sequences, targets, extras = [], [], []
        for index, datum in enumerate(request.data):
            target, extra = self._loss_inputs(request.loss_fn, datum.inputs, len(datum.tokens), index)
            if len(datum.tokens) == 0:
                raise UserError(f"datum {index}: model_input is empty")
            check_tokens(datum.tokens, f"datum {index} model_input", self.lm.vocab_size)
            check_tokens(target.reshape(-1).tolist(), f"datum {index} target_tokens", self.lm.vocab_size)
            sequences.append(datum.tokens)
            targets.append(torch.from_numpy(np.array(target, dtype=np.int64)))
            extras.append(extra)

        with torch.set_grad_enabled(not request.forward_only):
            adapter = {name: pair for name, pair in model.params.items()}
            grad_mask = None if request.forward_only else loss_positions(request.loss_fn, extras)
            logprobs = self.lm.target_logprobs(sequences, targets, adapter, model.scale, grad_mask)
            if isinstance(logprobs, torch.Tensor):  # 1-D targets: the whole batch as padded tensors
                lengths = [len(t) for t in targets]
                mask = torch.arange(logprobs.shape[1])[None, :] < torch.tensor(lengths)[:, None]
                mask = mask.to(logprobs.device)
                padded = {
                    name: _pad([extra[name] for extra in extras], logprobs.shape[1]).to(logprobs.device)
                    for name in extras[0]
                }
                elementwise = elementwise_loss(request.loss_fn, logprobs, padded, config) * mask
                total = elementwise.sum()
                outputs = [
                    {
                        "logprobs": logprobs[i, :n].detach().cpu().numpy(),
                        "elementwise_loss": elementwise[i, :n].detach().cpu().numpy(),
                    }
                    for i, n in enumerate(lengths)
                ]
            else:
                total = torch.zeros((), device=self.lm.device)
                outputs = []
                for lp, extra in zip(logprobs, extras, strict=True):
                    extra = {name: value.to(lp.device) for name, value in extra.items()}
                    elementwise = elementwise_loss(request.loss_fn, lp, extra, config)
                    total = total + elementwise.sum()
                    outputs.append(
                        {"logprobs": lp.detach().cpu().numpy(), "elementwise_loss": elementwise.detach().cpu().numpy()}
                    )
            if not request.forward_only:
                if total.requires_grad:  # else no position has a loss: every gradient is 0 (optim_step's default)
                    total.backward()
                model.pending_backward += 1
        metrics = {"loss:sum": float(total.detach())}
        self.usage.add(model.session_id, model.base_model, "training", sum(len(seq) for seq in sequences))
        return encode_forward_backward_output(outputs, metrics)

    def _loss_inputs(self, loss_fn: str, inputs: dict[str, np.ndarray], length: int, index: int):
        def need(name: str) -> np.ndarray:
            if name not in inputs:
                raise UserError(
                    f"datum {index}: {loss_fn} needs loss_fn_inputs[{name!r}] (got {sorted(inputs) or 'none'})"
                )
            return inputs[name]

        target = need("target_tokens")
        if target.ndim not in (1, 2) or target.shape[0] != length:
            raise UserError(
                f"datum {index}: target_tokens has shape {list(target.shape)} but model_input has "
                f"{length} tokens (one target per input position)"
            )
        extra = {}
        names = ("weights",) if loss_fn == "cross_entropy" else ("logprobs", "advantages")
        for name in names:
            value = need(name)
            if value.shape != target.shape:
                raise UserError(
                    f"datum {index}: {name} has shape {list(value.shape)}, target_tokens has {list(target.shape)}"
                )
            extra[name] = torch.from_numpy(np.array(value, dtype=np.float32))
        return target, extra

    def optim_step(self, request: dict) -> dict:
        model = self.model(str(request.get("model_id")))
        if "adam_params" not in request:
            other = (request.get("optimizer_params") or {}).get("type", "unknown")
            raise UserError(
                f"optim_step: the {other!r} optimizer is not available locally (tinker-local implements Adam "
                "only: pass AdamParams)"
            )
        params = request["adam_params"] or {}
        if not isinstance(params, dict):
            raise UserError("optim_step: adam_params must be an object")
        lr = number(params.get("learning_rate", 1e-4), "adam_params.learning_rate", 0, 1)
        beta1 = number(params.get("beta1", 0.9), "adam_params.beta1", 0, 1, high_open=True)
        beta2 = number(params.get("beta2", 0.95), "adam_params.beta2", 0, 1, high_open=True)
        eps = number(params.get("eps", 1e-12), "adam_params.eps", 0, 1)
        weight_decay = number(params.get("weight_decay", 0.0), "adam_params.weight_decay", 0, 1)
        clip = number(params.get("grad_clip_norm", 0.0), "adam_params.grad_clip_norm", 0, 1e6)
        tensors = model.tensors()
        grads = {name: (t.grad if t.grad is not None else torch.zeros_like(t)) for name, t in tensors.items()}
        grad_norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))
        factor = clip / grad_norm if clip > 0 and grad_norm > clip else 1.0
        model.adam_step += 1
        step = model.adam_step
        with torch.no_grad():
            for name, tensor in tensors.items():
                grad = grads[name] * factor
                m = model.adam_m.setdefault(name, torch.zeros_like(tensor))
                v = model.adam_v.setdefault(name, torch.zeros_like(tensor))
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if weight_decay:
                    tensor.mul_(1 - lr * weight_decay)  # decoupled, as AdamW
                m_hat = m / (1 - beta1**step)
                v_hat = v / (1 - beta2**step)
                tensor.sub_(lr * m_hat / (v_hat.sqrt() + eps))
                tensor.grad = None
        accumulated = model.pending_backward
        model.pending_backward = 0
        return {
            "metrics": {
                "grad_norm": grad_norm,
                "learning_rate": lr,
                "step": float(step),
                "accumulated_backward_passes": float(accumulated),
            }
        }

    def unload_model(self, request: dict) -> dict:
        model_id = str(request.get("model_id"))
        self.model(model_id)
        self.drop_models(lambda model: model.model_id == model_id)
        return {"type": "unload_model", "model_id": model_id}

    def drop_models(self, predicate) -> None:
        with self.lock:
            gone = [model_id for model_id, model in self.models.items() if predicate(model)]
            for model_id in gone:
                del self.models[model_id]
                self._inflight.pop(model_id, None)
                for sampler_id in self._snapshots.pop(model_id, []):
                    self.samplers.pop(sampler_id, None)
        for model_id in gone:
            log.info("released model %s", model_id)

    # ------------------------------------------------------------------ samplers and checkpoints

    def save_weights_for_sampler(self, request: dict) -> dict:
        model = self.model(str(request.get("model_id")))
        name = request.get("path")
        if name:
            path = self._save_checkpoint(model, "sampler_weights", str(name), overwrite=True, optimizer=False)
            self._record_ttl(model, "sampler_weights", str(name), request.get("ttl_seconds"))
            return {"type": "save_weights_for_sampler", "path": path}
        session_seq = request.get("sampling_session_seq_id")
        suffix = session_seq if session_seq is not None else f"s{time.monotonic_ns()}"
        sampler_id = f"{model.session_id}:sample:{suffix}"
        if request.get("kind") == "inflight":
            # Every inflight sampler of a model shares one mutable target; each inflight save
            # republishes the current weights into it (SamplingClientKind in the SDK).
            target = self._inflight.setdefault(model.model_id, {})
            target.clear()
            target.update(model.snapshot())
        else:
            target = model.snapshot()
        sampler = Sampler(sampler_id, model.base_model, None, model.model_id, target, model.scale)
        with self.lock:
            self.samplers[sampler_id] = sampler
            kept = self._snapshots.setdefault(model.model_id, [])
            kept.append(sampler_id)
            while len(kept) > SNAPSHOTS_KEPT_PER_MODEL:
                self.samplers.pop(kept.pop(0), None)
        return {"type": "save_weights_for_sampler", "sampling_session_id": sampler_id}

    def create_sampling_session(self, request: dict) -> dict:
        session_id = str(request.get("session_id") or "")
        sampler_id = f"{session_id}:sample:{request.get('sampling_session_seq_id', time.monotonic_ns())}"
        model_path = request.get("model_path")
        if model_path:
            directory = self.checkpoint_path(str(model_path))
            if not (directory / "adapter_model.safetensors").exists():
                raise UserError(f"no checkpoint at {model_path}")
            base_model = json.loads(read_regular_text(directory / "state.json"))["base_model"]
            sampler = Sampler(sampler_id, base_model, str(model_path), None)
        else:
            sampler = Sampler(sampler_id, self.canonical_base_model(request.get("base_model")), None, None)
        with self.lock:
            self.samplers[sampler_id] = sampler
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    def sampler(self, sampler_id: str) -> Sampler:
        with self.lock:
            found = self.samplers.get(sampler_id)
        if found is None:
            raise UserError(
                f"unknown or expired sampling session {sampler_id!r} (tinker-local keeps the "
                f"{SNAPSHOTS_KEPT_PER_MODEL} most recent snapshots per training model)"
            )
        return found

    def sampler_info(self, sampler_id: str) -> dict:
        sampler = self.sampler(sampler_id)
        return {"sampler_id": sampler.sampler_id, "base_model": sampler.base_model, "model_path": sampler.model_path}

    def _sampler_adapter(self, sampler: Sampler) -> tuple[Adapter | None, float]:
        if sampler.model_path is None:
            return sampler.adapter, sampler.scale
        cached = self._loaded.get(sampler.model_path)
        if cached is None:
            adapter, rank, _state = read_checkpoint(self.checkpoint_path(sampler.model_path), self.lm.device)
            cached = (adapter, LORA_ALPHA / rank)
            self._loaded[sampler.model_path] = cached
            while len(self._loaded) > LOADED_CHECKPOINTS_KEPT:
                self._loaded.popitem(last=False)
        self._loaded.move_to_end(sampler.model_path)
        return cached

    def checkpoint_path(self, tinker_path: str) -> Path:
        """The folder of a tinker://MODEL_ID/{weights,sampler_weights}/NAME checkpoint, inside --checkpoint-dir."""
        return checkpoint_path(self.checkpoint_dir, tinker_path)

    def save_weights(self, request: dict) -> dict:
        model = self.model(str(request.get("model_id")))
        name = str(request.get("path") or "")
        path = self._save_checkpoint(model, "weights", name, overwrite=bool(request.get("overwrite")), optimizer=True)
        self._record_ttl(model, "weights", name, request.get("ttl_seconds"))
        return {"type": "save_weights", "path": path}

    def _record_ttl(self, model: TrainModel, kind: str, name: str, ttl_seconds) -> None:
        if ttl_seconds is not None:
            catalog.set_ttl(self.checkpoint_dir, model.model_id, kind, name, ttl_seconds)

    def save_weights_external(self, request: dict) -> dict:
        """The adapter in peft format (adapter_model.safetensors + adapter_config.json) under
        CHECKPOINT_DIR/<model>/external_weights/NAME; with age_encryption_recipients each file is
        age-encrypted to them (NAME.age), as tinker-cookbook's weights.download asks."""
        requested = request.get("age_encryption_recipients")
        recipients = age_recipients(requested) if requested else []  # refused before anything is written
        model = self.model(str(request.get("model_id")))
        name = str(request.get("path") or "")
        path = self._save_checkpoint(model, "external_weights", name, overwrite=False, optimizer=False)
        folder = self.checkpoint_path(path)
        if recipients:
            encrypt_export(folder, recipients)
        self._record_ttl(model, "external_weights", name, request.get("ttl_seconds"))
        size = sum(item.stat().st_size for item in folder.iterdir() if item.is_file())
        return {"type": "save_weights_external", "path": path, "size_bytes": size}

    def _save_checkpoint(self, model: TrainModel, kind: str, name: str, overwrite: bool, optimizer: bool) -> str:
        if not is_name(NAME_RE, name):
            raise UserError(f"checkpoint name {name!r} must be 1-128 letters, digits, '.', '_' or '-'")
        tinker_path = f"tinker://{model.model_id}/{kind}/{name}"
        directory = self.checkpoint_path(tinker_path)
        if directory.exists() and not overwrite:
            raise UserError(f"checkpoint {tinker_path} already exists (pass overwrite=True to replace it)")
        write_checkpoint(directory, model, self.base_model, optimizer)
        with self.lock:
            self._loaded.pop(tinker_path, None)
        log.info("saved %s -> %s", tinker_path, directory)
        return tinker_path

    def load_weights(self, request: dict) -> dict:
        tinker_path = str(request.get("path") or "")
        directory = self.checkpoint_path(tinker_path)
        adapter, rank, state = read_checkpoint(directory, self.lm.device)
        with_optimizer = bool(request.get("optimizer"))
        if request.get("session_id") is not None:  # create-via-load: a new model from the checkpoint
            model_id = f"{request['session_id']}:train:{_seq_id(request)}"
            base_model = self.canonical_base_model(request.get("base_model") or state["base_model"])
            model = self._new_model(
                model_id, str(request["session_id"]), base_model, rank, state["flags"], state.get("seed")
            )
        else:
            model = self.model(str(request.get("model_id")))
            if model.rank != rank or set(model.params) != set(adapter):
                raise UserError(
                    f"checkpoint {tinker_path} (rank {rank}) does not fit model {model.model_id} (rank {model.rank})"
                )
        with torch.no_grad():
            for name, (a, b) in adapter.items():
                model.params[name][0].copy_(a)
                model.params[name][1].copy_(b)
                model.params[name][0].grad = None
                model.params[name][1].grad = None
        model.adam_m, model.adam_v, model.adam_step = {}, {}, 0
        moments = read_moments(directory, self.lm.device) if with_optimizer else None
        if moments is not None:
            model.adam_m, model.adam_v = moments
            model.adam_step = int(state.get("adam_step", 0))
        log.info("loaded %s into %s (optimizer state: %s)", tinker_path, model.model_id, with_optimizer)
        return {"type": "load_weights", "path": tinker_path, "model_id": model.model_id}

    # ------------------------------------------------------------------ sampling

    def parse_sample(self, request: dict) -> tuple[Sampler, SampleSpec]:
        """The sampler an asample request names and its validated spec (sample_request.parse_spec); raises
        UserError. Cheap: runs on the HTTP thread too."""
        sampler_id = request.get("sampling_session_id")
        if sampler_id:
            sampler = self.sampler(str(sampler_id))
        elif request.get("model_path"):
            sampler = self.sampler(
                self.create_sampling_session({"model_path": request["model_path"]})["sampling_session_id"]
            )
        else:
            sampler = Sampler("base", self.canonical_base_model(request.get("base_model")), None, None)
        return sampler, parse_spec(request, self.lm)

    def sample_batch(self, sampler: Sampler) -> SampleBatch:
        """A running batch for the requests that sample this sampler's weights (the worker adds them)."""
        adapter, scale = self._sampler_adapter(sampler)
        return SampleBatch(
            self.lm,
            weights_key(adapter, scale),
            adapter,
            scale,
            key_of=lambda other: weights_key(*self._sampler_adapter(other)),
            answer=self._answer,
            decode=self.tokenizer.decode,
        )

    def sample(self, batch: list[tuple[Sampler, SampleSpec]]) -> list[bytes]:
        """Answers to these requests, batched as the worker batches them when they are queued together."""
        answers: list[bytes] = [b""] * len(batch)
        left = list(range(len(batch)))
        while left:
            run = self.sample_batch(batch[left[0]][0])
            admitted = [index for index in left if run.admit(*batch[index])]
            run.add([(index, *batch[index]) for index in admitted])
            left = [index for index in left if index not in set(admitted)]
            while run.rows:
                for index, answer in run.step():
                    answers[index] = answer
        return answers

    def _answer(self, sampler: Sampler, spec: SampleSpec, output: SampleResult) -> bytes:
        self._count_sample(sampler, spec, output)
        return encode_sample_response(
            output, spec.topk_prompt_logprobs, spec.topk_sample_logprobs, spec.target_prompt_csr
        )

    def _count_sample(self, sampler: Sampler, spec: SampleSpec, output) -> None:
        """One request's prompt (prefilled once, whatever num_samples) and every token it generated, for the
        session that owns the sampler (ids are "<session>:sample:<n>"; the session-less "base" has none)."""
        session_id = sampler.sampler_id.split(":sample:")[0] if ":sample:" in sampler.sampler_id else None
        self.usage.add(session_id, sampler.base_model, "sampling_prefill", len(spec.prompt))
        self.usage.add(session_id, sampler.base_model, "sampling_sample", sum(len(s.tokens) for s in output.sequences))


# ---------------------------------------------------------------------- checkpoint format


def _seq_id(request: dict) -> int:
    return number(request.get("model_seq_id", 0), "model_seq_id", 0, 2**31 - 1, integer=True)


def loss_config(loss_fn: str, given: dict[str, float | str]) -> dict[str, float]:
    """The loss's parameters: its defaults updated with `given`; unknown keys are refused."""
    defaults = LOSS_CONFIG_DEFAULTS[loss_fn]
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        accepted = ", ".join(defaults) or "none"
        raise UserError(f"loss_fn_config keys {unknown} are not parameters of {loss_fn!r} (accepted: {accepted})")
    config = dict(defaults)
    for key, value in given.items():
        config[key] = number(value, f"loss_fn_config[{key!r}]", -1e6, 1e6)
    if "clip_low_threshold" in config and not config["clip_low_threshold"] <= config["clip_high_threshold"]:
        raise UserError(
            f"{loss_fn}: clip_low_threshold {config['clip_low_threshold']} is above "
            f"clip_high_threshold {config['clip_high_threshold']}"
        )
    return config


def loss_positions(loss_fn: str, extras: list[dict[str, torch.Tensor]]) -> torch.Tensor | None:
    """(datums, width) True where `loss_fn`'s per-token loss can be non-zero, i.e. where the learner's
    logprob needs a gradient: cross_entropy's weight, or the policy losses' advantage, is non-zero
    (a prompt's positions carry 0). None (every position) for dro, whose penalty has no such zero, and
    for 2-D targets."""
    if loss_fn == "dro" or any(extra[name].dim() != 1 for extra in extras for name in extra):
        return None
    name = "weights" if loss_fn == "cross_entropy" else "advantages"
    return _pad([extra[name] for extra in extras], max(len(extra[name]) for extra in extras)) != 0


def elementwise_loss(
    loss_fn: str, logprobs: torch.Tensor, extra: dict[str, torch.Tensor], config: dict[str, float]
) -> torch.Tensor:
    """Per-token loss; Tinker's losses are sums of these (no averaging). `logprobs` are the learner's
    target logprobs; extra["logprobs"] are the sampler's."""
    if loss_fn == "cross_entropy":
        return -logprobs * extra["weights"]
    advantages = extra["advantages"]
    if loss_fn == "dro":
        return -(logprobs * advantages - 0.5 * config["beta"] * (logprobs - extra["logprobs"]) ** 2)
    ratio = torch.exp(logprobs - extra["logprobs"])
    if loss_fn == "importance_sampling":
        return -ratio * advantages
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    if loss_fn == "ppo":
        return -torch.minimum(ratio * advantages, clipped * advantages)
    # cispo: the clipped ratio is a constant coefficient on the log-probability
    return -(clipped.detach() * logprobs * advantages)


def _pad(tensors: list[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(tensors), width)
    for row, tensor in enumerate(tensors):
        out[row, : tensor.shape[0]] = tensor
    return out


def _same_path(name: str, directory: Path) -> bool:
    try:
        return Path(name).expanduser().resolve() == directory
    except (OSError, ValueError):
        return False
