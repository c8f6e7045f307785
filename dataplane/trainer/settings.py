"""The trainer's view of a run's config.yaml (tinker-atropos format: env / openai / tinker / backend / hermes).

Pure Python (yaml only) so it is cheap to import and test. Every bad value raises
ConfigError with the key that is wrong; the trainer turns that into a non-zero exit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import yaml


class ConfigError(ValueError):
    """A config value the trainer cannot run with; the message names the key."""


@dataclass
class TrainerSettings:
    config_path: Path
    run_dir: Path
    backend: str                      # "local" | "tinker"
    base_url: str | None              # Tinker-protocol server (local backend); None = the SDK default (cloud)
    base_model: str                   # model name / local model folder handed to create_lora_training_client
    api_url: str                      # run-api (Atropos trajectory API)
    inference_host: str
    inference_port: int
    batch_size: int
    group_size: int
    total_steps: int
    max_token_length: int             # what environments may generate (told to run-api)
    max_token_trainer_length: int     # longer sequences are dropped from a batch
    lora_rank: int
    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0
    save_checkpoint_interval: int = 0
    checkpoint_dir: Path = field(default_factory=Path)
    metrics_path: Path = field(default_factory=Path)
    env_metrics_path: Path = field(default_factory=Path)
    results_path: Path = field(default_factory=Path)
    wandb_mode: str = "offline"       # online | offline | disabled
    wandb_project: str = "hermes-rl"
    wandb_group: str | None = None
    wandb_run_name: str | None = None
    batch_poll_s: float = 0.02        # how often an empty /batch is retried
    seed: int | None = None


def _section(raw: dict, name: str) -> dict:
    value = raw.get(name) or {}
    if isinstance(value, list):  # openai: a list of server configs
        value = value[0] if value and isinstance(value[0], dict) else {}
    if not isinstance(value, dict):
        raise ConfigError(f"config section '{name}' must be a mapping, got {type(value).__name__}")
    return value


def _number(section: dict, key: str, where: str, kind: type, default=None, minimum=None):
    value = section.get(key, default)
    if value is None:
        raise ConfigError(f"{where}.{key} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key} must be a number, got {value!r}")
    if kind is int and float(value) != int(value):
        raise ConfigError(f"{where}.{key} must be a whole number, got {value!r}")
    value = kind(value)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}.{key} must be >= {minimum}, got {value!r}")
    return value


def load_settings(config_path: str | os.PathLike) -> TrainerSettings:
    path = Path(config_path).resolve()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping with env / openai / tinker sections")
    return settings_from_dict(raw, path)


def settings_from_dict(raw: dict, config_path: Path) -> TrainerSettings:
    env = _section(raw, "env")
    openai = _section(raw, "openai")
    tinker = _section(raw, "tinker")
    backend = _section(raw, "backend")
    hermes = _section(raw, "hermes")

    run_dir = Path(hermes.get("run_dir") or config_path.parent)
    kind = str(backend.get("kind") or backend.get("name") or ("local" if backend.get("base_url") else "tinker"))
    if kind not in ("local", "tinker"):
        raise ConfigError(f"backend.kind must be 'local' or 'tinker', got {kind!r}")
    base_url = backend.get("base_url") or None
    if kind == "local" and not base_url:
        raise ConfigError("backend.base_url is missing: the local backend needs the Tinker-protocol server's URL")

    base_model = tinker.get("base_model") or backend.get("base_model") or openai.get("model_name") or env.get("tokenizer_name")
    if not base_model or not isinstance(base_model, str):
        raise ConfigError("tinker.base_model is missing (the model to train)")

    inference_url = openai.get("base_url")
    if not inference_url:
        raise ConfigError("openai.base_url is missing: it is where the trainer serves completions")
    parsed = urlparse(str(inference_url))
    if not parsed.port:
        raise ConfigError(f"openai.base_url must name a port, got {inference_url!r}")

    api_url = str(env.get("rollout_server_url") or "").rstrip("/")
    if not api_url:
        raise ConfigError("env.rollout_server_url is missing (the run-api URL)")

    batch_size = _number(env, "batch_size", "env", int, minimum=1)
    group_size = _number(env, "group_size", "env", int, minimum=2)
    if batch_size % group_size:
        raise ConfigError(f"env.batch_size ({batch_size}) must be a multiple of env.group_size ({group_size})")

    wandb = hermes.get("wandb") if isinstance(hermes.get("wandb"), dict) else {}
    # W&B: an explicit mode wins; else env.use_wandb is the run's switch (what run.json shows),
    # online with a key, offline into the run folder without one.
    mode = wandb.get("mode") or tinker.get("wandb_mode")
    if mode is None:
        if env.get("use_wandb", True) is False:
            mode = "disabled"
        else:
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if mode not in ("online", "offline", "disabled"):
        raise ConfigError(f"W&B mode must be online, offline or disabled, got {mode!r}")

    checkpoint_dir = Path(hermes.get("checkpoint_dir") or tinker.get("checkpoint_dir") or run_dir / "checkpoints")
    if not checkpoint_dir.is_absolute():
        checkpoint_dir = run_dir / checkpoint_dir

    seed = tinker.get("seed")
    return TrainerSettings(
        config_path=config_path,
        run_dir=run_dir,
        backend=kind,
        base_url=str(base_url) if base_url else None,
        base_model=str(base_model),
        api_url=api_url,
        inference_host=parsed.hostname or "127.0.0.1",
        inference_port=int(parsed.port),
        batch_size=batch_size,
        group_size=group_size,
        total_steps=_number(env, "total_steps", "env", int, minimum=1),
        max_token_length=_number(env, "max_token_length", "env", int, default=2048, minimum=1),
        max_token_trainer_length=_number(tinker, "max_token_trainer_length", "tinker", int, default=9000, minimum=2),
        lora_rank=_number(tinker, "lora_rank", "tinker", int, default=32, minimum=1),
        learning_rate=_number(tinker, "learning_rate", "tinker", float, minimum=0.0),
        beta1=_number(tinker, "beta1", "tinker", float, default=0.9, minimum=0.0),
        beta2=_number(tinker, "beta2", "tinker", float, default=0.95, minimum=0.0),
        weight_decay=_number(tinker, "weight_decay", "tinker", float, default=0.0, minimum=0.0),
        grad_clip_norm=_number(tinker, "grad_clip_norm", "tinker", float, default=0.0, minimum=0.0),
        save_checkpoint_interval=_number(tinker, "save_checkpoint_interval", "tinker", int, default=0, minimum=0),
        checkpoint_dir=checkpoint_dir,
        metrics_path=Path(hermes.get("metrics_path") or run_dir / "metrics.jsonl"),
        env_metrics_path=Path(hermes.get("env_metrics_path") or run_dir / "env_metrics.jsonl"),
        results_path=Path(hermes.get("results_path") or run_dir / "results.json"),
        wandb_mode=mode,
        wandb_project=str(wandb.get("project") or tinker.get("wandb_project") or "hermes-rl"),
        wandb_group=wandb.get("group") or tinker.get("wandb_group"),
        wandb_run_name=wandb.get("run_name") or tinker.get("wandb_run_name") or env.get("wandb_name"),
        seed=int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None,
    )
