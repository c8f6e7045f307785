"""Drafts and the current selection, shared by every client: what a run of an environment would use.

A draft ($HERMES_HOME/rl/drafts/<env>.yaml) holds the values a user changed; the current selection
($HERMES_HOME/rl/current.yaml) the environment and profile every client works on. A view overlays
the draft on the fields' defaults (core.envs.fields); locked values come from the profile.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

from ..base.errors import BadInput, HermesError, NotFound
from ..base.fsutil import atomic_write_text, file_lock, read_yaml
from ..base.paths import current_selection_file, drafts_dir, validate_env_name
from ..base.records import FieldChange, FieldRow, LockedField, Selection
from ..base.secrets import refuse_secret_values
from . import envsettings
from .discovery import EnvInfo, find_environment
from .fields import (
    SECRETS_HINT,
    FieldInfo,
    check_together,
    editable_fields,
    validate_assignments,
    validate_value,
)
from .probe import check_values
from .profiles import Profile, get_profile, how_to_change_locked, resolve_profile


@dataclass
class ConfigView:
    environment: str
    profile: str
    editable: list[FieldRow]
    locked: list[LockedField]
    warnings: list[str] = field(default_factory=list)  # e.g. a corrupt draft that was ignored
    notice: str | None = None  # e.g. "No TINKER_API_KEY: using the local profile ..."
    file: str = ""  # the environment's source file
    locked_hint: str = ""  # how a user changes a locked value

    def to_dict(self) -> dict:
        return asdict(self)

    def values(self) -> dict:
        return {row["name"]: row["value"] for row in self.editable}


def _draft_path(env_name: str) -> Path:
    return drafts_dir() / f"{validate_env_name(env_name)}.yaml"


def _draft_id(env: EnvInfo) -> str:
    """The environment's draft name, its id; a draft saved under an id it had before (see EnvInfo.aliases)
    is renamed to it first, so an edit made then is kept."""
    path = _draft_path(env.id)
    if not path.exists():
        older = [p for p in (drafts_dir() / f"{a}.yaml" for a in env.aliases) if p.is_file()]
        if len(older) == 1:
            with contextlib.suppress(OSError):
                os.replace(older[0], path)
    return env.id


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
        return {}, (
            f"draft {path} must be a mapping of field: value, got {type(data).__name__}; "
            "using defaults (the file is kept)"
        )
    return data, None


def _write_draft(env_name: str, values: dict) -> None:
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    header = (
        f"# hermes-rl draft for environment {env_name}: the values you changed.\n"
        "# Shared by the dashboard, the CLI and agent tools; edit with `hermes-rl config --set`.\n"
    )
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
    empty: dict[str, str | None] = {"environment": None, "profile": None}
    try:
        data = read_yaml(path, what="selection file")
    except BadInput as exc:
        return {**empty, "warning": f"{exc.message}; ignoring it"}
    if data is None:
        return empty
    if not isinstance(data, dict):
        return {**empty, "warning": f"selection file {path} must be a mapping; ignoring it"}
    out: dict[str, str | None] = dict(empty)
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


def selected_or_default(env_name: str | None, selection: dict, profile: Profile) -> tuple[EnvInfo, str | None]:
    """(environment, notice): `env_name` when given, else the saved selection, else the profile's default.
    A saved selection that can no longer be found (its folder or interpreter is not configured for this
    client, or it was removed) falls back to the default with a one-line notice: it never stops a start."""
    if env_name:
        return find_environment(env_name), None
    default = profile.default_environment
    name = selection.get("environment") or default
    if not name:
        raise NotFound("no environment selected", hint="pick one with `hermes-rl select ENV`; see `hermes-rl envs`")
    try:
        return find_environment(name), None
    except NotFound:
        if not default or name == default:
            raise
    notice = (
        f"the selected environment {name!r} is not found here; using the default {default} "
        "(`hermes-rl envs --add-python/--add-folder` saves where it lives, for every client)"
    )
    return find_environment(default), notice


def select_environment(name: str, profile: str | None = None) -> Selection:
    """Make `name` (and optionally a profile) the current selection of every client."""
    env = find_environment(name)
    if profile is not None:
        get_profile(profile)
    path = current_selection_file()
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    with file_lock(path):
        if profile is None:  # keep the profile chosen earlier
            profile = current_selection()["profile"]
        atomic_write_text(path, yaml.safe_dump({"environment": env.id, "profile": profile}, sort_keys=False))
    out: Selection = {"environment": env.id, "profile": profile, "file": env.file, "description": env.description}
    saved = envsettings.remember(env)  # found through this shell's variables only: saved for every client
    if saved:
        out["notice"] = saved
    return out


def _resolve(env_name: str | None, profile: str | None) -> tuple[EnvInfo, Profile, str | None, list[str]]:
    warnings: list[str] = []
    selection = current_selection()
    if selection.get("warning"):
        warnings.append(selection["warning"])
    chosen, notice = resolve_profile(profile or selection["profile"])
    env, fallback = selected_or_default(env_name, selection, chosen)
    if fallback:
        warnings.append(fallback)
    name = env_name or selection["environment"]
    if not env_name and name == selection["environment"] and name in env.aliases:
        with contextlib.suppress(HermesError, OSError):  # a selection saved under an earlier id: the id now
            select_environment(env.id)
    return env, chosen, notice, warnings


MAX_WARNINGS = 10  # per view: a draft of 10,000 bad entries gives 10 lines and a count


def _effective(
    fields: dict[str, FieldInfo],
    draft: dict,
    warnings: list[str],
    env_name: str,
    profile: Profile,
    invalid: list[str] | None = None,
) -> dict:
    """Defaults overlaid with the draft's valid values; bad draft entries become warnings (at most
    MAX_WARNINGS, then a count); the invalid values' messages also go to `invalid`."""
    values = {name: info.default for name, info in fields.items()}
    found: list[str] = []
    for name, raw in draft.items():
        if name in profile.locked:
            found.append(f"draft for {env_name}: {name} is locked by the {profile.name} profile; ignored")
        elif name not in fields:
            found.append(f"draft for {env_name}: {str(name)[:60]!r} is not a field of this environment; ignored")
        else:
            try:
                values[name] = validate_value(fields[name], raw)
            except BadInput as exc:
                found.append(f"draft for {env_name}: {exc.message}; using the default")
                if invalid is not None:
                    invalid.append(exc.message)
    warnings.extend(found[:MAX_WARNINGS])
    if len(found) > MAX_WARNINGS:
        warnings.append(f"draft for {env_name}: {len(found) - MAX_WARNINGS} more problem(s) not shown")
    return values


