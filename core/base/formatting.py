"""Numbers as people read them: sizes, durations, ages and metric values. One set for the CLI, the agent
tools' messages and tips, and any front end that wants the same words.

Every function takes what a record holds (None included) and returns text; `missing` is what an
absent value reads as.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .clock import age_s, in_future

MISSING = "-"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def counted(n: Any, noun: str, plural: str | None = None) -> str:
    """ "1 group", "2 groups": a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def shown_value(value: Any, limit: int = 60) -> str:
    """A value as an error message shows it: NaN, Infinity and -Infinity named as such (repr's `nan`
    and `inf` read like text, and a JSON NaN is not "empty" nor "a float"), anything else as its repr."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def human_size(num_bytes: Any, missing: str = MISSING) -> str:
    """Bytes in decimal units: "512 bytes", "1.2 kB", "123.5 MB" (rich.filesize.decimal)."""
    from rich.filesize import decimal  # noqa: PLC0415 - Rich: `--help` and the headless paths do without it

    value = _finite(num_bytes)
    if not value or value < 0:
        return missing
    return decimal(int(value))


def human_duration(seconds: Any, missing: str = MISSING) -> str:
    """A span of time to the second: "1 h 2 min", "3 min 4 s", "5 s"."""
    value = _finite(seconds)
    if value is None:
        return missing
    whole = max(0, int(value))
    if whole >= 3600:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    if whole >= 60:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole} s"


def human_age(timestamp: Any, now: float | None = None, missing: str = MISSING) -> str:
    """How long ago an epoch time was, in its largest unit: "3d", "2h", "5m", "7s"."""
    value = _finite(timestamp)
    if not value:
        return missing
    if in_future(value, now):
        return "future"
    seconds = age_s(value, now) or 0.0
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def human_number(value: Any, digits: int = 3, missing: str = MISSING) -> str:
    """A metric value: floats to `digits` decimals, anything else as it is."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def value_text(value: Any) -> str:
    """A config value as the user types it: true/false, none, JSON for lists and mappings, a string as
    it is ("" when empty), never a Python repr."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    if isinstance(value, str):
        return value if value else '""'
    return str(value)


def lineage(summaries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """run_id -> what a resumed run continues: "↳ a1b2c3d4", and "↳ a1b2c3d4 branch 2" for the second
    run resumed from the same parent (each resume of a parent is a branch of its own)."""
    children: dict[str, list[Mapping[str, Any]]] = {}
    for run in summaries:
        if run.get("parent_run_id"):
            children.setdefault(run["parent_run_id"], []).append(run)
    out = {}
    for parent, runs in children.items():
        runs.sort(key=lambda r: (r.get("created_at") or 0, r["run_id"]))
        for index, run in enumerate(runs, 1):
            out[run["run_id"]] = f"↳ {parent}" + (f" branch {index}" if len(runs) > 1 else "")
    return out


def process_id_text(proc: Mapping[str, Any], missing: str = MISSING, *, node: bool = False) -> str:
    """What identifies a running process: its pid here, or its job elsewhere ("job 16"; `node`: "job 16@vm")."""
    job = proc.get("job") if isinstance(proc.get("job"), Mapping) else None
    job_id = (job or {}).get("id") or proc.get("job_id")
    place = (job or {}).get("node") or proc.get("node")
    if (proc.get("launcher") or "local") != "local":
        if not job_id:
            return missing
        return f"job {job_id}" + (f"@{place}" if node and place else "")
    return str(proc.get("pid") or missing)


def process_place_text(proc: Mapping[str, Any], missing: str = MISSING) -> str:
    """Where a process runs, in the same words for every launcher: "local", or its launcher's line for its
    job ("vm RUNNING", "PENDING") as readers put it in `where` (a record without one: its node and state)."""
    if proc.get("where") is not None:
        return str(proc["where"]) or missing
    if (proc.get("launcher") or "local") == "local":
        return "local"
    job: Mapping[str, Any] = proc["job"] if isinstance(proc.get("job"), Mapping) else {}
    parts = [str(p) for p in (job.get("node") or proc.get("node"), job.get("state") or proc.get("slurm_state")) if p]
    return " ".join(parts) or missing


def exit_text(code: Any, missing: str = MISSING) -> str:
    """A process's exit code as people read it: "0", "1", and a signal by name ("SIGTERM", not -15)."""
    if code is None or isinstance(code, bool) or not isinstance(code, int):
        return missing if code is None else str(code)
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return str(code)


def metric_text(key: str, value: Any, missing: str = MISSING) -> str:
    """A final metric's value: a time as UTC, a whole number as an integer, others to 4 significant
    digits (a learning rate of 4e-05 is not "0.0000")."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if key == "time" or key.endswith(("_at", "/time")):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


# Table cells of a live view: coarse on purpose, so a cell that shows an age or an uptime changes
# (and repaints) every 5 s at most, not every second.
CELL_MISSING = "—"


def cell_duration(seconds: Any, missing: str = CELL_MISSING) -> str:
    """A compact span for a table cell: "45s" (in 5 s steps), "12m", "3h07m", "2d04h"."""
    value = _finite(seconds)
    if value is None:
        return missing
    whole = max(0, int(value))
    if whole < 60:
        return f"{whole // 5 * 5}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def cell_size(num_bytes: Any, missing: str = CELL_MISSING) -> str:
    """A compact size for a table cell, in binary units: "512B", "1.5K", "402.3M", "2.0G"."""
    value = _finite(num_bytes)
    if value is None:
        return missing
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}G"
