"""Wall-clock times read from state files are not trusted: a clock stepped back, a folder copied from
another machine or a hand-edited record can put them in the future. One rule for every age and wait
derived from them: a time in the future is an unknown age, never a long one (nor a long wait)."""

from __future__ import annotations

import math
import time
from typing import Any

from .fsutil import epoch_seconds

# How far ahead of this clock a recorded time may be and still count as "now" (a writer's clock a
# moment ahead, rounding): past it the time is in the future.
FUTURE_TOLERANCE_S = 5.0


def _epoch(value: Any) -> float | None:
    seconds = epoch_seconds(value)
    return seconds if seconds is not None and math.isfinite(seconds) else None


def age_s(then: Any, now: float | None = None) -> float | None:
    """Seconds since `then` (an epoch float or ISO text), or None when unknown: missing, malformed
    or in the future beyond FUTURE_TOLERANCE_S."""
    seconds = _epoch(then)
    if seconds is None:
        return None
    age = (time.time() if now is None else now) - seconds
    if age < -FUTURE_TOLERANCE_S:
        return None
    return max(0.0, age)


def in_future(then: Any, now: float | None = None) -> bool:
    """Whether a recorded time lies in the future beyond FUTURE_TOLERANCE_S."""
    seconds = _epoch(then)
    return seconds is not None and seconds - (time.time() if now is None else now) > FUTURE_TOLERANCE_S


def remaining_s(then: Any, limit_s: float, now: float | None = None) -> float:
    """How much of `limit_s` counted from `then` is left: 0 when `then` is unknown or in the future
    (a wait measured from an untrusted time never lasts longer than the limit from now, nor an hour)."""
    age = age_s(then, now)
    return 0.0 if age is None else max(0.0, min(limit_s, limit_s - age))
