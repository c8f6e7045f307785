"""User key remapping: $HERMES_HOME/rl/keymap.yaml maps binding ids to keys.

    # ~/.hermes/rl/keymap.yaml
    run.start: ctrl+r
    app.quit: q,ctrl+q

Every Binding in the dashboard has an id (see `?`); unknown ids are reported, not fatal.
"""

from __future__ import annotations

from pathlib import Path

from hermes_rl.core.base.fsutil import read_regular_text
from hermes_rl.core.base.paths import rl_dir


def keymap_path() -> Path:
    return rl_dir() / "keymap.yaml"


def load_keymap(path: Path | None = None) -> tuple[dict[str, str], str | None]:
    """(keymap, problem): a bad file gives an empty keymap and a message saying what is wrong."""
    path = path or keymap_path()
    try:
        text = read_regular_text(path)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read {path}: {exc.strerror}"
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        return {}, f"{path} is not valid YAML: {str(exc).splitlines()[0]}"
    if not isinstance(data, dict):
        return {}, f"{path} must map binding ids to keys, e.g. `run.start: ctrl+r`"
    keymap, bad = {}, []
    for binding_id, keys in data.items():
        if isinstance(keys, list):
            keys = ",".join(str(k) for k in keys)
        if not isinstance(binding_id, str) or not isinstance(keys, str) or not keys.strip():
            bad.append(str(binding_id))
            continue
        keymap[binding_id] = keys.replace(" ", "")
    problem = f"ignored keymap entries: {', '.join(bad)}" if bad else None
    return keymap, problem
