"""Sweep records on disk (`<sweeps>/<id>/sweep.json`): read one, list them all, and the members reserved to
start, which hold places under the local-run limit (core.runs.start counts them; core.runs.sweeps, which
starts runs, writes them)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from ..base.errors import HermesError, NotFound
from ..base.fsutil import read_json
from ..base.paths import sweeps_dir

SWEEP_FILE = "sweep.json"
QUEUED, STARTING, STARTED, FAILED, CANCELLED = "queued", "starting", "started", "failed", "cancelled"


def _sweep_path(sweep_id: str) -> Path:
    if not isinstance(sweep_id, str) or len(sweep_id) != 8 or not all(c in "0123456789abcdef" for c in sweep_id):
        raise NotFound(f"no sweep {sweep_id!r}", hint="a sweep id is 8 hex digits, as the sweep listing shows")
    return sweeps_dir() / sweep_id / SWEEP_FILE


def read_sweep(sweep_id: str) -> dict:
    path = _sweep_path(sweep_id)
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise NotFound(f"no sweep {sweep_id}", hint="the sweep listing shows the sweep ids") from None
    except (OSError, ValueError) as exc:
        raise HermesError(f"sweep {sweep_id}: {SWEEP_FILE} is unreadable ({exc})", hint=f"inspect {path}") from None
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        raise HermesError(f"sweep {sweep_id}: {SWEEP_FILE} is not a sweep record", hint=f"inspect {path}")
    return data


def list_sweeps() -> list[dict]:
    """Every readable sweep, oldest first (the order the queue starts them in)."""
    out = []
    try:
        names = sorted(os.listdir(sweeps_dir()))
    except FileNotFoundError:
        return []
    for name in names:
        with contextlib.suppress(HermesError):
            out.append(read_sweep(name))
    out.sort(key=lambda s: (s.get("created_at") or 0, s.get("sweep_id") or ""))
    return out


def live_reservations() -> list[tuple[str, int]]:
    """(sweep id, member index) of each local sweep member reserved by a live process (its run may not
    be recorded yet): each holds a place under the local-run limit."""
    out = []
    for sweep in list_sweeps():
        if sweep.get("backend") != "local":
            continue
        for member in sweep.get("members") or []:
            pid = member.get("reserved_by")
            if member.get("state") == STARTING and isinstance(pid, int) and psutil.pid_exists(pid):
                out.append((sweep["sweep_id"], member.get("index")))
    return out
