"""Where environments are found, kept as a setting: $HERMES_HOME/rl/envs.yaml lists more environment
folders and the interpreters that hold verifiers tasksets, so every client (the CLI, the dashboard, the
MCP server, Hermes, `scripts/main.sh`) finds the same environments whatever its shell exported.
HERMES_RL_ENV_PATH and HERMES_RL_ENV_PYTHON, when set, override the file's lists.

envs.yaml:

    folders: [~/atropos/environments]   # scanned for Atropos environments, after the built-in folders
    pythons: [~/vf-envs/bin/python]     # interpreters whose installed verifiers tasksets are listed
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..base.errors import BadInput
from ..base.fsutil import atomic_write_text, file_lock, read_yaml
from ..base.paths import rl_dir

SETTINGS_FILE = "envs.yaml"
FOLDERS_VAR = "HERMES_RL_ENV_PATH"
PYTHONS_VAR = "HERMES_RL_ENV_PYTHON"
KEYS = {"folders": FOLDERS_VAR, "pythons": PYTHONS_VAR}

_cache: dict[str, tuple[tuple, dict[str, list[str]], str | None]] = {}  # path -> (stat, lists, problem)


def settings_path() -> Path:
    return rl_dir() / SETTINGS_FILE


def saved() -> tuple[dict[str, list[str]], str | None]:
    """({"folders", "pythons"} as written in envs.yaml, problem). A bad file is reported, never raised."""
    path = settings_path()
    empty: dict[str, list[str]] = {key: [] for key in KEYS}
    try:
        st = os.stat(path)
    except OSError:
        return empty, None
    signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    cached = _cache.get(str(path))
    if cached and cached[0] == signature:
        return {k: list(v) for k, v in cached[1].items()}, cached[2]
    problem = None
    out = dict(empty)
    try:
        data = read_yaml(path, what="environment settings")
    except BadInput as exc:
        data, problem = None, f"{exc.message}; ignoring it"
    if data is not None and not isinstance(data, dict):
        data, problem = None, f"environment settings {path} must be a mapping (folders:, pythons:); ignoring it"
    for key in KEYS:
        value = (data or {}).get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problem = f"environment settings {path}: {key} must be a list of paths; ignoring it"
            continue
        out[key] = [v for v in value if v.strip()]
    _cache[str(path)] = (signature, out, problem)
    return {k: list(v) for k, v in out.items()}, problem


def entries(key: str) -> tuple[list[str], str]:
    """(paths, where they come from) for "folders" or "pythons": the variable when set, else envs.yaml."""
    var = KEYS[key]
    raw = os.environ.get(var, "")
    if raw.strip():
        return [p.strip() for p in raw.split(os.pathsep) if p.strip()], f"${var}"
    return saved()[0][key], str(settings_path())


def _check(key: str, path: str) -> str:
    full = os.path.abspath(os.path.expanduser(path))
    if key == "folders" and not os.path.isdir(full):
        raise BadInput(f"{path} is not a folder", hint="give the folder that holds the environment files")
    if key == "pythons" and not (os.path.isfile(full) and os.access(full, os.X_OK)):
        raise BadInput(
            f"{path} is not an executable Python interpreter",
            hint="give the venv's interpreter, e.g. ~/vf-envs/bin/python",
        )
    return full


def _write(lists: dict[str, list[str]]) -> None:
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    header = (
        "# Where hermes-rl finds environments, for every client (hermes-rl envs --add-folder/--add-python/--remove).\n"
        f"# {FOLDERS_VAR} and {PYTHONS_VAR}, when set, override these lists.\n"
    )
    body = yaml.safe_dump({k: v for k, v in lists.items() if v}, sort_keys=False, default_flow_style=False)
    atomic_write_text(settings_path(), header + (body if body.strip() != "{}" else ""))


def add(key: str, path: str) -> tuple[str, bool]:
    """Save a folder or interpreter (checked, made absolute); (the path, whether it was new)."""
    full = _check(key, path)
    with file_lock(settings_path()):
        lists, problem = saved()
        if problem:
            raise BadInput(problem.replace("; ignoring it", ""), hint=f"fix or remove {settings_path()}")
        if full in (os.path.abspath(os.path.expanduser(p)) for p in lists[key]):
            return full, False
        lists[key].append(full)
        _write(lists)
    return full, True


def remove(path: str) -> list[str]:
    """Forget a saved folder or interpreter; the lists it was removed from (BadInput when in none)."""
    full = os.path.abspath(os.path.expanduser(path))
    with file_lock(settings_path()):
        lists, _ = saved()
        found = []
        for key in KEYS:
            kept = [p for p in lists[key] if os.path.abspath(os.path.expanduser(p)) != full]
            if len(kept) != len(lists[key]):
                found.append(key)
                lists[key] = kept
        if not found:
            raise BadInput(f"{path} is not in {settings_path()}", hint="`hermes-rl envs --where` lists what is saved")
        _write(lists)
    return found


def remember(env) -> str | None:
    """After a selection: save where `env` was found (a taskset's interpreter, an extra folder) when only a
    variable of this shell names it, so clients started without that variable find it too. The notice
    to show, or None."""
    if env.kind != "atropos" and env.python:
        key, path = "pythons", env.python
    elif env.source == "extra" and env.root:
        key, path = "folders", env.root
    else:
        return None
    lists, problem = saved()
    # Paths compared as written, made absolute, never resolved: a venv's python is a link to the same
    # interpreter as every other venv's, and what tells them apart is the venv it sits in.
    known = {os.path.abspath(os.path.expanduser(p)) for p in lists[key]}
    if problem or os.path.abspath(path) in known:
        return None
    if key == "pythons":
        if os.path.abspath(path) == os.path.abspath(sys.executable):
            return None  # this interpreter is always asked
    try:
        full, _ = add(key, path)
    except BadInput:
        return None
    return f"saved {full} to {settings_path()}, so every client finds {env.id}"
