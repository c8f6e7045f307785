"""Checkpoints on disk: where a tinker:// path lives, and a LoRA adapter (with its Adam moments) written
and read back in peft's format (adapter_model.safetensors + adapter_config.json, plus state.json and,
for training saves, optimizer.safetensors).

Layout: CHECKPOINT_DIR/<model id, made path-safe>/<kind>/<name>, kind one of weights, sampler_weights,
external_weights. A save is written to a hidden temporary folder and renamed into place, so a reader
never sees half a checkpoint. core.base.paths holds the names, so clients find the same folders.
The HTTP side (catalog) reads paths only: what touches tensors imports torch when it runs.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_rl.core.base.fsutil import read_regular_text, write_regular_text
from hermes_rl.core.base.names import is_name
from hermes_rl.core.base.paths import CHECKPOINT_KINDS as CHECKPOINT_SUBFOLDERS
from hermes_rl.core.base.paths import CHECKPOINT_NAME_RE, checkpoint_subpath

from .wire import UserError

if TYPE_CHECKING:
    import torch

    from .engine import Adapter

NAME_RE = CHECKPOINT_NAME_RE
CHECKPOINT_KINDS = {kind: kind for kind in CHECKPOINT_SUBFOLDERS}
ADAPTER_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
AGE_SUFFIX = ".age"
SERVER_FILES = frozenset({"state.json", "meta.json"})  # this server's bookkeeping, not part of an export


def age_recipients(recipients: object) -> list:
    """The age X25519 recipients (pyrage) of `save_weights_external(age_encryption_recipients=...)`;
    anything else is the caller's error (UserError). pyrage is the age implementation tinker-cookbook
    decrypts with."""
    import pyrage  # noqa: PLC0415 - pyrage: only an encrypted export needs it

    if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
        raise UserError("save_weights_external: age_encryption_recipients must be a list of age1... keys")
    try:
        return [pyrage.x25519.Recipient.from_str(recipient) for recipient in recipients]
    except pyrage.RecipientError as exc:
        raise UserError(
            f"save_weights_external: an age_encryption_recipients key is not an age X25519 recipient (age1...): {exc}"
        ) from exc


def encrypt_export(directory: Path, recipients: list) -> None:
    """Age-encrypt an external export's files in place (NAME -> NAME.age, the plain file removed), as
    Tinker does for age_encryption_recipients; state.json stays for the catalog."""
    import pyrage  # noqa: PLC0415 - pyrage: only an encrypted export needs it

    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name not in SERVER_FILES:
            pyrage.encrypt_file(str(path), str(path) + AGE_SUFFIX, recipients)
            path.unlink()


def checkpoint_folder(checkpoint_dir: Path, model_id: str, kind: str, name: str) -> Path:
    """Where a checkpoint lives on disk: CHECKPOINT_DIR/<model id, made path-safe>/<kind>/<name>."""
    return Path(checkpoint_dir) / checkpoint_subpath(model_id, kind, name)


def checkpoint_path(checkpoint_dir: Path, tinker_path: str) -> Path:
    """The folder of a tinker://MODEL_ID/{weights,sampler_weights}/NAME checkpoint, inside checkpoint_dir;
    a path of any other shape is the caller's error (UserError)."""
    if not tinker_path.startswith("tinker://"):
        raise UserError(f"checkpoint paths look like tinker://MODEL_ID/weights/NAME, got {tinker_path!r}")
    parts = tinker_path[len("tinker://") :].split("/")
    if len(parts) != 3 or parts[1] not in CHECKPOINT_KINDS or not is_name(NAME_RE, parts[2]) or not parts[0]:
        raise UserError(
            f"checkpoint paths look like tinker://MODEL_ID/weights/NAME or "
            f"tinker://MODEL_ID/sampler_weights/NAME, got {tinker_path!r}"
        )
    return checkpoint_folder(checkpoint_dir, parts[0], parts[1], parts[2])


