"""The launchers this install knows (`hermes-rl launchers`): each one's site settings and what its
preflight says of them, so a site problem shows before a run starts."""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from importlib import metadata
from typing import Any

from ..base.errors import HermesError
from ..base.paths import rl_dir
from ..daemons import launchers
from ..daemons.launchers.registry import ENTRY_POINT_GROUP


def _published_by() -> dict[str, str]:
    """Launcher name -> the package that publishes it under the entry-point group."""
    out = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry, "dist", None)
        out[entry.name] = f"{dist.name} {dist.version}" if dist is not None else entry.value
    return out


def _settings_keys(settings_class: type | None) -> list[dict[str, Any]]:
    if settings_class is None or not is_dataclass(settings_class):
        return []
    commands = launchers.command_keys(settings_class)
    keys = []
    for item in fields(settings_class):
        default = item.default_factory() if item.default_factory is not MISSING else item.default
        default = None if default is MISSING else default
        keys.append({"name": item.name, "default": default, "command": item.name in commands})
    return keys


def list_launchers(*, preflight: bool = True) -> list[dict[str, Any]]:
    """Every launcher: name, where it comes from, its site file and settings, its settings' keys (those
    that are commands marked), and its preflight over the site's settings ("ok", or the reason)."""
    published = _published_by()
    rows = []
    for name in launchers.names():
        launcher = launchers.get(name)
        path = rl_dir() / launcher.site_file if launcher.site_file else None
        row: dict[str, Any] = {
            "name": name,
            "from": published.get(name, "hermes-rl"),
            "remote": bool(launcher.remote),
            "site_file": str(path) if path else None,
            "site_file_exists": bool(path and path.is_file()),
            "site_settings": None,
            "settings": _settings_keys(launcher.settings_class),
            "preflight": None,
        }
        try:
            site = launcher.site_settings()
            row["site_settings"] = site
            if preflight:
                launcher.preflight(site)
                row["preflight"] = "ok"
        except HermesError as exc:
            row["preflight"] = exc.message
        except Exception as exc:  # noqa: BLE001 - a plug-in's preflight failing says so, never hides the others
            row["preflight"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows
