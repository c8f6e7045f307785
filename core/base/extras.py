"""Which of hermes-rl's extras provides a package, read from hermes-rl's own installed metadata (so
pyproject.toml stays the one list): every install hint names the extra a user installs, never a bare
package that would leave the rest of that extra out (`pip install 'hermes-rl[train]'`, not
`pip install atroposlib`)."""

from __future__ import annotations

import functools
import importlib.util
import re

DISTRIBUTION = "hermes-rl"
# What each backend's processes import: the Tinker cloud path needs the trainer's and environments'
# packages; the local backend adds the local server's.
BACKEND_EXTRA = {"tinker": "train", "local": "local"}
_ORDER = ("train", "local", "mcp", "dev")  # the smallest extra first
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?[^;]*(?:;\s*extra\s*==\s*\"([^\"]+)\")?")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def _extras() -> dict[str, list[str]]:
    """extra -> the distributions it brings (its own and those of the extras it names), normalised."""
    from importlib import metadata  # noqa: PLC0415 - 20 ms, paid only when an extra is looked up

    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return {}
    direct: dict[str, list[str]] = {}
    nested: dict[str, list[str]] = {}
    for line in requires:
        match = _REQUIREMENT.match(line)
        if not match or not match.group(3):
            continue
        name, inner, extra = match.groups()
        if _normal(name) == _normal(DISTRIBUTION):
            nested.setdefault(extra, []).extend(x.strip() for x in (inner or "[]")[1:-1].split(",") if x.strip())
        else:
            direct.setdefault(extra, []).append(_normal(name))

    def brings(extra: str, seen: frozenset = frozenset()) -> list[str]:
        out = list(direct.get(extra, []))
        for other in nested.get(extra, []):
            if other not in seen:
                out += brings(other, seen | {extra})
        return out

    return {extra: brings(extra) for extra in {*direct, *nested}}


def extra_providing(module: str) -> str | None:
    """The smallest extra that installs the distribution a top-level module usually comes from
    (module `math_verify` from `math-verify`), or None when no extra does."""
    top = _normal(module.split(".")[0])
    extras = _extras()
    for extra in sorted(extras, key=lambda e: _ORDER.index(e) if e in _ORDER else len(_ORDER)):
        if top in extras[extra]:
            return extra
    return None


def install_command(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_for_backend(backend: str) -> tuple[str, list[str]] | None:
    """(extra, its missing top-level modules) when this Python lacks what a backend's processes import;
    None when nothing is missing. Looked up without importing anything."""
    extra = BACKEND_EXTRA.get(backend)
    if extra is None:
        return None
    missing = [m for m in _extras().get(extra, []) if importlib.util.find_spec(m) is None]
    return (extra, missing) if missing else None
