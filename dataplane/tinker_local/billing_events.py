"""The tokens this server processed, per session, base model and UTC hour: what Tinker cloud bills and
reports at GET /api/v1/billing/usage/events (the SDK's AdminClient.get_billing_usage), so hermes-rl's
cloud-usage check runs the same SDK code against a local run.

- training: the tokens of every datum of a forward_backward (or forward-only) call that succeeded;
- sampling_prefill: the prompt of every sample request, once (a request with num_samples=n prefills once);
- sampling_sample: every token the sampler generated.

The local server has no rate card, so every estimated cost is None (the SDK's "cannot be priced").
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from .auth import LOCAL_USER_URN
from .wire import UserError

KINDS = ("training", "sampling_prefill", "sampling_sample")
MAX_WINDOW = timedelta(days=14)  # what Tinker cloud allows per request


class UsageLedger:
    """Token counts keyed (hour start, session id, base model, kind); written by the worker thread, read
    by the event loop (hence the lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[int, str | None, str | None, str], int] = {}

    def add(self, session_id: str | None, base_model: str | None, kind: str, tokens: int, now: float | None = None):
        if tokens <= 0:
            return
        hour = int((time.time() if now is None else now) // 3600) * 3600
        key = (hour, session_id or None, base_model, kind)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + int(tokens)

    def events(self, starting_on: datetime, ending_before: datetime, sessions: dict[str, dict]) -> dict:
        """The BillingUsageResponse for [starting_on, ending_before): ordered by bucket, then by descending
        token count (as Tinker cloud orders them)."""
        start, end = starting_on.timestamp(), ending_before.timestamp()
        with self._lock:
            rows = [(key, count) for key, count in self._counts.items() if start <= key[0] < end]
        rows.sort(key=lambda item: (item[0][0], -item[1]))
        data = [_event(*key, count) for key, count in rows]
        seen = {key[1] for key, _count in rows if key[1]}
        return {
            "data": data,
            "sessions": {
                session_id: {"user_metadata": (sessions.get(session_id) or {}).get("user_metadata") or None}
                for session_id in sorted(seen)
            },
            "cost_data_through": None,  # no invoice-priced day: nothing here is priced at all
        }


def _event(hour: int, session_id: str | None, base_model: str | None, kind: str, count: int) -> dict:
    info: dict = {"type": kind, "token_count": count}
    if kind == "sampling_prefill":
        info["cached"] = False  # no prefill cache here
    return {
        "bucket_start": _rfc3339(hour),
        "bucket_end": _rfc3339(hour + 3600),
        "base_model": base_model,
        "user_id": LOCAL_USER_URN,
        "user_name": None,
        "session_id": session_id,
        "project_id": None,
        "estimated_cost_usd": None,
        "effective_rate_usd_per_million_tokens": None,
        "effective_rate_usd_per_gigabyte_month": None,
        "event_info": info,
    }


def _rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_window(starting_on: str | None, ending_before: str | None, now: datetime | None = None):
    """The request's window as aware UTC datetimes; UserError for what Tinker cloud refuses too: a missing
    or unparsable bound, one not on a UTC hour, a start in the future, an empty window or one over 14 days."""
    bounds = []
    for name, text in (("starting_on", starting_on), ("ending_before", ending_before)):
        if not text:
            raise UserError(f"query parameter {name} is required (an RFC 3339 time on a UTC hour)")
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise UserError(f"{name} must be an RFC 3339 time, got {text!r}") from None
        if value.tzinfo is None:
            raise UserError(f"{name} must carry a time zone (e.g. Z), got {text!r}")
        value = value.astimezone(UTC)
        if value.minute or value.second or value.microsecond:
            raise UserError(f"{name} must be on a UTC hour boundary, got {text!r}")
        bounds.append(value)
    start, end = bounds
    if start > (now or datetime.now(UTC)):
        raise UserError("starting_on must not be in the future")
    if end <= start:
        raise UserError("ending_before must be after starting_on")
    if end - start > MAX_WINDOW:
        raise UserError("the window may span at most 14 days")
    return start, end
