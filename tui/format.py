"""Small display helpers shared by the panes."""

from __future__ import annotations

import math

SPARK_CHARS = "▁▂▃▄▅▆▇█"

STATUS_STYLE = {
    "starting": ("◌", "yellow"),
    "running": ("●", "green"),
    "stopping": ("◍", "yellow"),
    "stopped": ("■", "grey62"),
    "completed": ("✔", "bright_green"),
    "failed": ("✖", "red"),
    "lost": ("?", "magenta"),
}
PROCESS_STYLE = {
    "pending": ("·", "grey62"),
    "starting": ("◌", "yellow"),
    "ready": ("●", "green"),
    "exited": ("✔", "grey62"),
    "failed": ("✖", "red"),
    "stopped": ("■", "grey62"),
}
FINAL_STATUSES = {"stopped", "completed", "failed", "lost"}


def spark(values: list[float], width: int = 16) -> str:
    """A text sparkline of the last `width` values (scaled to their own min..max)."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    if span <= 0:
        return SPARK_CHARS[3] * len(values)
    top = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[round((v - low) / span * top)] for v in values)


def trend(values: list[float]) -> str:
    """↑/↓/→ comparing the mean of the last few values with the few before."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return " "
    window = max(1, min(5, len(values) // 2))
    recent = sum(values[-window:]) / window
    before = sum(values[-2 * window:-window]) / window
    scale = max(abs(recent), abs(before), 1e-12)
    if abs(recent - before) / scale < 0.01:
        return "→"
    return "↑" if recent > before else "↓"


def number(value, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def duration(seconds) -> str:
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds // 5 * 5}s"  # 5 s steps: an age or uptime cell repaints every 5 s, not every second
    if seconds < 3600:
        return f"{seconds // 60}m"     # minutes only: a live table does not repaint every second
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def size(num) -> str:
    if num is None:
        return "—"
    num = float(num)
    for unit in ("B", "K", "M", "G"):
        if num < 1024 or unit == "G":
            return f"{num:.0f}{unit}" if unit == "B" else f"{num:.1f}{unit}"
        num /= 1024
    return f"{num:.1f}T"


def timestamp(value) -> float | None:
    """run.json times may be epoch floats or ISO strings (core.fsutil.epoch_seconds)."""
    from hermes_rl.core.base.fsutil import epoch_seconds

    return epoch_seconds(value)


def set_subtitle(widget, text: str) -> None:
    """Set a border subtitle only when it changes (setting it repaints the widget)."""
    if widget.border_subtitle != text:
        widget.border_subtitle = text
