"""The catalog of what tinker-local has trained and saved: training runs, checkpoints and weights info, as the
SDK's RestClient reads them (routes/checkpoints.py serves them).

Everything is derived from what is on disk (the checkpoint folders and their state.json) plus the
live models, so a restarted server still lists the runs and checkpoints of earlier sessions.
Answers are plain dicts shaped as the SDK's response types (types.TrainingRun, types.Checkpoint,
types.CheckpointsListResponse, types.WeightsInfoResponse). Publishing and TTLs have no effect on a
local server; they are recorded in the checkpoint's meta.json and reported back.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from hermes_rl.core.base.fsutil import read_regular_text, write_regular_text

from .checkpoints import checkpoint_folder
from .wire import UserError, number

# tinker:// path segment -> the SDK's checkpoint_type
CHECKPOINT_TYPES = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
META_FILE = "meta.json"


class NotFound(UserError):
    """Answered as HTTP 404."""


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


def _read_json(path: Path) -> dict:
    try:
        return json.loads(read_regular_text(path))
    except (OSError, ValueError):
        return {}


def checkpoint_folders(checkpoint_dir: Path):
    """(folder, kind, state) for every complete checkpoint under checkpoint_dir."""
    if not checkpoint_dir.is_dir():
        return
    for model_folder in sorted(checkpoint_dir.iterdir()):
        for kind in CHECKPOINT_TYPES:
            kind_folder = model_folder / kind
            if not kind_folder.is_dir():
                continue
            for folder in sorted(kind_folder.iterdir()):
                state = _read_json(folder / "state.json")
                if state.get("model_id") and not folder.name.startswith("."):
                    yield folder, kind, state


def checkpoint_record(folder: Path, kind: str, state: dict) -> dict:
    meta = _read_json(folder / META_FILE)
    size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file() and path.name != META_FILE)
    return {
        "checkpoint_id": f"{kind}/{folder.name}",
        "checkpoint_type": CHECKPOINT_TYPES[kind],
        "time": _iso(float(state.get("saved_at") or folder.stat().st_mtime)),
        "tinker_path": f"tinker://{state['model_id']}/{kind}/{folder.name}",
        "size_bytes": size,
        "public": bool(meta.get("public", False)),
        "user_metadata": meta.get("user_metadata"),
        "expires_at": meta.get("expires_at"),
    }


def list_checkpoints(checkpoint_dir: Path, model_id: str | None = None) -> list[dict]:
    """Newest first, as the service lists them."""
    records = [
        checkpoint_record(folder, kind, state)
        for folder, kind, state in checkpoint_folders(checkpoint_dir)
        if model_id is None or state["model_id"] == model_id
    ]
    return sorted(records, key=lambda record: record["time"], reverse=True)


def paged(items: list, limit: int, offset: int) -> tuple[list, dict]:
    if limit < 1 or offset < 0:
        raise UserError(f"limit must be >= 1 and offset >= 0, got limit={limit} offset={offset}")
    return items[offset : offset + limit], {"offset": offset, "limit": limit, "total_count": len(items)}


def training_runs(checkpoint_dir: Path, live_models: list) -> list[dict]:
    """Every model this server holds or has checkpoints of, most recently active first."""
    runs: dict[str, dict] = {}
    for folder, kind, state in checkpoint_folders(checkpoint_dir):
        run = runs.setdefault(
            state["model_id"],
            {"base_model": state.get("base_model"), "lora_rank": state.get("rank"), "checkpoints": []},
        )
        run["checkpoints"].append(checkpoint_record(folder, kind, state))
    for model in live_models:
        run = runs.setdefault(model.model_id, {"checkpoints": []})
        run.update(base_model=model.base_model, lora_rank=model.rank, last_request=model.last_request)
    out = []
    for model_id, run in runs.items():
        checkpoints = sorted(run["checkpoints"], key=lambda record: record["time"], reverse=True)
        training = [c for c in checkpoints if c["checkpoint_type"] == "training"]
        sampler = [c for c in checkpoints if c["checkpoint_type"] == "sampler"]
        last_time = run.get("last_request")
        last = _iso(last_time) if last_time else (checkpoints[0]["time"] if checkpoints else _iso(time.time()))
        out.append(
            {
                "training_run_id": model_id,
                "base_model": run.get("base_model") or "",
                "model_owner": "local",
                "is_lora": True,
                "corrupted": False,
                "lora_rank": run.get("lora_rank"),
                "last_request_time": last,
                "last_checkpoint": training[0] if training else None,
                "last_sampler_checkpoint": sampler[0] if sampler else None,
                "user_metadata": None,
            }
        )
    return sorted(out, key=lambda run: run["last_request_time"], reverse=True)


def find_checkpoint(checkpoint_dir: Path, model_id: str, kind: str, name: str) -> Path:
    if kind not in CHECKPOINT_TYPES:
        raise NotFound(
            f"checkpoint ids look like weights/NAME, sampler_weights/NAME or external_weights/NAME, got {kind}"
        )
    folder = checkpoint_folder(checkpoint_dir, model_id, kind, name)
    if _read_json(folder / "state.json").get("model_id") != model_id:
        raise NotFound(f"no checkpoint tinker://{model_id}/{kind}/{name}")
    return folder


def delete_checkpoint(checkpoint_dir: Path, model_id: str, kind: str, name: str) -> None:
    shutil.rmtree(find_checkpoint(checkpoint_dir, model_id, kind, name))


def update_meta(checkpoint_dir: Path, model_id: str, kind: str, name: str, **changes) -> dict:
    folder = find_checkpoint(checkpoint_dir, model_id, kind, name)
    meta = _read_json(folder / META_FILE) | changes
    tmp = folder / f".{META_FILE}.tmp"
    write_regular_text(tmp, json.dumps(meta, indent=2))
    tmp.replace(folder / META_FILE)
    return meta


def set_ttl(checkpoint_dir: Path, model_id: str, kind: str, name: str, ttl_seconds) -> dict:
    """Recorded, not enforced: a local checkpoint lives until it is deleted."""
    if ttl_seconds is not None:
        ttl_seconds = number(ttl_seconds, "ttl_seconds", 1, 100 * 365 * 86400, integer=True)
    expires = None if ttl_seconds is None else _iso(time.time() + ttl_seconds)
    return update_meta(checkpoint_dir, model_id, kind, name, expires_at=expires)


def weights_info(state, tinker_path: str) -> dict:
    directory = state.checkpoint_path(tinker_path)
    state = _read_json(directory / "state.json")
    if not state:
        raise NotFound(f"no checkpoint at {tinker_path}")
    flags = state.get("flags") or {}
    return {
        "base_model": state.get("base_model"),
        "is_lora": True,
        "lora_rank": state.get("rank"),
        "train_unembed": flags.get("train_unembed"),
        "train_mlp": flags.get("train_mlp"),
        "train_attn": flags.get("train_attn"),
    }
