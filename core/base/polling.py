"""Waiting for something to become true: one poll loop with backoff for every part of hermes-rl."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    check: Callable[[], T],
    timeout: float,
    *,
    first: float = 0.01,
    cap: float = 0.25,
    factor: float = 1.5,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call `check` until it returns a truthy value or `timeout` seconds have passed; return its last value.

    The first re-check comes after `first` seconds, each later one `factor` times later, at most `cap`:
    quick answers for what is usually quick, few wake-ups for what takes long. `check` runs at least once.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    interval = first
    while True:
        value = check()
        remaining = deadline - time.monotonic()
        if value or remaining <= 0:
            return value
        sleep(min(interval, remaining))
        interval = min(interval * factor, cap)
