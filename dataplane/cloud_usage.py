"""What Tinker itself reports a run used: `python -m hermes_rl.dataplane.cloud_usage RUN_DIR`.

The trainer records the Tinker session(s) it used in `<run>/tinker_session.json` (record_session; ids and
times only, never a key). This asks Tinker's billing usage API (the SDK's AdminClient.get_billing_usage:
hourly buckets per session, lagging real time by up to a few hours, readable with a billing role) for the
UTC hours from the first session's start to now, keeps the events of the run's sessions, sums their
tokens per kind and their estimated USD, and writes `<run>/cloud_usage.json` (core.runs.cost compares it
with what hermes-rl counted).

The credentials are the environment's TINKER_API_KEY and TINKER_BASE_URL (Tinker cloud when unset). A
local run's server dies with the run and its key is never stored, so its trainer asks it at the end of
the run (Trainer.close) instead.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hermes_rl.core.base.fsutil import atomic_write_json, read_json
from hermes_rl.core.runs.cost import CLOUD_USAGE_FILE

TINKER_SESSION_FILE = "tinker_session.json"
MAX_WINDOW = timedelta(days=14)  # Tinker's limit per request
KIND_OF_EVENT = {"sampling_prefill": "prefill", "sampling_sample": "sample", "training": "train"}
DEFAULT_TIMEOUT_S = 30.0


class UsageError(Exception):
    """A one-line reason the usage could not be read."""


def record_session(run_dir: Path, session_id: str, base_url: str | None, local: bool) -> None:
    """Add a session to the run's tinker_session.json (a resumed or restarted trainer adds its own)."""
    path = Path(run_dir) / TINKER_SESSION_FILE
    try:
        sessions = list(read_json(path).get("sessions") or [])
    except (OSError, ValueError, AttributeError):
        sessions = []
    sessions.append(
        {
            "session_id": session_id,
            "base_url_kind": "local" if local else "cloud",
            "base_url": base_url,  # None: the SDK's default (Tinker cloud)
            "started_at": time.time(),
        }
    )
    atomic_write_json(path, {"sessions": sessions})


