"""The orders a runs listing can take (`hermes-rl runs --sort`, the dashboard's runs pane)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..base.errors import BadInput

SORT_KEYS = ("created", "eval", "reward")


def sort_runs(summaries: Sequence[Mapping[str, Any]], key: str = "created") -> list[Mapping[str, Any]]:
    """list_runs() rows newest first (`created`), or best first by the latest eval accuracy (`eval`)
    or the headline reward (`reward`); runs without the value last, newest first among them."""
    if key not in SORT_KEYS:
        raise BadInput(f"cannot sort runs by {key!r}", hint="one of " + ", ".join(SORT_KEYS))
    newest = sorted(summaries, key=lambda s: (s.get("created_at") or 0, s["run_id"]), reverse=True)
    if key == "created":
        return newest
    field = "eval_last" if key == "eval" else "reward"
    have: list[Mapping[str, Any]] = []
    lack: list[Mapping[str, Any]] = []  # one pass: `s not in have` compared whole dicts, quadratic in the runs
    for s in newest:
        (have if isinstance(s.get(field), (int, float)) else lack).append(s)
    return sorted(have, key=lambda s: s[field], reverse=True) + lack
