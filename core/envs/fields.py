"""The editable fields of an environment and how a value for one is checked.

Each environment gets the run's shape (RUN_FIELDS), four safe atroposlib base fields
(SAFE_BASE_FIELDS), the trainer's own (TRAINER_FIELDS) and the fields its config_init() declares
(core.envs.probe). The training fields (learning_rate, total_steps, lora_rank, group_size, batch_size) take
their defaults from the profile; the fields the profile locks are its backend (model, tokenizer, server,
sequence lengths): never editable here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from ..base.errors import BadInput
from ..base.names import is_name
from ..base.secrets import refuse_secret_values
from ..daemons import launchers
from .discovery import EnvInfo
from .probe import probe_config
from .profiles import Profile, coerce_value, how_to_change_locked, resolve_profile

WANDB_NAME_TEMPLATE = "{env}-{timestamp}"
DEFAULT_WANDB_PROJECT = "hermes-rl"
SECRETS_HINT = "keys live only in the environment or $HERMES_HOME/.env, never in config"
# Bounds for a number field that declares none: what every consumer (a C int in torch or numpy, the
# trainer's arithmetic, YAML) takes without overflow. Fields with a meaning get tighter ones below.
INT_LIMIT = 2**31 - 1
FLOAT_LIMIT = 1e15
# Names that become W&B projects and run names (and so folder names): no path parts, no control
# characters. `{env}` and `{timestamp}` are the run-name template's placeholders.
NAME_RE = re.compile(r"^[A-Za-z0-9_{][A-Za-z0-9 _.{}-]{0,127}$")
NAME_FIELDS = ("wandb_name", "wandb_project")


@dataclass
class FieldInfo:
    name: str
    type: str  # "int" | "float" | "bool" | "str" | "list" | "dict" | "enum"
    default: object
    description: str
    choices: list | None = None
    nullable: bool = False  # accepts none/null
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    section: str = "env"  # where it goes in config.yaml: "env" or "tinker"
    group: str = ""  # what clients call it: "training" for the hyperparameters, else ""


# Fields every environment gets, besides its own config fields. The training hyperparameters
# (defaults from the profile; lora_rank and learning_rate go to config.yaml's tinker section), the run's
# shape (group_size/batch_size) and its name (DESIGN §6). From atroposlib's BaseEnvConfig only four are offered,
# because they are safe to change on any backend: steps_per_eval (how often to evaluate),
# max_batches_offpolicy (how stale a batch may be), ensure_scores_are_not_same (drop groups with no
# signal; small toy groups may want it off), use_wandb (logging on/off). The rest of BaseEnvConfig is
# the backend's (tokenizer, URLs, worker counts: the profile's), file paths that would write
# anywhere (data_path_to_save_groups), or model-specific reasoning knobs.
RUN_FIELDS: dict[str, dict] = {
    "group_size": {
        "type": "int",
        "minimum": 2,
        "maximum": 4096,
        "description": "Completions sampled per prompt; GRPO compares them (at least 2)",
    },
    "batch_size": {
        "type": "int",
        "minimum": 1,
        "maximum": 1_000_000,
        "description": "Completions per training step (at least group_size)",
    },
    "learning_rate": {
        "type": "float",
        "minimum": 0,
        "exclusive_minimum": True,
        "maximum": 1.0,  # above 1 an Adam step wrecks the weights at the first step
        "section": "tinker",
        "description": "Adam learning rate of the LoRA weights",
    },
    "total_steps": {
        "type": "int",
        "minimum": 1,
        "maximum": 1_000_000,
        "description": "Training steps in the run",
    },
    "lora_rank": {
        "type": "int",
        "minimum": 1,
        "maximum": 1024,
        "section": "tinker",
        "description": "LoRA rank (adapter size)",
    },
    "wandb_name": {
        "type": "str",
        "nullable": True,
        "description": "W&B run name (default {env}-{timestamp}; none resets it)",
    },
}
SAFE_BASE_FIELDS: dict[str, dict] = {
    "steps_per_eval": {"minimum": 1, "maximum": 1_000_000},
    "max_batches_offpolicy": {"minimum": 1, "maximum": 10_000},
    "ensure_scores_are_not_same": {},
    "use_wandb": {},
}
# Env config fields hermes-rl fills per run (never the user's to edit).
MANAGED_FIELDS = ("env_metrics_path",)
TRAINER_FIELDS: dict[str, dict] = {
    "save_checkpoint_interval": {
        "type": "int",
        "default": 0,
        "minimum": 0,
        "maximum": 1_000_000,
        "description": "Save a LoRA checkpoint every N steps (0: only the final one)",
    },
    "wandb_project": {"type": "str", "default": DEFAULT_WANDB_PROJECT, "description": "W&B project"},
    "stop_on_plateau": {
        "type": "int",
        "default": 0,
        "minimum": 0,
        "maximum": 1000,
        "description": "End the run (completed, final checkpoint saved) once eval is flat for N evals (0: never)",
    },
    "budget_usd": {
        "type": "float",
        "default": None,
        "nullable": True,
        "minimum": 0.0,
        "exclusive_minimum": True,
        "maximum": 1_000_000.0,
        "description": "Stop the run (checkpoint saved) once its cost reaches this many USD (none: no budget)",
    },
}
# How the environment workers are launched (config.yaml's `workers:`; core.runs.workers). The Slurm
# settings themselves (partition, time, CPUs, memory) come with the start (CLI flags, rl_start_training).
WORKER_FIELDS: dict[str, dict] = {
    "replicas": {
        "type": "int",
        "default": 1,
        "minimum": 1,
        "maximum": 64,
        "description": "Environment workers, each registering with run-api on its own",
    },
    "env_launcher": {
        "type": "enum",
        "default": "local",
        "choices": ["local", "slurm"],  # and every other launcher the registry knows (editable_fields)
        "description": "Where the workers run: this machine, Slurm jobs (sbatch), or another launcher",
    },
}


def _field_from_probe(row: dict, section: str = "env", **override) -> FieldInfo:
    info = FieldInfo(
        name=row["name"],
        type=row.get("type", "str"),
        default=row.get("default"),
        description=row.get("description") or "",
        choices=row.get("choices"),
        nullable=bool(row.get("nullable")),
        minimum=row.get("minimum"),
        maximum=row.get("maximum"),
        exclusive_minimum=bool(row.get("exclusive_minimum")),
        exclusive_maximum=bool(row.get("exclusive_maximum")),
        section=section,
    )
    for key, value in override.items():
        setattr(info, key, value)
    return info


def editable_fields(env: EnvInfo, profile: Profile | None = None) -> list[FieldInfo]:
    """The fields a user may edit for this environment, with this profile's defaults.

    BadInput when the environment's config_init() cannot be evaluated (crash, timeout, bad file).
    """
    if profile is None:
        profile, _ = resolve_profile(None)
    probe = probe_config(env)
    probed = {row["name"]: row for row in probe["fields"] if isinstance(row, dict) and "name" in row}
    fields: list[FieldInfo] = []
    for name, spec in RUN_FIELDS.items():
        if name == "wandb_name":
            default: Any = WANDB_NAME_TEMPLATE.replace("{env}", env.name)
        else:
            default = profile.editable_defaults.get(name, probed.get(name, {}).get("default"))
        fields.append(
            FieldInfo(
                name=name,
                type=spec["type"],
                default=default,
                description=spec["description"],
                nullable=spec.get("nullable", False),
                minimum=spec.get("minimum"),
                maximum=spec.get("maximum"),
                exclusive_minimum=spec.get("exclusive_minimum", False),
                section=spec.get("section", "env"),
                group="" if name == "wandb_name" else "training",
            )
        )
    for name, limits in SAFE_BASE_FIELDS.items():
        if name in probed:
            fields.append(_field_from_probe(probed[name], **limits))
    for section, declared in (("tinker", TRAINER_FIELDS), ("workers", WORKER_FIELDS)):
        for name, spec in declared.items():
            fields.append(
                FieldInfo(
                    name=name,
                    type=spec["type"],
                    default=profile.editable_defaults.get(name, spec["default"]),
                    description=spec["description"],
                    choices=launchers.names() if name == "env_launcher" else spec.get("choices"),
                    nullable=spec.get("nullable", False),
                    minimum=spec.get("minimum"),
                    maximum=spec.get("maximum"),
                    exclusive_minimum=spec.get("exclusive_minimum", False),
                    section=section,
                )
            )
    taken = (
        set(RUN_FIELDS)
        | set(SAFE_BASE_FIELDS)
        | set(TRAINER_FIELDS)
        | set(WORKER_FIELDS)
        | set(profile.locked)
        | set(MANAGED_FIELDS)
    )
    for name, row in probed.items():
        if row.get("in_base") or name in taken:
            continue
        fields.append(_field_from_probe(row))
    return fields


def _check_range(info: FieldInfo, value: Any) -> None:
    if info.type not in ("int", "float") or value is None:
        return
    limit = INT_LIMIT if info.type == "int" else FLOAT_LIMIT
    low = -limit if info.minimum is None else max(info.minimum, -limit)
    high = limit if info.maximum is None else min(info.maximum, limit)
    if low is not None and (value < low or (info.exclusive_minimum and value == low)):
        op = ">" if info.exclusive_minimum else ">="
        raise BadInput(f"{info.name} must be {op} {_bound(low)}, got {_short(value)}")
    if high is not None and (value > high or (info.exclusive_maximum and value == high)):
        op = "<" if info.exclusive_maximum else "<="
        raise BadInput(f"{info.name} must be {op} {_bound(high)}, got {_short(value)}")


def _bound(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() and abs(limit) < 1e16 else f"{limit:g}"


def _short(value: object) -> str:
    text = str(value) if not isinstance(value, int) or abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit number"
    return text[:60]


def _check_name(info: FieldInfo, value: object) -> None:
    if info.name not in NAME_FIELDS or not isinstance(value, str):
        return
    if not is_name(NAME_RE, value) or ".." in value:
        raise BadInput(
            f"{info.name} must be a plain name (letters, digits, space, . _ - and the {{env}} {{timestamp}} "
            f"placeholders; at most 128 characters; no path parts), got {value[:60]!r}",
            hint=f"e.g. {DEFAULT_WANDB_PROJECT}",
        )


def validate_value(info: FieldInfo, raw: object) -> object:
    """One field's value, coerced to its type, range-checked (every number has bounds) and, for a
    name, checked as one; BadInput says what is wrong."""
    value = coerce_value(info.name, info.type, raw, choices=info.choices, nullable=info.nullable)
    _check_range(info, value)
    if info.name == "wandb_name" and isinstance(value, str) and not value.strip():
        return None
    _check_name(info, value)
    return value


def check_together(values: dict) -> None:
    """Rules across fields, on the values a run would use."""
    group, batch = values.get("group_size"), values.get("batch_size")
    if isinstance(group, int) and isinstance(batch, int) and batch < group:
        raise BadInput(
            f"batch_size ({batch}) must be at least group_size ({group})",
            hint=f"set both, e.g. group_size={group} batch_size={max(group, 1) * 4}",
        )


def _unknown_field(name: object, fields: dict[str, FieldInfo], env_name: str) -> BadInput:
    shown = repr(name) if isinstance(name, str) and len(name) < 60 else "(field)"
    close = difflib.get_close_matches(name, list(fields), n=1) if isinstance(name, str) else []
    hint = (f"did you mean {close[0]}? " if close else "") + "editable fields: " + ", ".join(fields)
    return BadInput(f"unknown field {shown} for environment {env_name}", hint=hint)


def locked_field_error(name: str, profile: Profile) -> BadInput:
    locked = profile.locked[name]
    return BadInput(
        f"{name} is locked at {locked.value!r} by the {profile.name} profile ({locked.reason})",
        hint=how_to_change_locked(profile),
    )


def validate_assignments(assignments: dict, fields: dict[str, FieldInfo], profile: Profile, env_name: str) -> dict:
    """Each assignment checked (not locked, a known field, a valid value, no secret); the coerced values."""
    if not isinstance(assignments, dict) or not assignments:
        raise BadInput("nothing to set", hint="give field=value pairs")
    out = {}
    for name, raw in assignments.items():
        if name in profile.locked:
            raise locked_field_error(name, profile)
        if name not in fields:
            raise _unknown_field(name, fields, env_name)
        out[name] = validate_value(fields[name], raw)
    refuse_secret_values(out, SECRETS_HINT)
    return out