def read_sessions(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / TINKER_SESSION_FILE
    try:
        sessions = read_json(path).get("sessions") or []
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist: the run's trainer recorded no Tinker session") from None
    except (OSError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path} is unreadable: {exc}") from None
    sessions = [s for s in sessions if isinstance(s, dict) and s.get("session_id") and s.get("started_at")]
    if not sessions:
        raise UsageError(f"{path} names no session")
    return sessions


def windows(started_at: float, now: float) -> list[tuple[datetime, datetime]]:
    """[start hour, now rounded up to the next hour) in pieces of at most 14 days."""
    start = datetime.fromtimestamp(int(started_at // 3600) * 3600, UTC)
    end = datetime.fromtimestamp((int(now // 3600) + 1) * 3600, UTC)
    out = []
    while start < end:
        out.append((start, min(end, start + MAX_WINDOW)))
        start = out[-1][1]
    return out


def _query(base_url: str | None, api_key: str, start: datetime, end: datetime, timeout_s: float):
    """One BillingUsageResponse through the official SDK; its errors as one-line UsageErrors."""
    import tinker  # noqa: PLC0415 - tinker (torch): the trainer imports this for record_session

    where = base_url or "Tinker cloud"
    outcome: list = []

    def ask() -> None:
        try:
            client = tinker.AdminClient(base_url=base_url, api_key=api_key)
            outcome.append(client.get_billing_usage(start, end).result(timeout=timeout_s))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    # A daemon thread with a deadline: the SDK retries an unreachable server without end, and already the
    # AdminClient's constructor waits for the server's client config without a timeout.
    worker = threading.Thread(target=ask, name="tinker-usage", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise UsageError(f"{where} did not answer the usage request within {timeout_s:g} s (unreachable?)")
    result = outcome[0]
    if not isinstance(result, BaseException):
        return result
    if isinstance(result, (tinker.AuthenticationError, tinker.PermissionDeniedError)):
        raise UsageError(
            f"{where} refused the usage request ({result.status_code}): reading billing usage needs a key whose "
            "user has the admin or billing-admin role"
        )
    if isinstance(result, tinker.APIConnectionError):
        raise UsageError(f"{where} is unreachable: {type(result).__name__}: {result}")
    if isinstance(result, (concurrent.futures.TimeoutError, TimeoutError)):
        raise UsageError(f"{where} did not answer the usage request within {timeout_s:g} s")
    if isinstance(result, tinker.APIStatusError):
        raise UsageError(f"{where} answered the usage request with {result.status_code}: {result.message}")
    raise UsageError(f"the usage request to {where} failed: {type(result).__name__}: {result}")


def summarize(events, session_ids: set[str]) -> dict:
    """Tokens per kind and USD of the token events of `session_ids`; usd None when one of them lacks a
    cost (unknown stays unknown) or there is none."""
    tokens = {"prefill": 0, "sample": 0, "train": 0}
    usd, unpriced, counted = 0.0, 0, 0
    for event in events:
        kind = KIND_OF_EVENT.get(event.event_info.type)
        if kind is None or event.session_id not in session_ids:
            continue  # checkpoints and storage: hermes-rl prices tokens only
        counted += 1
        tokens[kind] += int(event.event_info.token_count)
        if event.estimated_cost_usd is None:
            unpriced += 1
        else:
            usd += float(event.estimated_cost_usd)
    return {
        "tokens": tokens,
        "usd": None if unpriced or not counted else round(usd, 6),
        "events": counted,
        "unpriced_events": unpriced,
    }


def check(
    run_dir: Path,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    now: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict:
    """Ask for the run's usage and write cloud_usage.json; the record written. `base_url` and `api_key`
    default to TINKER_BASE_URL and TINKER_API_KEY."""
    run_dir = Path(run_dir)
    sessions = read_sessions(run_dir)
    base_url = base_url or os.environ.get("TINKER_BASE_URL") or None
    api_key = api_key or os.environ.get("TINKER_API_KEY") or ""
    local = all(s.get("base_url_kind") == "local" for s in sessions)
    if local and not base_url:
        raise UsageError(
            "the run trained on a local Tinker server, which ended with the run: its trainer recorded the "
            "server's usage at the end of the run (cloud_usage.json)"
        )
    if not api_key:
        raise UsageError("TINKER_API_KEY is not set: set it in the environment or in $HERMES_HOME/.env")
    now = time.time() if now is None else now
    spans = windows(min(float(s["started_at"]) for s in sessions), now)
    events, through = [], None
    for start, end in spans:
        response = _query(base_url, api_key, start, end, timeout_s)
        events.extend(response.data)
        if response.cost_data_through is not None:
            through = response.cost_data_through
    session_ids = {str(s["session_id"]) for s in sessions}
    record = {
        "checked_at": now,
        "window": {"starting_on": spans[0][0].isoformat(), "ending_before": spans[-1][1].isoformat()},
        "sessions": sorted(session_ids),
        **summarize(events, session_ids),
        "cost_data_through": through.isoformat() if through is not None else None,
        "source": "local" if local else "cloud",
        "base_url": base_url,
    }
    atomic_write_json(run_dir / CLOUD_USAGE_FILE, record)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_rl.dataplane.cloud_usage", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="the run's folder")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for Tinker")
    args = parser.parse_args(argv)
    try:
        record = check(args.run_dir, timeout_s=args.timeout)
    except UsageError as exc:
        print(f"cloud usage: {exc}", file=sys.stderr)
        return 1
    tokens = record["tokens"]
    print(
        f"{record['events']} usage events: prefill {tokens['prefill']} · sample {tokens['sample']} · "
        f"train {tokens['train']} tokens; usd {record['usd']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
