"""A run's configuration, built once as data: what start_run hands to the pipeline and writes as config.yaml.

config.yaml is in tinker-atropos's format: `env` and `openai` (a list) load unchanged in atroposlib's
`serve --config`; `tinker`, `backend` and `hermes` are read by our trainer (dataplane/trainer/settings.py).
The editable values come from core.envs.drafts.resolve_run_values, the locked ones from the profile.
No secret ever goes in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from ..base import prices
from ..base.errors import BadInput, HermesError
from ..base.fsutil import open_regular
from ..base.paths import run_dir, validate_run_id
from ..base.secrets import ENDPOINT_KEY_PLACEHOLDER, refuse_secret_values
from ..envs.discovery import EnvInfo
from ..envs.fields import (
    DEFAULT_WANDB_PROJECT,
    MANAGED_FIELDS,
    SECRETS_HINT,
    TRAINER_FIELDS,
    WORKER_FIELDS,
    locked_field_error,
)
from ..envs.profiles import EDITABLE_DEFAULT_FIELDS, Profile
from .workers import resolve_workers

CONFIG_FILE = "config.yaml"


class EnvSection(TypedDict):
    """atroposlib's BaseEnvConfig fields hermes-rl sets; the environment's own fields follow them."""

    group_size: int
    batch_size: int
    tokenizer_name: str
    rollout_server_url: str
    max_token_length: int
    max_num_workers: int
    total_steps: int
    use_wandb: bool
    wandb_name: str
    steps_per_eval: int
    ensure_scores_are_not_same: bool
    env_metrics_path: str
    inference_weight: NotRequired[float]  # a run of several environments: this one's share of the batches
    min_batch_allocation: NotRequired[float | None]


class ServerConfig(TypedDict):
    """The trainer's inference server, as atroposlib's APIServerConfig."""

    model_name: str
    base_url: str
    api_key: str
    server_type: str
    health_check: bool
    tokenizer_name: str
    timeout: int
    num_requests_for_eval: int
    weight: float


class TinkerSection(TypedDict):
    base_model: str
    lora_rank: int
    learning_rate: float
    max_token_trainer_length: int
    checkpoint_dir: str
    save_checkpoint_interval: int
    wandb_project: str
    wandb_run_name: str
    stop_on_plateau: int  # the trainer ends the run once eval is flat for this many evals (0: never)


class BackendSection(TypedDict):
    kind: str  # "local" | "tinker"
    base_url: str | None  # the local Tinker-protocol server; None: the cloud SDK's default
    model_dir: str | None


class HermesSection(TypedDict):
    run_id: str
    run_dir: str
    metrics_path: str
    env_metrics_path: str
    environment: str
    environment_file: str
    environment_class: str
    profile: str
    price: dict | None  # core.base.prices.Price.to_dict() of the base model at launch; None: unknown


class WorkersSection(TypedDict):
    """How the environment workers are launched (core.runs.workers)."""

    launcher: str  # "local" | "slurm"
    replicas: int
    address: str  # what run-api and the inference server bind; the URLs the workers get
    slurm: dict


class RunConfig(TypedDict):
    """config.yaml as data; its keys in this order are the file's sections."""

    env: EnvSection
    openai: list[ServerConfig]
    tinker: TinkerSection
    slurm: bool  # Atropos' own flag (its ServerManager reading SLURM_JOB_NODELIST): always False
    testing: bool
    backend: BackendSection
    hermes: HermesSection
    workers: WorkersSection


def _check_ports(ports: dict, local: bool) -> None:
    for key in ("api", "inference") + (("tinker",) if local else ()):
        port = ports.get(key) if isinstance(ports, dict) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise BadInput(f"ports[{key!r}] must be a port number, got {port!r}")


def build_run_config(
    env: EnvInfo,
    profile: Profile,
    values: dict,
    ports: dict,
    run_id: str,
    workers: dict | None = None,
    *,
    seed: int | None = None,
) -> RunConfig:
    """The run's configuration: `values` are the editable values (resolve_run_values), `ports` the run's
    api / inference (/ tinker on the local backend) ports; locked values come from the profile;
    `workers` how the environment workers are launched (core.runs.workers.resolve_workers; None: locally);
    `seed` (when given) seeds the trainer's LoRA initialisation (tinker.seed)."""
    validate_run_id(run_id)
    workers = resolve_workers(workers, values)
    address = workers["address"]
    local = profile.backend == "local"
    _check_ports(ports, local)
    for name in values:
        if name in profile.locked:
            raise locked_field_error(name, profile)
    refuse_secret_values(values, SECRETS_HINT)
    locked: dict[str, Any] = {name: item.value for name, item in profile.locked.items()}
    # The training values: the run's own (a draft, `start --set`), else the profile's defaults.
    training: dict[str, Any] = {
        name: values.get(name, profile.editable_defaults.get(name)) for name in EDITABLE_DEFAULT_FIELDS
    }
    folder = run_dir(run_id)
    wandb_name = values.get("wandb_name") or f"{env.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    api_url = f"http://{address}:{ports['api']}"
    env_section = _env_section(values, training, locked, workers, api_url, folder, wandb_name)
    server = _server_section(profile, locked, f"http://{address}:{ports['inference']}/v1")
    tinker = _tinker_section(values, training, locked, folder, wandb_name, seed)
    return {
        "env": env_section,  # type: ignore[typeddict-item]
        "openai": [server],
        "tinker": tinker,
        "slurm": False,
        "testing": False,
        "backend": {
            "kind": "local" if local else "tinker",
            "base_url": f"http://127.0.0.1:{ports['tinker']}" if local else None,
            "model_dir": str(locked["base_model"]) if local else None,
        },
        "hermes": {
            "run_id": run_id,
            "run_dir": str(folder),
            "metrics_path": str(folder / "metrics.jsonl"),
            "env_metrics_path": str(folder / "env_metrics.jsonl"),
            "environment": env.name,
            "environment_file": env.file,
            "environment_class": env.class_name,
            "profile": profile.name,
            # the price the trainer holds the budget to (core.base.prices; None: unknown, no budget stop)
            "price": price.to_dict() if (price := prices.lookup(locked["base_model"])) else None,
        },
        "workers": workers,  # type: ignore[typeddict-item]
    }


