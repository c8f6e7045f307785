"""The trainer's view of a run's config.yaml (tinker-atropos format: env / openai / tinker / backend / hermes).

config.yaml is parsed by one pydantic model (RunConfigFile: a model per section, unknown keys ignored,
since the env section also carries the environment's own fields); TrainerSettings is what the loop
reads, derived from it. Every bad value raises ConfigError naming the key; the trainer turns that
into a non-zero exit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    model_validator,
)

from hermes_rl.core.base.fsutil import read_regular_text

from .rollouts import ROLLOUTS_FILE


class ConfigError(ValueError):
    """A config value the trainer cannot run with; the message names the key."""


@dataclass
class TrainerSettings:
    config_path: Path
    run_dir: Path
    backend: str  # "local" | "tinker"
    base_url: str | None  # Tinker-protocol server (local backend); None = the SDK default (cloud)
    base_model: str  # model name / local model folder handed to create_lora_training_client
    api_url: str  # run-api (Atropos trajectory API)
    inference_host: str
    inference_port: int
    batch_size: int
    group_size: int
    total_steps: int
    max_token_length: int  # what environments may generate (told to run-api)
    max_token_trainer_length: int  # longer sequences are dropped from a batch
    lora_rank: int
    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0
    save_checkpoint_interval: int = 0
    loss_fn: str = "importance_sampling"  # the Tinker policy loss forward_backward uses
    loss_fn_config: dict[str, float] = field(default_factory=dict)  # its parameters (clip thresholds, beta)
    checkpoint_dir: Path = field(default_factory=Path)
    metrics_path: Path = field(default_factory=Path)
    env_metrics_path: Path = field(default_factory=Path)
    results_path: Path = field(default_factory=Path)
    rollouts_path: Path | None = None  # None: rollouts are not recorded
    wandb_mode: str = "offline"  # online | offline | disabled
    wandb_project: str = "hermes-rl"
    wandb_group: str | None = None
    wandb_run_name: str | None = None
    # An empty /batch is retried after batch_poll_s, then less and less often up to batch_poll_max_s: a
    # batch that comes soon is taken at once, a slow environment is not polled 50 times a second.
    batch_poll_s: float = 0.02
    batch_poll_max_s: float = 0.25
    seed: int | None = None
    stop_on_plateau: int = 0  # end the run once eval has been flat for this many evals (0: never)
    resume_state: str | None = None  # a save_state path (tinker://...) to continue from
    resume_step: int = 0  # the step that state was saved at
    budget_usd: float | None = None  # stop the run (checkpoint saved) once its cost reaches this
    price: dict | None = None  # USD per million tokens {prefill, sample, train} resolved at launch


# --- config.yaml, as one model -----------------------------------------------------------------


def _integral_float_to_int(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Numbers as YAML writes them: no booleans, no text; a whole number may be written 4.0.
WholeNumber = Annotated[StrictInt, BeforeValidator(_integral_float_to_int)]
Number = StrictFloat  # ints are accepted too


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EnvSection(_Section):
    group_size: WholeNumber = Field(ge=2)
    batch_size: WholeNumber = Field(ge=1)
    total_steps: WholeNumber = Field(ge=1)
    max_token_length: WholeNumber = Field(2048, ge=1)
    rollout_server_url: str | None = None
    tokenizer_name: str | None = None
    use_wandb: Any = True  # only an explicit false turns W&B off
    wandb_name: str | None = None


class ServerSection(_Section):
    base_url: str | None = None
    model_name: str | None = None


class TinkerSection(_Section):
    base_model: Any = None  # checked with the fallbacks in settings_from_dict
    lora_rank: WholeNumber = Field(32, ge=1)
    learning_rate: Number = Field(ge=0.0, le=1.0)  # above 1 an Adam step wrecks the weights at once
    max_token_trainer_length: WholeNumber = Field(9000, ge=2)
    beta1: Number = Field(0.9, ge=0.0)
    beta2: Number = Field(0.95, ge=0.0)
    weight_decay: Number = Field(0.0, ge=0.0)
    grad_clip_norm: Number = Field(0.0, ge=0.0)
    save_checkpoint_interval: WholeNumber = Field(0, ge=0)
    # Tinker's policy losses on (target_tokens, logprobs, advantages); the server checks the config keys.
    loss_fn: Literal["importance_sampling", "ppo", "cispo", "dro"] = "importance_sampling"
    loss_fn_config: dict[str, Number] = Field(default_factory=dict)
    checkpoint_dir: str | None = None
    wandb_mode: str | None = None
    wandb_project: str | None = None
    wandb_group: str | None = None
    wandb_run_name: str | None = None
    seed: Any = None  # used when it is a whole number
    stop_on_plateau: WholeNumber = Field(0, ge=0, le=1000)
    budget_usd: Number | None = Field(None, gt=0.0)


class BackendSection(_Section):
    kind: str | None = None
    name: str | None = None  # an older spelling of kind
    base_url: str | None = None
    base_model: Any = None


class WandbSection(_Section):
    mode: str | None = None
    project: str | None = None
    group: str | None = None
    run_name: str | None = None


class ResumeSection(_Section):
    parent_run_id: str | None = None
    state_path: str  # tinker://MODEL/weights/NAME, written by save_state
    step: WholeNumber = Field(ge=0)


class HermesSection(_Section):
    run_dir: str | None = None
    resume: ResumeSection | None = None  # set by `hermes-rl resume`: continue a run's training state
    checkpoint_dir: str | None = None
    metrics_path: str | None = None
    env_metrics_path: str | None = None
    results_path: str | None = None
    rollouts_path: str | None = None
    record_rollouts: bool = True
    wandb: WandbSection = Field(default_factory=WandbSection)
    price: dict[str, Any] | None = None  # core.base.prices.Price.to_dict() of the run's model, when known


class RunConfigFile(_Section):
    env: EnvSection
    openai: ServerSection  # config.yaml holds a list of servers: the trainer's own is the first
    tinker: TinkerSection
    backend: BackendSection
    hermes: HermesSection

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, raw: Any) -> Any:
        """A missing or empty section is an empty one; a list of servers stands for its first."""
        if not isinstance(raw, dict):
            return raw
        out = dict(raw)
        for name in cls.model_fields:
            value = out.get(name) or {}
            if isinstance(value, list):
                value = value[0] if value and isinstance(value[0], dict) else {}
            out[name] = value
        return out


def _problem(error: dict) -> str:
    """One pydantic error as a sentence naming the key (env.batch_size, tinker.learning_rate, ...)."""
    where = ".".join(str(part) for part in error["loc"])
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"config section '{where}' must be a mapping, got {type(value).__name__}"
    if kind == "missing" or value is None:
        return f"{where} is missing"
    if kind == "int_type" and isinstance(value, float):
        return f"{where} must be a whole number, got {value!r}"
    if kind in ("int_type", "int_parsing", "float_type", "float_parsing"):
        return f"{where} must be a number, got {value!r}"
    if kind in ("greater_than_equal", "greater_than"):
        op, limit = (">=", ctx.get("ge")) if kind == "greater_than_equal" else (">", ctx.get("gt"))
        return f"{where} must be {op} {limit}, got {value!r}"
    if kind in ("less_than_equal", "less_than"):
        op, limit = ("<=", ctx.get("le")) if kind == "less_than_equal" else ("<", ctx.get("lt"))
        return f"{where} must be {op} {limit}, got {value!r}"
    if kind == "literal_error":
        return f"{where} must be one of {ctx.get('expected')}, got {value!r}"
    if kind == "string_type":
        return f"{where} must be text, got {value!r}"
    return f"{where}: {error['msg']}"


def parse_config(raw: dict) -> RunConfigFile:
    try:
        return RunConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("; ".join(_problem(error) for error in exc.errors())) from None


# --- the trainer's settings ----------------------------------------------------------------------


def load_settings(config_path: str | os.PathLike) -> TrainerSettings:
    path = Path(config_path).resolve()
    try:
        raw = yaml.safe_load(read_regular_text(path))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping with env / openai / tinker sections")
    return settings_from_dict(raw, path)


def _wandb_mode(config: RunConfigFile) -> str:
    """An explicit mode wins; else env.use_wandb is the run's switch (what run.json shows),
    online with a key, offline into the run folder without one."""
    mode = config.hermes.wandb.mode or config.tinker.wandb_mode
    if mode is None:
        if config.env.use_wandb is False:
            mode = "disabled"
        else:
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if mode not in ("online", "offline", "disabled"):
        raise ConfigError(f"W&B mode must be online, offline or disabled, got {mode!r}")
    return mode


def _rollouts_path(hermes: HermesSection, run_dir: Path) -> Path | None:
    """Where rollouts go; HERMES_RL_ROLLOUTS=0 (or hermes.record_rollouts: false) turns recording off."""
    if not hermes.record_rollouts or os.environ.get("HERMES_RL_ROLLOUTS", "1") == "0":
        return None

    return Path(hermes.rollouts_path or run_dir / ROLLOUTS_FILE)


def settings_from_dict(raw: dict, config_path: Path) -> TrainerSettings:
    config = parse_config(raw)
    env, openai, tinker, backend, hermes = config.env, config.openai, config.tinker, config.backend, config.hermes

    run_dir = Path(hermes.run_dir or config_path.parent)
    kind = str(backend.kind or backend.name or ("local" if backend.base_url else "tinker"))
    if kind not in ("local", "tinker"):
        raise ConfigError(f"backend.kind must be 'local' or 'tinker', got {kind!r}")
    base_url = backend.base_url or None
    if kind == "local" and not base_url:
        raise ConfigError("backend.base_url is missing: the local backend needs the Tinker-protocol server's URL")

    base_model = tinker.base_model or backend.base_model or openai.model_name or env.tokenizer_name
    if not base_model or not isinstance(base_model, str):
        raise ConfigError("tinker.base_model is missing (the model to train)")

    inference_url = openai.base_url
    if not inference_url:
        raise ConfigError("openai.base_url is missing: it is where the trainer serves completions")
    parsed = urlparse(inference_url)
    if not parsed.port:
        raise ConfigError(f"openai.base_url must name a port, got {inference_url!r}")

    api_url = (env.rollout_server_url or "").rstrip("/")
    if not api_url:
        raise ConfigError("env.rollout_server_url is missing (the run-api URL)")
    if env.batch_size % env.group_size:
        raise ConfigError(f"env.batch_size ({env.batch_size}) must be a multiple of env.group_size ({env.group_size})")

    checkpoint_dir = Path(hermes.checkpoint_dir or tinker.checkpoint_dir or run_dir / "checkpoints")
    if not checkpoint_dir.is_absolute():
        checkpoint_dir = run_dir / checkpoint_dir
    seed = tinker.seed
    if hermes.resume is not None and hermes.resume.step >= env.total_steps:
        raise ConfigError(
            f"hermes.resume.step ({hermes.resume.step}) must be below env.total_steps ({env.total_steps})"
        )
    return TrainerSettings(
        config_path=config_path,
        run_dir=run_dir,
        backend=kind,
        base_url=base_url,
        base_model=base_model,
        api_url=api_url,
        inference_host=parsed.hostname or "127.0.0.1",
        inference_port=int(parsed.port),
        batch_size=env.batch_size,
        group_size=env.group_size,
        total_steps=env.total_steps,
        max_token_length=env.max_token_length,
        max_token_trainer_length=tinker.max_token_trainer_length,
        lora_rank=tinker.lora_rank,
        learning_rate=tinker.learning_rate,
        beta1=tinker.beta1,
        beta2=tinker.beta2,
        weight_decay=tinker.weight_decay,
        grad_clip_norm=tinker.grad_clip_norm,
        save_checkpoint_interval=tinker.save_checkpoint_interval,
        loss_fn=tinker.loss_fn,
        loss_fn_config=dict(tinker.loss_fn_config),
        checkpoint_dir=checkpoint_dir,
        metrics_path=Path(hermes.metrics_path or run_dir / "metrics.jsonl"),
        env_metrics_path=Path(hermes.env_metrics_path or run_dir / "env_metrics.jsonl"),
        results_path=Path(hermes.results_path or run_dir / "results.json"),
        rollouts_path=_rollouts_path(hermes, run_dir),
        wandb_mode=_wandb_mode(config),
        wandb_project=hermes.wandb.project or tinker.wandb_project or "hermes-rl",
        wandb_group=hermes.wandb.group or tinker.wandb_group,
        wandb_run_name=hermes.wandb.run_name or tinker.wandb_run_name or env.wandb_name,
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        stop_on_plateau=tinker.stop_on_plateau,
        resume_state=hermes.resume.state_path if hermes.resume else None,
        resume_step=hermes.resume.step if hermes.resume else 0,
        budget_usd=tinker.budget_usd,
        price=hermes.price,
    )
