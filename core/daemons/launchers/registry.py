"""Launchers by name: the four hermes-rl ships (local, slurm, ray, skypilot) and any a package publishes under the
entry-point group `hermes_rl.launchers` (`name = "package.module:LAUNCHER"`, a Launcher object or a
class whose instances are one). Callers ask here, never by comparing a launcher's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from ...base.errors import BadInput
from .base import Launcher, command_keys
from .local import LAUNCHER as LOCAL
from .ray_jobs import LAUNCHER as RAY
from .skypilot import LAUNCHER as SKYPILOT
from .slurm import LAUNCHER as SLURM

ENTRY_POINT_GROUP = "hermes_rl.launchers"
_BUILT_IN: dict[str, Launcher] = {"local": LOCAL, "slurm": SLURM, "ray": RAY, "skypilot": SKYPILOT}
_registered: dict[str, Launcher] = {}
_published: dict[str, Launcher] | None = None  # loaded once per process, on first need


def register(launcher: Launcher) -> None:
    """Add a launcher by its name (a test's, a program's own); a published one of the same name gives way."""
    _registered[launcher.name] = launcher


def unregister(name: str) -> None:
    _registered.pop(name, None)


def _load_published() -> dict[str, Launcher]:
    global _published
    if _published is None:
        found: dict[str, Launcher] = {}
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name in _BUILT_IN:
                continue  # the built-in launchers are not replaced by a package
            try:
                loaded = entry.load()
            except Exception:  # noqa: BLE001 - a broken plug-in is left out, never breaks the built-ins
                continue
            launcher = loaded() if isinstance(loaded, type) else loaded
            if isinstance(launcher, Launcher):
                found[entry.name] = launcher
        _published = found
    return _published


def reload_published() -> None:
    """Read the entry points again (after a package was installed into this process's path)."""
    global _published
    _published = None


def find(name: str) -> Launcher | None:
    if name in _BUILT_IN:
        return _BUILT_IN[name]
    if name in _registered:
        return _registered[name]
    return _load_published().get(name)


def names() -> list[str]:
    """Every launcher's name: the built-in ones first."""
    return list(dict.fromkeys([*_BUILT_IN, *_registered, *_load_published()]))


def get(name: str | None) -> Launcher:
    """The launcher called `name` (None: local); BadInput naming those there are."""
    launcher = find(name or "local")
    if launcher is None:
        raise BadInput(f"launcher must be one of {', '.join(names())}, got {name!r}")
    return launcher


def without_commands(launcher: str, data: Mapping | None) -> dict:
    """`data` without the command keys of `launcher`'s settings (a resumed run takes the site's again)."""
    found = find(launcher)
    commands = command_keys(found.settings_class if found is not None else None)
    return {k: v for k, v in (data or {}).items() if k not in commands}