def _env_section(
    values: dict, training: dict, locked: dict, workers: dict, api_url: str, folder: Path, wandb_name: str
) -> dict:
    """config.yaml's `env`: what Atropos' BaseEnvConfig reads, then the environment's own fields."""
    env_section = {
        "group_size": training["group_size"],
        "batch_size": training["batch_size"],
        "tokenizer_name": locked["tokenizer_name"],
        "rollout_server_url": api_url,
        "max_token_length": locked["max_token_length"],
        "max_num_workers": locked["max_num_workers"],
        "total_steps": training["total_steps"],
        "use_wandb": values.get("use_wandb", True),
        "wandb_name": wandb_name,
        "steps_per_eval": values.get("steps_per_eval", 100),
        "ensure_scores_are_not_same": values.get("ensure_scores_are_not_same", True),
    }
    for name, value in values.items():  # the environment's own fields
        if name not in env_section and name not in (*TRAINER_FIELDS, *MANAGED_FIELDS, *WORKER_FIELDS, *training):
            env_section[name] = value
    if workers["environments"] or workers["weight"] != 1.0 or workers["min_batch_allocation"] is not None:
        # Several environments share each batch by these (Atropos' BaseEnvConfig fields).
        env_section["inference_weight"] = workers["weight"]
        env_section["min_batch_allocation"] = workers["min_batch_allocation"]
    # Environments that write their own metrics (percent_correct, eval/...) put them in the run folder;
    # an environment without the field ignores it (pydantic drops unknown keys).
    env_section["env_metrics_path"] = str(folder / "env_metrics.jsonl")
    return env_section


def _server_section(profile: Profile, locked: dict, base_url: str) -> ServerConfig:
    """The one `openai` server: the trainer's own inference server, at `base_url`."""
    inference = profile.inference
    server: ServerConfig = {
        "model_name": locked["base_model"],
        "base_url": base_url,
        # the run's endpoint key: its worker (dataplane/env_launch) puts the key from its environment here
        "api_key": ENDPOINT_KEY_PLACEHOLDER,
        # The trainer's server speaks SGLang's /generate (token ids + logprobs, which Atropos'
        # managed server needs) and needs no 1 Hz health pings.
        "server_type": "sglang",
        "health_check": False,
        "tokenizer_name": locked["tokenizer_name"],
        "timeout": inference.get("timeout", 1200),
        "num_requests_for_eval": inference.get("num_requests_for_eval", 256),
        "weight": 1.0,
    }
    return server


def _tinker_section(
    values: dict, training: dict, locked: dict, folder: Path, wandb_name: str, seed: int | None
) -> TinkerSection:
    """config.yaml's `tinker`: the trainer's model, LoRA, checkpoints, W&B project, stops and seed."""
    tinker: TinkerSection = {
        "base_model": locked["base_model"],
        "lora_rank": training["lora_rank"],
        "learning_rate": training["learning_rate"],
        "max_token_trainer_length": locked["max_token_trainer_length"],
        "checkpoint_dir": str(folder / "checkpoints"),
        "save_checkpoint_interval": values.get("save_checkpoint_interval", 0),
        "wandb_project": values.get("wandb_project", DEFAULT_WANDB_PROJECT),
        "wandb_run_name": wandb_name,
        "stop_on_plateau": values.get("stop_on_plateau", 0),
    }
    if training.get("budget_usd") is not None:
        tinker["budget_usd"] = training["budget_usd"]  # type: ignore[typeddict-unknown-key]
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
            raise BadInput(f"seed must be a whole number from 0 to {2**31 - 1}, got {seed!r}")
        tinker["seed"] = seed  # type: ignore[typeddict-unknown-key]
    return tinker


def run_config_yaml(config: RunConfig) -> str:
    """config.yaml's text (section order kept)."""
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False, allow_unicode=True)


def read_run_config(run_id: str) -> dict:
    """A run's config.yaml as written (a mapping), or {} when it is missing or unreadable."""
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    try:
        with open_regular(run_dir(run_id) / CONFIG_FILE, "r", encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError, HermesError):
        return {}
    return data if isinstance(data, dict) else {}
