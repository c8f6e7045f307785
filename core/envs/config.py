"""Run configuration: editable fields per environment, drafts shared by every client, and the
run's config.yaml in tinker-atropos's format.

Editable fields come from the environment's own `config_init()`, evaluated in a subprocess
(core.config_probe) with a timeout, cached by the files' (mtime, size) in memory and on disk, so
a broken or slow environment never hangs a client and the second call costs no import.
Locked fields come from the profile (core.profiles). Drafts live in $HERMES_HOME/rl/drafts/<env>.yaml.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hermes_rl.core.envs.discovery import EnvInfo, find_environment
from hermes_rl.core.base.errors import BadInput, HermesError, NotFound
from hermes_rl.core.base.fsutil import atomic_write_text, file_lock, read_yaml
from hermes_rl.core.base.paths import (current_selection_file, drafts_dir, rl_dir, run_dir, validate_env_name,
                    validate_run_id)
from hermes_rl.core.envs.profiles import Profile, coerce_value, get_profile, resolve_profile
from hermes_rl.core.base.secrets import SECRET_NAMES, redact, secret_values

PROBE_TIMEOUT_ENV = "HERMES_RL_PROBE_TIMEOUT"
PROBE_TIMEOUT_S = 60.0  # importing atroposlib alone takes seconds on a busy machine
PROBE_VERSION = 1  # bump when the probe's output changes, to invalidate disk caches
FAILURE_TTL_S = 300.0  # a failed probe is not retried for this long unless the file changes
WANDB_NAME_TEMPLATE = "{env}-{timestamp}"
DEFAULT_WANDB_PROJECT = "hermes-rl"


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


@dataclass
class ConfigView:
    environment: str
    profile: str
    editable: list[dict]  # {name, type, default, description, value, modified, choices, ...}
    locked: list[dict]  # {name, value, reason}
    warnings: list[str] = field(default_factory=list)  # e.g. a corrupt draft that was ignored
    notice: str | None = None  # e.g. "No TINKER_API_KEY: using the local profile ..."
    file: str = ""  # the environment's source file

    def to_dict(self) -> dict:
        return asdict(self)

    def values(self) -> dict:
        return {row["name"]: row["value"] for row in self.editable}


# Fields every environment gets, besides its own config fields. group_size/batch_size/wandb_name
# are the run's shape and name (DESIGN §6). From atroposlib's BaseEnvConfig only four are offered,
# because they are safe to change on any backend: steps_per_eval (how often to evaluate),
# max_batches_offpolicy (how stale a batch may be), ensure_scores_are_not_same (drop groups with no
# signal; small toy groups may want it off), use_wandb (logging on/off). The rest of BaseEnvConfig is
# infrastructure (tokenizer, URLs, worker counts: the profile's), file paths that would write
# anywhere (data_path_to_save_groups), or model-specific reasoning knobs.
RUN_FIELDS: dict[str, dict] = {
    "group_size": {"type": "int", "minimum": 2, "maximum": 4096,
                   "description": "Completions sampled per prompt; GRPO compares them (at least 2)"},
    "batch_size": {"type": "int", "minimum": 1, "maximum": 1_000_000,
                   "description": "Completions per training step (at least group_size)"},
    "wandb_name": {"type": "str", "nullable": True,
                   "description": "W&B run name (default {env}-{timestamp}; none resets it)"},
}
SAFE_BASE_FIELDS: dict[str, dict] = {
    "steps_per_eval": {"minimum": 1},
    "max_batches_offpolicy": {"minimum": 1},
    "ensure_scores_are_not_same": {},
    "use_wandb": {},
}
# Env config fields hermes-rl fills per run (never the user's to edit).
MANAGED_FIELDS = ("env_metrics_path",)
TRAINER_FIELDS: dict[str, dict] = {
    "save_checkpoint_interval": {"type": "int", "default": 0, "minimum": 0,
                                 "description": "Save a LoRA checkpoint every N steps (0: only the final one)"},
    "wandb_project": {"type": "str", "default": DEFAULT_WANDB_PROJECT, "description": "W&B project"},
}


# --- probing config_init() in a subprocess ----------------------------------------------------

_probe_lock = threading.Lock()
_probe_memo: dict[tuple[str, str], tuple[tuple, dict | None, str | None, float]] = {}
_probe_running: dict[tuple[str, str], threading.Lock] = {}


def _signature(env: EnvInfo) -> tuple:
    parts = []
    for path in (env.file, *env.base_files):
        try:
            st = os.stat(path)
            parts.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            parts.append((path, 0, -1))
    return (PROBE_VERSION, sys.version_info[:3], env.class_name, tuple(parts))


def _cache_path(env: EnvInfo) -> Path:
    digest = hashlib.sha256(f"{env.file}\0{env.class_name}".encode()).hexdigest()[:24]
    return rl_dir() / "cache" / f"probe-{digest}.json"


def _probe_timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(PROBE_TIMEOUT_ENV, PROBE_TIMEOUT_S)))
    except ValueError:
        return PROBE_TIMEOUT_S


def _probe_env() -> dict:
    """The child's environment: no secrets (config_init must not need them), no hub access."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               WANDB_MODE="disabled", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _run_probe(env: EnvInfo) -> dict:
    """Run core.config_probe; BadInput naming the file on a crash, a timeout or bad output."""
    timeout = _probe_timeout()
    where = f"environment {env.name!r} ({env.file})"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_rl.core.envs.probe_child", env.file, env.class_name],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=str(Path(env.file).parent), env=_probe_env(), start_new_session=True,
        )
    except OSError as exc:
        raise BadInput(f"cannot start the config probe for {where}: {exc.strerror}") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: take any grandchildren too
        except OSError:
            pass
        proc.communicate()
        raise BadInput(f"{where}: config_init() did not finish within {timeout:g} s",
                       hint=f"the module or config_init is too slow or hangs; raise {PROBE_TIMEOUT_ENV} if it is just slow")
    finally:
        if proc.poll() is None:
            proc.kill()
    text = redact(out.decode("utf-8", errors="replace"))
    errors = redact(err.decode("utf-8", errors="replace"))
    payload = None
    for line in reversed(text.splitlines()):
        try:
            payload = json.loads(line)
            break
        except ValueError:
            continue
    if isinstance(payload, dict) and payload.get("ok") is True and isinstance(payload.get("fields"), list):
        return payload
    if isinstance(payload, dict) and payload.get("error"):
        detail = str(payload["error"])
    else:
        status = f"exit code {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
        detail = f"the probe crashed ({status})" + (f": {_last_line(errors)}" if _last_line(errors) else "")
    raise BadInput(f"{where}: config_init() failed: {detail}",
                   hint=f"see the traceback with: python -m hermes_rl.core.envs.probe_child {env.file} {env.class_name}")


