"""Profiles derived from another one with some values changed, without writing YAML by hand:
`hermes-rl profile new NAME --from local --set learning_rate=3e-4`, a sweep's configurations (derived
in memory at each run's start) and the dashboard's "Derive a profile from this run's values".

A derived profile is validated exactly like a profile file (profiles.validate_profile_values); its
backend values stay locked for the config editor and rl_edit_config (changed only by deriving another
profile), its training values are the defaults each run may change.
"""

from __future__ import annotations

from typing import Any

from ..base.errors import BadInput, Conflict
from ..base.fsutil import atomic_write_text, read_yaml
from ..base.names import is_name
from ..base.paths import ensure_private_dir, profiles_dir
from .profiles import (
    _OVERRIDE_KEYS,
    _PROFILE_NAME_RE,
    PROFILE_VALUES,
    Profile,
    _validated_overrides,
    build_profile,
    get_profile,
    list_profiles,
    validate_profile_values,
)

# What `--set` may change in a derived profile: every value a profile file may set but `extends`.
DERIVABLE_FIELDS = tuple(k for k in _OVERRIDE_KEYS if k != "extends")
# Fields a derived profile inherits but a sweep or `--set` should not silently vary: where the model is.
PATH_FIELDS = ("tokenizer_name", "base_model")


def source_values(name: str) -> tuple[str, dict]:
    """(the built-in profile `name` rests on, the values its YAML file sets over that built-in)."""
    get_profile(name)  # NotFound naming the profiles, BadInput for a broken file
    path = profiles_dir() / f"{name}.yaml"
    data = read_yaml(path, what="profile file")
    overrides = _validated_overrides(path, data, name in PROFILE_VALUES) if data is not None else {}
    base = overrides.pop("extends", name)
    return str(base), overrides


def derived_values(source: str, assignments: dict, where: str = "--set") -> tuple[str, dict]:
    """(base built-in, the source's values with `assignments` applied), validated like a profile file."""
    base, values = source_values(source)
    changed = validate_profile_values(dict(assignments), where)
    return base, {**values, **changed}


def derive_profile(source: str, assignments: dict, *, name: str | None = None, where: str = "--set") -> Profile:
    """`source` with `assignments` applied, in memory (nothing written): what a sweep's run starts with."""
    base, values = derived_values(source, assignments, where)
    shown = ", ".join(f"{k}={v}" for k, v in assignments.items())
    return build_profile(name or source, base, values, f"derived from the {source} profile ({shown})")


def create_profile(name: str, source: str, assignments: dict, *, description: str | None = None) -> Profile:
    """Write $HERMES_HOME/rl/profiles/NAME.yaml: `source` with `assignments`; returns the profile read back.
    Conflict for a built-in's name or a profile that exists; BadInput for a bad name or value."""
    if not is_name(_PROFILE_NAME_RE, name):
        raise BadInput(
            f"profile name {name!r} is not valid", hint="lowercase letters, digits, _ and -, at most 32, e.g. fast-lr"
        )
    if name in PROFILE_VALUES:
        raise Conflict(f"{name} is a built-in profile", hint="pick another name for the derived profile")
    path = profiles_dir() / f"{name}.yaml"
    if path.exists() or name in list_profiles():
        raise Conflict(f"profile {name} exists ({path})", hint=f"pick another name, or remove {path} first")
    base, values = derived_values(source, assignments)
    shown = ", ".join(f"{k}={v}" for k, v in validate_profile_values(dict(assignments), "--set").items())
    values["description"] = description or (f"{source} with {shown}" if shown else f"a copy of {source}")
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    ensure_private_dir(profiles_dir())
    text = f"# derived from the {source} profile by `hermes-rl profile new`\n" + yaml.safe_dump(
        {"extends": base, **values}, sort_keys=False
    )
    atomic_write_text(path, text)
    return get_profile(name)


def profile_rows() -> list[dict]:
    """Every profile, built-ins first: name, backend, description, what it extends, its file, the values it sets."""
    rows: list[dict[str, Any]] = []
    for name in list_profiles():
        try:
            profile = get_profile(name)
            base, changed = source_values(name)
        except BadInput as exc:
            rows.append({"name": name, "error": exc.message})
            continue
        rows.append(
            {
                "name": name,
                "backend": profile.backend,
                "description": profile.description,
                "builtin": name in PROFILE_VALUES,
                "extends": None if name == base else base,
                "file": profile.overrides_file,
                "changes": {k: v for k, v in changed.items() if k not in ("description",)},
            }
        )
    return rows
