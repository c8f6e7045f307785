"""Per-run rate limit for rl_check_status, kept on disk so it survives restarts and is shared.

An agent polling a long run every few seconds burns tokens and learns nothing; one polling every
30 minutes must still hear about a failure at once. So the limit is on *repeats of the same state*:
a check is answered in full when it is the first for the run, when the interval has passed, or when
the run's state (status, stall flag) differs from the one last reported. Anything else gets a short
"no change" answer. Unknown run ids never reach this module (the caller errors first), so a typo is
never rate-limited.

State: $HERMES_HOME/rl/status_checks/<run_id>.json, written atomically under an flock so two
processes (say the MCP server and the Hermes plugin) agree on what was last reported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..base.envvar_limits import env_number
from ..base.errors import BadInput
from ..base.fsutil import atomic_write_json, file_lock, read_json
from ..base.paths import ensure_private_dir, rl_dir, validate_run_id

DEFAULT_INTERVAL_S = 30 * 60
INTERVAL_ENV = "HERMES_RL_STATUS_INTERVAL_S"
MAX_INTERVAL_S = 7 * 24 * 3600


def status_checks_dir() -> Path:
    return rl_dir() / "status_checks"


def resolve_interval(override: object = None) -> float:
    """The minimum seconds between full reports: the parameter, else the env var, else 30 min."""
    if override is not None:
        if isinstance(override, bool) or not isinstance(override, (int, float)):
            raise BadInput(f"min_interval_s must be a number of seconds, got {override!r}"[:120])
        value = float(override)
        if not (0 <= value <= MAX_INTERVAL_S):
            raise BadInput(f"min_interval_s must be between 0 and {MAX_INTERVAL_S}, got {override!r}"[:120])
        return value
    return env_number(INTERVAL_ENV, float(DEFAULT_INTERVAL_S), maximum=MAX_INTERVAL_S)


@dataclass(frozen=True)
class Decision:
    full: bool  # answer with the full report
    reason: str  # "first check", "state changed", "interval passed", "final state", "no change"
    previous_state: str | None  # the state last reported, if any
    last_reported_at: float | None
    next_check_in_s: int  # seconds until a repeat would be answered in full (0 when full)


@contextmanager
def _locked(run_id: str) -> Iterator[Path]:
    path = ensure_private_dir(status_checks_dir()) / f"{run_id}.json"
    with file_lock(path):
        yield path


def _read_record(path: Path) -> dict:
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def decide(run_id: str, state: str, *, interval_s: float, final: bool, now: float | None = None) -> Decision:
    """Decide whether this check gets the full report, and record it if so.

    `state` is what counts as a change (e.g. "running" or "running+stalled"); `final` marks states
    that can no longer change (completed, failed, stopped, lost), which are always reported in full.
    """
    validate_run_id(run_id)
    now = time.time() if now is None else now
    with _locked(run_id) as path:
        record = _read_record(path)
        previous_state = record.get("state") if isinstance(record.get("state"), str) else None
        last_at = record.get("reported_at")
        last_at = float(last_at) if isinstance(last_at, (int, float)) and not isinstance(last_at, bool) else None

        if last_at is None or previous_state is None:
            reason = "first check"
        elif state != previous_state:
            reason = "state changed"
        elif final:
            reason = "final state"
        elif now - last_at >= interval_s or now < last_at:  # a clock set back never blocks reports
            reason = "interval passed"
        else:
            remaining = max(1, int(round(interval_s - (now - last_at))))
            return Decision(False, "no change", previous_state, last_at, remaining)

        atomic_write_json(path, {"run_id": run_id, "state": state, "reported_at": now})
        return Decision(True, reason, previous_state, last_at, 0)