def get_config(env_name: str | None = None, profile: str | None = None) -> ConfigView:
    """Editable values (draft over defaults) and locked values for an environment under a profile."""
    env, chosen, notice, warnings = _resolve(env_name, profile)
    fields = {f.name: f for f in editable_fields(env, chosen)}
    draft, problem = _read_draft(_draft_id(env))
    if problem:
        warnings.append(problem)
    values = _effective(fields, draft, warnings, env.name, chosen)
    editable: list[FieldRow] = []
    for name, info in fields.items():
        row = asdict(info)
        row["value"] = values[name]
        row["modified"] = name in draft and values[name] != info.default
        editable.append(cast(FieldRow, row))  # FieldInfo's fields plus the two set here
    locked = [LockedField(name=k, value=v.value, reason=v.reason) for k, v in chosen.locked.items()]
    return ConfigView(
        environment=env.id,
        profile=chosen.name,
        editable=editable,
        locked=locked,
        warnings=warnings,
        notice=notice,
        file=env.file,
        locked_hint=how_to_change_locked(chosen),
    )


def set_fields(assignments: dict, env_name: str | None = None, profile: str | None = None) -> dict:
    """Validate every assignment, then write them to the draft at once (all or nothing)."""
    env, chosen, notice, _ = _resolve(env_name, profile)
    fields = {f.name: f for f in editable_fields(env, chosen)}
    new_values = validate_assignments(assignments, fields, chosen, env.name)
    notices = [notice] if notice else []
    with file_lock(_draft_path(env.id)):
        draft, problem = _read_draft(_draft_id(env))
        if problem:
            notices.append(f"{problem.split('; ')[0]}; it was moved to {_keep_corrupt(env.id)}")
        ignored: list[str] = []
        before = _effective(fields, draft, ignored, env.name, chosen)
        after = {**before, **new_values}
        check_together(after)
        check_values(env, after)  # the environment's own config class (a reasoning-gym task, its parameters)
        merged = {**draft, **new_values}  # entries this version does not use are kept, not lost
        _write_draft(env.id, merged)
    changed = {
        name: {"value": after[name], "previous": before[name], "default": fields[name].default} for name in new_values
    }
    result = {"environment": env.id, "profile": chosen.name, "changed": changed}
    if notices:
        result["notices"] = notices
    return result


def set_field(field: str, value: object, env_name: str | None = None, profile: str | None = None) -> FieldChange:
    """Set one field; returns {environment, field, value, previous, default, modified}."""
    if not isinstance(field, str):
        raise BadInput("field name must be text")
    result = set_fields({field: value}, env_name, profile)
    change = result["changed"][field]
    out: FieldChange = {
        "environment": result["environment"],
        "profile": result["profile"],
        "field": field,
        "value": change["value"],
        "previous": change["previous"],
        "default": change["default"],
        "modified": change["value"] != change["default"],
    }
    if result.get("notices"):
        out["notices"] = result["notices"]
    return out


def reset_draft(env_name: str) -> None:
    """Back to defaults: remove the environment's draft (a corrupt one too). `env_name` is any reference
    find_environment takes; the draft is the one under its id."""
    path = _draft_path(_draft_id(find_environment(env_name)))
    with file_lock(path):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def resolve_run_values(
    env: EnvInfo, profile: Profile, overrides: dict | None = None, *, use_draft: bool = True
) -> dict:
    """The values a run starts with: defaults, then the draft (unless `use_draft` is False), then
    `overrides` (validated, not saved).

    A wandb_name left at its default becomes `{env}-{timestamp}` here.
    """
    fields = {f.name: f for f in editable_fields(env, profile)}
    draft, problem = _read_draft(_draft_id(env)) if use_draft else ({}, None)
    invalid: list[str] = []
    values = _effective(fields, draft, [], env.name, profile, invalid)
    if problem or invalid:
        # A run is never started on defaults the user did not choose: what they wrote is refused by name.
        first = (problem or invalid[0]).replace("; using defaults (the file is kept)", "")
        more = f" (and {len(invalid) - (0 if problem else 1)} more)" if len(invalid) > (0 if problem else 1) else ""
        raise BadInput(
            f"the draft for {env.name} cannot be used: {first}{more}"[:400],
            hint="fix the value with `hermes-rl config --set FIELD=VALUE`, "
            f"or remove {_draft_path(env.id)} to start from the defaults",
        )
    if overrides:
        values.update(validate_assignments(overrides, fields, profile, env.name))
    check_together(values)
    check_values(env, values)  # what its own config class refuses is named here, not in the run a minute later
    if not values.get("wandb_name") or values["wandb_name"] == fields["wandb_name"].default:
        values["wandb_name"] = f"{env.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    refuse_secret_values(values, SECRETS_HINT)
    return values
