"""Limits read from environment variables (HERMES_RL_MAX_LOCAL_RUNS, timeouts, stall thresholds): one
reader for all, so a negative, NaN or infinite value is refused by name instead of silently meaning
"no limit" (max(0, nan) is 0, and inf passes every `> x` check)."""

from __future__ import annotations

import math
import os

from .errors import BadInput


def env_number(
    name: str,
    default: float,
    *,
    minimum: float = 0.0,
    maximum: float | None = None,
    integer: bool = False,
    meaning_of_zero: str | None = None,
) -> float:
    """$name as a finite number in [minimum, maximum] (an int with `integer`), `default` when unset or
    empty; BadInput naming the variable and what is wrong otherwise."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    example = f"unset it or set e.g. {name}={default:g}" + (f" (0: {meaning_of_zero})" if meaning_of_zero else "")
    shown = text if len(text) <= 40 else text[:37] + "..."
    try:
        if not text.isascii():  # float("１５") is 15.0 in Python: a limit is written in ASCII digits
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise BadInput(f"{name}={shown!r} is not a number", hint=example) from None
    if math.isnan(value):
        raise BadInput(f"{name} is NaN, which is not a limit", hint=example)
    if math.isinf(value):
        raise BadInput(f"{name} is {'-' if value < 0 else ''}Infinity, which is not a limit", hint=example)
    if value < minimum:
        what = "negative" if value < 0 else f"below {minimum:g}"
        raise BadInput(f"{name}={shown} is {what}", hint=example)
    if maximum is not None and value > maximum:
        raise BadInput(f"{name}={shown} is above {maximum:g}", hint=example)
    if integer:
        if not value.is_integer():
            raise BadInput(f"{name}={shown} is not a whole number", hint=example)
        return int(value)
    return value
