"""Stall detection, one rule for every client: a running run with no sign of progress for a while."""

from __future__ import annotations

import os

from .clock import age_s
from .envvar_limits import env_number
from .fsutil import epoch_seconds
from .states import ACTIVE, RunStatus

STALL_ENV = "HERMES_RL_STALL_S"
DEFAULT_STALL_S = 900.0


def stall_threshold(seconds: float | None = None) -> float:
    """Seconds without a metric row or trainer log line (see progress_logs) after which a running
    run is `stalled` (0: never).
    `seconds` overrides $HERMES_RL_STALL_S (default 900 s); a negative, NaN or infinite value is refused."""
    if seconds is None:
        return env_number(STALL_ENV, DEFAULT_STALL_S, maximum=365 * 86400, meaning_of_zero="never stalled")
    return max(0.0, float(seconds))


def progress_logs(processes) -> tuple:
    """The logs whose lines count as progress: those of the processes whose work completes the run
    (the trainer), else, when no process completes it, every process's. A helper's log is no sign of
    progress: run-api writes an access-log line for every poll of an environment that waits on a
    frozen trainer, and would keep such a run from ever being seen as stalled."""
    procs = [p for p in processes or [] if isinstance(p, dict)]
    chosen = [p for p in procs if p.get("completes_run")] or procs
    return tuple(p.get("log") for p in chosen)


def _activity_times(started_at, last_metric: dict | None, log_paths) -> list[float]:
    """The signs of life: the last metric row's time, the mtime of each log in `log_paths` (see
    progress_logs) and the start; times in the future are left out (see clock.age_s)."""
    times = [epoch_seconds(started_at), epoch_seconds((last_metric or {}).get("time"))]
    for path in log_paths:
        if path:
            try:
                times.append(os.stat(path).st_mtime)
            except OSError:
                pass
    return [t for t in times if t is not None and age_s(t) is not None]


def stall_fields(status, started_at, last_metric, log_paths, stall_after_s: float | None) -> dict:
    """{last_activity_at, stalled, stalled_for_s} of a run; only a `running` run can be stalled."""
    if status not in ACTIVE:
        return {"last_activity_at": None, "stalled": False, "stalled_for_s": None}
    times = _activity_times(started_at, last_metric, log_paths)
    last = max(times) if times else None
    threshold = stall_threshold(stall_after_s)
    idle = None if last is None else round(age_s(last) or 0.0, 1)
    stalled = status == RunStatus.RUNNING and threshold > 0 and idle is not None and idle > threshold
    return {"last_activity_at": last, "stalled": stalled, "stalled_for_s": idle if stalled else None}