def _cached(env: EnvInfo, signature: tuple) -> dict | None:
    """A probe result still valid for these files, from memory, else disk (then remembered); a recent
    failure raises again at once instead of re-running a slow or broken probe."""
    key = (env.file, env.class_name)
    with _probe_lock:
        memo = _probe_memo.get(key)
    if memo and memo[0] == signature:
        if memo[1] is not None:
            return memo[1]
        if time.monotonic() - memo[3] < FAILURE_TTL_S:
            raise BadInput(memo[2] or "config probe failed")
    try:
        cached = json.loads(_cache_path(env).read_text(encoding="utf-8"))
        if cached.get("signature") == json.loads(json.dumps(signature)) and isinstance(cached.get("result"), dict):
            with _probe_lock:
                _probe_memo[key] = (signature, cached["result"], None, time.monotonic())
            return cached["result"]
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _remember(env: EnvInfo, signature: tuple, result: dict | None, error: str | None = None) -> None:
    with _probe_lock:
        _probe_memo[(env.file, env.class_name)] = (signature, result, error, time.monotonic())
    if result is not None:
        try:
            atomic_write_text(_cache_path(env), json.dumps({"signature": signature, "result": result}) + "\n")
        except Exception:
            pass  # the cache is an optimisation; a read-only home still works


