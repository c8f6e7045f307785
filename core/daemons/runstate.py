"""Recording a run's end in its folder: the one place run.json gets a final status, whoever ends it
(the supervisor, its watchdog, or a client stopping a run whose supervisor is gone)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..base.fsutil import append_jsonl, atomic_write_json, read_json
from ..base.states import PROC_NOT_ENDED, RECORDED_FINAL, ProcState, RunStatus


def read_run_file(folder: Path) -> dict | None:
    """run.json as a dict, or None when it is missing or unreadable."""
    try:
        run = read_json(Path(folder) / "run.json")
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def record_final(
    folder: Path, run: dict, status: RunStatus, reason: str, message: str | None = None, **event_fields
) -> dict:
    """Write `status` and `reason` to run.json (processes not ended become stopped) and the matching
    run_status event to events.jsonl. `run` is the latest run.json; returns it as written."""
    now = time.time()
    for proc in run.get("processes") or []:
        if isinstance(proc, dict) and proc.get("state") in PROC_NOT_ENDED:
            proc["state"] = ProcState.STOPPED
            proc["ended_at"] = proc.get("ended_at") or now
    run.update(status=status, reason=reason, ended_at=now)
    atomic_write_json(Path(folder) / "run.json", run)
    append_jsonl(
        Path(folder) / "events.jsonl",
        {
            "time": now,
            "event": "run_status",
            "status": status,
            "reason": reason,
            **event_fields,
            "message": message or f"run {status}: {reason}",
        },
    )
    return run


def is_recorded_final(run: Mapping[str, Any] | None) -> bool:
    return run is not None and run.get("status") in RECORDED_FINAL
