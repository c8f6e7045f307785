"""The audit of one run folder (the rule of core.base.audit_rule over its files): metrics.jsonl's first and last
rows, env_metrics.jsonl's, and the groups the environments dropped for scoring alike or running too
long (counted by the supervisor in health.json from their "Scores are the same in a group" and "Token
length is too long" lines).

Reads at most HEAD_BYTES + TAIL_BYTES of each file, so an audit of a days-long run costs what one of
a short run does. Here rather than in core.runs because the supervisor's alerts use it too.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..base.audit_rule import audit
from ..base.fsutil import open_regular, parse_jsonl_line, read_json
from .log_watch import HEALTH_FILE

HEAD_BYTES = 128 << 10
TAIL_BYTES = 512 << 10
ROLLOUT_BYTES = 256 << 10  # the last recorded groups, which tell why groups scored alike
ROLLOUTS_FILE = "rollouts.jsonl"  # written by the trainer (core.readers.rollouts reads it whole)
_DROPS = {"same_scores": "Scores are the same in a group", "too_long": "Token length is too long"}


def _rows(path: Path, *, tail: bool, limit: int) -> list[dict]:
    """The whole JSON lines among a file's first (or last) `limit` bytes."""
    try:
        with open_regular(path) as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - limit) if tail else 0
            handle.seek(start)
            data = handle.read(min(limit, size - start))
    except OSError:
        return []
    lines = data.split(b"\n")
    if tail and start > 0:
        lines = lines[1:]  # the first is the end of a line that began before the read
    if not tail or not data.endswith(b"\n"):
        lines = lines[:-1]  # a line cut by the read (or being written)
    return [row for row in (parse_jsonl_line(line) for line in lines) if row is not None]


def dropped_groups(run_dir: Path) -> dict[str, int]:
    """{"same_scores": n, "too_long": n}: groups the run's processes logged as dropped (health.json)."""
    try:
        record = read_json(run_dir / HEALTH_FILE)
    except (OSError, ValueError):
        return {}
    out = dict.fromkeys(_DROPS, 0)
    for observed in ((record or {}).get("processes") or {}).values() if isinstance(record, dict) else ():
        for problem in (observed or {}).get("problems") or []:
            message = str(problem.get("message") or "")
            for key, words in _DROPS.items():
                if words in message:
                    out[key] += int(problem.get("count") or 0)
    return out


def audit_run_dir(run_dir: str | os.PathLike) -> dict[str, Any]:
    """{verdict, reasons, signals} of the run in this folder."""
    folder = Path(run_dir)
    metrics, env = folder / "metrics.jsonl", folder / "env_metrics.jsonl"
    return audit(
        _rows(metrics, tail=False, limit=HEAD_BYTES),
        _rows(metrics, tail=True, limit=TAIL_BYTES),
        _rows(env, tail=False, limit=HEAD_BYTES),
        _rows(env, tail=True, limit=TAIL_BYTES),
        dropped_groups(folder),
        [row for row in _rows(folder / ROLLOUTS_FILE, tail=True, limit=ROLLOUT_BYTES) if "completions" in row],
    )


_CACHE: dict[str, tuple[tuple, dict[str, Any]]] = {}
_CACHE_LOCK = threading.Lock()


def _sig(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def cached_audit(run_dir: str | os.PathLike) -> dict[str, Any]:
    """audit_run_dir, taken again only when one of the files it reads changed (a runs listing and the
    dashboard ask every second; a live run's files change once a step)."""
    folder = Path(run_dir)
    sig = tuple(_sig(folder / name) for name in ("metrics.jsonl", "env_metrics.jsonl", HEALTH_FILE, ROLLOUTS_FILE))
    key = str(folder)
    with _CACHE_LOCK:
        known = _CACHE.get(key)
    if known and known[0] == sig:
        return known[1]
    result = audit_run_dir(folder)
    with _CACHE_LOCK:
        if len(_CACHE) > 1000:  # runs come and go: a listing of many runs keeps the newest
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (sig, result)
    return result


def brief(result: dict[str, Any]) -> dict[str, Any]:
    """What a runs listing carries of an audit: {verdict, reason} (its first reason)."""
    return {"verdict": result["verdict"], "reason": (result["reasons"] or [None])[0]}