def local_checkpoint_path(checkpoint_dir: Path, tinker_path: str) -> Path:
    """The folder on disk behind a tinker:// path this server returned (for results and reports)."""
    parts = tinker_path[len("tinker://") :].split("/")
    if not tinker_path.startswith("tinker://") or len(parts) != 3 or parts[1] not in CHECKPOINT_KINDS:
        raise ValueError(f"not a tinker checkpoint path: {tinker_path!r}")
    return checkpoint_folder(checkpoint_dir, *parts)


def write_checkpoint(directory: Path, model, base_model: str, optimizer: bool) -> None:
    """Save a training model (model_state.TrainModel) into `directory`, replacing what is there: the adapter
    in peft's format, its state.json and, with `optimizer`, its Adam moments."""
    from safetensors.torch import save_file  # noqa: PLC0415 - imports torch: see the docstring

    tmp = directory.with_name(f".{directory.name}.tmp-{time.monotonic_ns()}")
    tmp.mkdir(parents=True)
    save_file(peft_state_dict(model.params), str(tmp / ADAPTER_FILE))
    write_regular_text(tmp / "adapter_config.json", json.dumps(peft_config(base_model, model)))
    state = {
        "model_id": model.model_id,
        "base_model": model.base_model,
        "rank": model.rank,
        "flags": model.flags,
        "seed": model.seed,
        "adam_step": model.adam_step,
        "saved_at": time.time(),
    }
    if optimizer and model.adam_m:
        moments = {f"m.{k}": v for k, v in model.adam_m.items()} | {f"v.{k}": v for k, v in model.adam_v.items()}
        save_file({k: v.cpu().contiguous() for k, v in moments.items()}, str(tmp / OPTIMIZER_FILE))
    write_regular_text(tmp / "state.json", json.dumps(state, indent=2))
    if directory.exists():
        shutil.rmtree(directory)
    tmp.rename(directory)


def read_checkpoint(directory: Path, device) -> tuple[Adapter, int, dict]:
    """(adapter, rank, state.json) of a saved checkpoint, the adapter on `device`."""
    from safetensors.torch import load_file  # noqa: PLC0415 - imports torch: see the docstring

    if not (directory / ADAPTER_FILE).exists():
        if (directory / (ADAPTER_FILE + AGE_SUFFIX)).exists():
            raise UserError(f"{directory.name} is an age-encrypted export: only its recipients can read it")
        raise UserError(f"no checkpoint in {directory}")
    state = json.loads(read_regular_text(directory / "state.json"))
    tensors = load_file(str(directory / ADAPTER_FILE), device=str(device))
    return from_peft_state_dict(tensors), int(state["rank"]), state


def read_moments(directory: Path, device) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
    """The Adam moments (m, v) a training save kept, on `device`; None when it kept none."""
    from safetensors.torch import load_file  # noqa: PLC0415 - imports torch: see the docstring

    optimizer_file = directory / OPTIMIZER_FILE
    if not optimizer_file.exists():
        return None
    moments = load_file(str(optimizer_file))
    m = {k[2:]: v.to(device) for k, v in moments.items() if k.startswith("m.")}
    v = {k[2:]: v.to(device) for k, v in moments.items() if k.startswith("v.")}
    return m, v


def peft_state_dict(params: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    out = {}
    for name, (a, b) in params.items():
        out[f"base_model.model.{name}.lora_A.weight"] = a.detach().cpu().contiguous().clone()
        out[f"base_model.model.{name}.lora_B.weight"] = b.detach().cpu().contiguous().clone()
    return out


def from_peft_state_dict(tensors: dict[str, torch.Tensor]) -> Adapter:
    adapter: dict[str, list] = {}
    for key, value in tensors.items():
        name, which = key[len("base_model.model.") :].rsplit(".lora_", 1)
        adapter.setdefault(name, [None, None])[0 if which.startswith("A") else 1] = value.float()
    return {name: (pair[0], pair[1]) for name, pair in adapter.items()}


def peft_config(base_model: str, model) -> dict:
    """peft's adapter_config.json for a training model (model_state.TrainModel: its rank and LoRA params)."""
    from .engine import LORA_ALPHA  # noqa: PLC0415 - the engine imports torch: see the module's docstring

    targets = sorted({name.rsplit(".", 1)[-1] for name in model.params})
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": model.rank,
        "lora_alpha": LORA_ALPHA,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": targets,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