def _check_probeable(env: EnvInfo) -> None:
    if env.error:
        raise BadInput(f"environment {env.name!r} cannot be used: {env.file}: {env.error}")
    if not env.class_name:
        raise BadInput(f"environment {env.name!r} has no class to probe")


def probe_config(env: EnvInfo) -> dict:
    """The probe result for an environment, from memory, then disk, then a subprocess."""
    _check_probeable(env)
    signature = _signature(env)
    cached = _cached(env, signature)
    if cached is not None:
        return cached
    with _probe_lock:
        running = _probe_running.setdefault((env.file, env.class_name), threading.Lock())
    # Two threads of one client (dashboard workers) share one probe, and so do many client processes
    # that miss the cache at once (the CLI, agent tools and the dashboard together): one probes, the
    # others wait for its result on disk instead of starting their own slow probes on a small machine.
    with running, _probe_file_lock(env):
        cached = _cached(env, signature)
        if cached is not None:
            return cached
        try:
            result = _run_probe(env)
        except BadInput as exc:
            _remember(env, signature, None, exc.message)
            raise
        _remember(env, signature, result)
        return result


@contextlib.contextmanager
def _probe_file_lock(env: EnvInfo):
    """The cross-process probe lock; without a writable home (no lock file) each process probes alone."""
    try:
        lock = file_lock(_cache_path(env))
        lock.__enter__()
    except HermesError:
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def warm_config_cache(envs: list[EnvInfo] | None = None) -> dict[str, str]:
    """Probe every environment not cached yet in ONE subprocess, so atroposlib is imported once for all
    (a dashboard or `hermes-rl envs` can call it in the background). Returns {name: "cached" | "probed" |
    "error: ..."}. Failures here are not remembered: the next get_config probes that environment alone."""
    from hermes_rl.core.envs.discovery import discover_environments

    status: dict[str, str] = {}
    todo: list[tuple[EnvInfo, tuple]] = []
    for env in discover_environments() if envs is None else envs:
        try:
            _check_probeable(env)
            signature = _signature(env)
            if _cached(env, signature) is not None:
                status[env.name] = "cached"
                continue
        except BadInput as exc:
            status[env.name] = f"error: {exc.message}"
            continue
        todo.append((env, signature))
    if not todo:
        return status
    pairs = [[env.file, env.class_name] for env, _ in todo]
    proc = subprocess.Popen([sys.executable, "-m", "hermes_rl.core.envs.probe_child", "--batch", json.dumps(pairs)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=str(rl_dir()) if rl_dir().is_dir() else None, env=_probe_env(),
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=_probe_timeout() + 5 * len(todo))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()  # what finished before the timeout still counts
    results = {}
    for line in redact(out.decode("utf-8", errors="replace")).splitlines():
        try:
            payload = json.loads(line)
        except ValueError:
            continue
        if isinstance(payload, dict):
            results[(payload.get("file"), payload.get("class_name"))] = payload
    for env, signature in todo:
        payload = results.get((env.file, env.class_name))
        if payload and payload.get("ok") is True and isinstance(payload.get("fields"), list):
            _remember(env, signature, payload)
            status[env.name] = "probed"
        else:
            status[env.name] = "error: " + str((payload or {}).get("error") or "the probe did not finish")
    return status


def clear_probe_cache(env: EnvInfo | None = None, disk: bool = False) -> None:
    """Forget probe results in memory (one environment's, or all), and on disk too if asked."""
    with _probe_lock:
        if env is None:
            _probe_memo.clear()
        else:
            _probe_memo.pop((env.file, env.class_name), None)
    if disk and env is not None:
        try:
            _cache_path(env).unlink()
        except OSError:
            pass
    elif disk:
        for path in (rl_dir() / "cache").glob("probe-*.json"):
            try:
                path.unlink()
            except OSError:
                pass


# --- editable fields ----------------------------------------------------------------------------

def _field_from_probe(row: dict, section: str = "env", **override) -> FieldInfo:
    info = FieldInfo(
        name=row["name"], type=row.get("type", "str"), default=row.get("default"),
        description=row.get("description") or "", choices=row.get("choices"),
        nullable=bool(row.get("nullable")), minimum=row.get("minimum"), maximum=row.get("maximum"),
        exclusive_minimum=bool(row.get("exclusive_minimum")), exclusive_maximum=bool(row.get("exclusive_maximum")),
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
            default = WANDB_NAME_TEMPLATE.replace("{env}", env.name)
        else:
            default = profile.editable_defaults.get(name, probed.get(name, {}).get("default"))
        fields.append(FieldInfo(name=name, type=spec["type"], default=default, description=spec["description"],
                                nullable=spec.get("nullable", False), minimum=spec.get("minimum"),
                                maximum=spec.get("maximum")))
    for name, limits in SAFE_BASE_FIELDS.items():
        if name in probed:
            fields.append(_field_from_probe(probed[name], **limits))
    for name, spec in TRAINER_FIELDS.items():
        fields.append(FieldInfo(name=name, type=spec["type"], default=spec["default"], description=spec["description"],
                                minimum=spec.get("minimum"), section="tinker"))
    taken = set(RUN_FIELDS) | set(SAFE_BASE_FIELDS) | set(TRAINER_FIELDS) | set(profile.locked) | set(MANAGED_FIELDS)
    for name, row in probed.items():
        if row.get("in_base") or name in taken:
            continue
        fields.append(_field_from_probe(row))
    return fields


def _check_range(info: FieldInfo, value: object) -> None:
    if info.type not in ("int", "float") or value is None:
        return
    low, high = info.minimum, info.maximum
    if low is not None and (value < low or (info.exclusive_minimum and value == low)):
        op = ">" if info.exclusive_minimum else ">="
        raise BadInput(f"{info.name} must be {op} {low:g}, got {value}")
    if high is not None and (value > high or (info.exclusive_maximum and value == high)):
        op = "<" if info.exclusive_maximum else "<="
        raise BadInput(f"{info.name} must be {op} {high:g}, got {value}")


def validate_value(info: FieldInfo, raw: object) -> object:
    """One field's value, coerced to its type and range-checked; BadInput says what is wrong."""
    value = coerce_value(info.name, info.type, raw, choices=info.choices, nullable=info.nullable)
    _check_range(info, value)
    if info.name == "wandb_name" and isinstance(value, str) and not value.strip():
        return None
    return value


def _check_together(values: dict) -> None:
    """Rules across fields, on the values a run would use."""
    group, batch = values.get("group_size"), values.get("batch_size")
    if isinstance(group, int) and isinstance(batch, int) and batch < group:
        raise BadInput(f"batch_size ({batch}) must be at least group_size ({group})",
                       hint=f"set both, e.g. group_size={group} batch_size={max(group, 1) * 4}")


def _reject_secrets(values: dict) -> None:
    secrets = secret_values()
    for name, value in values.items():
        text = json.dumps(value, default=str)
        if any(secret in text for secret in secrets):
            raise BadInput(f"{name} contains the value of a secret key",
                           hint="keys live only in the environment or $HERMES_HOME/.env, never in config")


def _unknown_field(name: object, fields: dict[str, FieldInfo], env_name: str) -> BadInput:
    import difflib

    shown = repr(name) if isinstance(name, str) and len(name) < 60 else "(field)"
    close = difflib.get_close_matches(name, list(fields), n=1) if isinstance(name, str) else []
    hint = (f"did you mean {close[0]}? " if close else "") + "editable fields: " + ", ".join(fields)
    return BadInput(f"unknown field {shown} for environment {env_name}", hint=hint)


def _locked_field(name: str, profile: Profile) -> BadInput:
    locked = profile.locked[name]
    return BadInput(f"{name} is locked at {locked.value!r} by the {profile.name} profile ({locked.reason})",
                    hint="locked fields are infrastructure; change them in "
                         f"$HERMES_HOME/rl/profiles/{profile.name}.yaml or pick another profile")


def _validate_assignments(assignments: dict, fields: dict[str, FieldInfo], profile: Profile, env_name: str) -> dict:
    if not isinstance(assignments, dict) or not assignments:
        raise BadInput("nothing to set", hint="give field=value pairs")
    out = {}
    for name, raw in assignments.items():
        if name in profile.locked:
            raise _locked_field(name, profile)
        if name not in fields:
            raise _unknown_field(name, fields, env_name)
        out[name] = validate_value(fields[name], raw)
    _reject_secrets(out)
    return out


# --- drafts and the current selection -------------------------------------------------------

def _draft_path(env_name: str) -> Path:
    return drafts_dir() / f"{validate_env_name(env_name)}.yaml"


def _read_draft(env_name: str) -> tuple[dict, str | None]:
    """(values, problem). A corrupt draft is reported, never raised and never deleted."""
    path = _draft_path(env_name)
    try:
        data = read_yaml(path, what="draft")
    except BadInput as exc:
        return {}, f"{exc.message}; using defaults (the file is kept)"
    if data is None:
        return {}, None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        return {}, f"draft {path} must be a mapping of field: value, got {type(data).__name__}; using defaults (the file is kept)"
    return data, None


def _write_draft(env_name: str, values: dict) -> None:
    import yaml

    header = (f"# hermes-rl draft for environment {env_name}: the values you changed.\n"
              "# Shared by the dashboard, the CLI and agent tools; edit with `hermes-rl config --set`.\n")
    body = yaml.safe_dump(values, sort_keys=True, default_flow_style=False, allow_unicode=True) if values else ""
    atomic_write_text(_draft_path(env_name), header + body)


def _keep_corrupt(env_name: str) -> str:
    """Copy a corrupt draft aside before it is replaced, so nothing the user wrote is lost."""
    path = _draft_path(env_name)
    backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(path, backup)
    except OSError:
        return str(path)
    return str(backup)


def current_selection() -> dict:
    """{"environment", "profile"} from current.yaml (None when unset); a bad file adds "warning"."""
    path = current_selection_file()
    empty = {"environment": None, "profile": None}
    try:
        data = read_yaml(path, what="selection file")
    except BadInput as exc:
        return {**empty, "warning": f"{exc.message}; ignoring it"}
    if data is None:
        return empty
    if not isinstance(data, dict):
        return {**empty, "warning": f"selection file {path} must be a mapping; ignoring it"}
    out = dict(empty)
    problems = []
    for key in ("environment", "profile"):
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value:
            out[key] = value
        else:
            problems.append(key)
    if problems:
        out["warning"] = f"selection file {path}: ignoring a bad {' and '.join(problems)}"
    return out


def select_environment(name: str, profile: str | None = None) -> dict:
    """Make `name` (and optionally a profile) the current selection of every client."""
    env = find_environment(name)
    if profile is not None:
        get_profile(profile)
    path = current_selection_file()
    import yaml

    with file_lock(path):
        if profile is None:  # keep the profile chosen earlier
            profile = current_selection()["profile"]
        atomic_write_text(path, yaml.safe_dump({"environment": env.name, "profile": profile}, sort_keys=False))
    return {"environment": env.name, "profile": profile, "file": env.file, "description": env.description}


# --- views and edits --------------------------------------------------------------------------

def _resolve(env_name: str | None, profile: str | None) -> tuple[EnvInfo, Profile, str | None, list[str]]:
    warnings: list[str] = []
    selection = current_selection()
    if selection.get("warning"):
        warnings.append(selection["warning"])
    chosen, notice = resolve_profile(profile or selection["profile"])
    name = env_name or selection["environment"] or chosen.default_environment
    if not name:
        raise NotFound("no environment selected", hint="pick one with `hermes-rl select ENV`; see `hermes-rl envs`")
    return find_environment(name), chosen, notice, warnings


def _effective(fields: dict[str, FieldInfo], draft: dict, warnings: list[str], env_name: str,
               profile: Profile) -> dict:
    """Defaults overlaid with the draft's valid values; bad draft entries become warnings."""
    values = {name: info.default for name, info in fields.items()}
    for name, raw in draft.items():
        if name in profile.locked:
            warnings.append(f"draft for {env_name}: {name} is locked by the {profile.name} profile; ignored")
        elif name not in fields:
            warnings.append(f"draft for {env_name}: {name!r} is not a field of this environment; ignored")
        else:
            try:
                values[name] = validate_value(fields[name], raw)
            except BadInput as exc:
                warnings.append(f"draft for {env_name}: {exc.message}; using the default")
    return values


def get_config(env_name: str | None = None, profile: str | None = None) -> ConfigView:
    """Editable values (draft over defaults) and locked values for an environment under a profile."""
    env, chosen, notice, warnings = _resolve(env_name, profile)
    fields = {f.name: f for f in editable_fields(env, chosen)}
    draft, problem = _read_draft(env.name)
    if problem:
        warnings.append(problem)
    values = _effective(fields, draft, warnings, env.name, chosen)
    editable = []
    for name, info in fields.items():
        row = asdict(info)
        row["value"] = values[name]
        row["modified"] = name in draft and values[name] != info.default
        editable.append(row)
    locked = [{"name": k, "value": v.value, "reason": v.reason} for k, v in chosen.locked.items()]
    return ConfigView(environment=env.name, profile=chosen.name, editable=editable, locked=locked,
                      warnings=warnings, notice=notice, file=env.file)


def set_fields(assignments: dict, env_name: str | None = None, profile: str | None = None) -> dict:
    """Validate every assignment, then write them to the draft at once (all or nothing)."""
    env, chosen, notice, _ = _resolve(env_name, profile)
    fields = {f.name: f for f in editable_fields(env, chosen)}
    new_values = _validate_assignments(assignments, fields, chosen, env.name)
    notices = [notice] if notice else []
    with file_lock(_draft_path(env.name)):
        draft, problem = _read_draft(env.name)
        if problem:
            notices.append(f"{problem.split('; ')[0]}; it was moved to {_keep_corrupt(env.name)}")
        ignored: list[str] = []
        before = _effective(fields, draft, ignored, env.name, chosen)
        after = {**before, **new_values}
        _check_together(after)
        merged = {**draft, **new_values}  # entries this version does not use are kept, not lost
        _write_draft(env.name, merged)
    changed = {name: {"value": after[name], "previous": before[name], "default": fields[name].default}
               for name in new_values}
    result = {"environment": env.name, "profile": chosen.name, "changed": changed}
    if notices:
        result["notices"] = notices
    return result


def set_field(field: str, value: object, env_name: str | None = None, profile: str | None = None) -> dict:
    """Set one field; returns {environment, field, value, previous, default, modified}."""
    if not isinstance(field, str):
        raise BadInput("field name must be text")
    result = set_fields({field: value}, env_name, profile)
    change = result["changed"][field]
    out = {"environment": result["environment"], "profile": result["profile"], "field": field,
           "value": change["value"], "previous": change["previous"], "default": change["default"],
           "modified": change["value"] != change["default"]}
    if result.get("notices"):
        out["notices"] = result["notices"]
    return out


def reset_draft(env_name: str) -> None:
    """Back to defaults: remove the environment's draft (a corrupt one too)."""
    path = _draft_path(env_name)
    with file_lock(path):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def resolve_run_values(env: EnvInfo, profile: Profile, overrides: dict | None = None) -> dict:
    """The values a run starts with: defaults, then the draft, then `overrides` (validated, not saved).

    A wandb_name left at its default becomes `{env}-{timestamp}` here.
    """
    fields = {f.name: f for f in editable_fields(env, profile)}
    draft, _ = _read_draft(env.name)
    values = _effective(fields, draft, [], env.name, profile)
    if overrides:
        values.update(_validate_assignments(overrides, fields, profile, env.name))
    _check_together(values)
    if not values.get("wandb_name") or values["wandb_name"] == fields["wandb_name"].default:
        values["wandb_name"] = f"{env.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    _reject_secrets(values)
    return values


# --- the run's config.yaml ------------------------------------------------------------------

def build_run_config(env: EnvInfo, profile: Profile, values: dict, ports: dict, run_id: str) -> dict:
    """config.yaml in tinker-atropos's format: env / openai (a list) / tinker, plus backend and hermes.

    `env` and `openai` load unchanged in atroposlib's `serve --config`; `values` are the editable
    values (resolve_run_values); locked values come from the profile. No secret ever goes in.
    """
    validate_run_id(run_id)
    for key in ("api", "inference") + (("tinker",) if profile.backend == "local" else ()):
        port = ports.get(key) if isinstance(ports, dict) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise BadInput(f"ports[{key!r}] must be a port number, got {port!r}")
    for name in values:
        if name in profile.locked:
            raise _locked_field(name, profile)
    _reject_secrets(values)
    locked = {name: item.value for name, item in profile.locked.items()}
    folder = run_dir(run_id)
    wandb_name = values.get("wandb_name") or f"{env.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    env_section = {
        "group_size": values.get("group_size", profile.editable_defaults.get("group_size")),
        "batch_size": values.get("batch_size", profile.editable_defaults.get("batch_size")),
        "tokenizer_name": locked["tokenizer_name"],
        "rollout_server_url": f"http://127.0.0.1:{ports['api']}",
        "max_token_length": locked["max_token_length"],
        "max_num_workers": locked["max_num_workers"],
        "total_steps": locked["total_steps"],
        "use_wandb": values.get("use_wandb", True),
        "wandb_name": wandb_name,
        "steps_per_eval": values.get("steps_per_eval", 100),
        "ensure_scores_are_not_same": values.get("ensure_scores_are_not_same", True),
    }
    for name, value in values.items():
        if name not in env_section and name not in TRAINER_FIELDS and name not in MANAGED_FIELDS:
            env_section[name] = value
    # Environments that write their own metrics (percent_correct, eval/...) put them in the run folder;
    # an environment without the field ignores it (pydantic drops unknown keys).
    env_section["env_metrics_path"] = str(folder / "env_metrics.jsonl")
    inference = profile.inference
    server = {
        "model_name": locked["base_model"],
        "base_url": f"http://127.0.0.1:{ports['inference']}/v1",
        "api_key": "x",  # the trainer's own inference server: a dummy, never a real key
        # The trainer's server speaks SGLang's /generate (token ids + logprobs, which Atropos'
        # managed server needs) and needs no 1 Hz health pings.
        "server_type": "sglang",
        "health_check": False,
        "tokenizer_name": locked["tokenizer_name"],
        "timeout": inference.get("timeout", 1200),
        "num_requests_for_eval": inference.get("num_requests_for_eval", 256),
        "weight": 1.0,
    }
    tinker_section = {
        "base_model": locked["base_model"],
        "lora_rank": locked["lora_rank"],
        "learning_rate": locked["learning_rate"],
        "max_token_trainer_length": locked["max_token_trainer_length"],
        "checkpoint_dir": str(folder / "checkpoints"),
        "save_checkpoint_interval": values.get("save_checkpoint_interval", 0),
        "wandb_project": values.get("wandb_project", DEFAULT_WANDB_PROJECT),
        "wandb_run_name": wandb_name,
    }
    local = profile.backend == "local"
    return {
        "env": env_section,
        "openai": [server],
        "tinker": tinker_section,
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
        },
    }


def run_config_yaml(config: dict) -> str:
    """config.yaml text for build_run_config's dict (section order kept)."""
    import yaml

    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)
