"""The log watch: what a run's processes say they are doing, recorded by its supervisor in
`<run>/health.json` (DESIGN §8). "Log watch" is this module's word for it; the verdict a client draws
from the record (is the run making progress?) is core.runs.flow's.

The supervisor calls `LogWatch.tick()` every HEALTH_INTERVAL_S while the run lives. Each tick
reads what each process log gained since the last tick (from the log's tail at most TAIL_BYTES back,
never the whole file) and counts its problem lines grouped by message (numbers aside; a line saying
`(×N since the last line)` counts N), and it GETs
the `status_url` of the processes that have one (run-api's `/status`: queue size and step). Clients
turn the record into a verdict with words (core.runs.flow); this module only observes.

Run-api's access log also tells when work flows: `POST /register-env` (an environment registered) and
`POST /scored_data` (a scored group delivered) are counted, per log.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from ..base.failures import logged_problem, problem_key
from ..base.fsutil import atomic_write_json, open_regular
from .readiness import http_get

HEALTH_FILE = "health.json"
HEALTH_INTERVAL_S = 2.0
TAIL_BYTES = 4 << 20  # a log's first read starts at most this far before its end
READ_BYTES = 1 << 20  # what one tick reads of one log at most (a flood is caught up on over ticks)
MAX_GROUPS = 50  # distinct problems kept per process (the most frequent)
REGISTERED = re.compile(r'"POST /register-env[^"]*" 200')
DELIVERED = re.compile(r'"POST /scored_data(?:_list)?[^"]*" 200')
# One line standing for several of the same error (an environment's repeats, dataplane/env_launch.py).
REPEATS = re.compile(r" \(×(\d+) since the last line\)")


class LogProblems:
    """Problem lines of one process log, grouped and counted, read incrementally from its tail."""

    def __init__(self, path: Path):
        self.path = path
        self.offset: int | None = None
        self.partial = b""
        self.groups: dict[str, dict] = {}
        self.lines = {"error": 0, "warning": 0}
        self.registered = 0
        self.delivered = 0
        self.first_registered_at: float | None = None

    def update(self, now: float) -> bool:
        """Read what the log gained; True when something was counted."""
        try:
            with open_regular(self.path) as handle:
                size = handle.seek(0, os.SEEK_END)
                if self.offset is None or size < self.offset:  # first look, or the log was truncated
                    self.offset, self.partial = max(0, size - TAIL_BYTES), b""
                if size == self.offset:
                    return False
                handle.seek(self.offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return False
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()[-65536:]
        changed = False
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if '"POST /' in line:
                if REGISTERED.search(line):
                    self.registered += 1
                    self.first_registered_at = self.first_registered_at or now
                    changed = True
                elif DELIVERED.search(line):
                    self.delivered += 1
                    changed = True
                continue
            found = logged_problem(line)
            if found is None:
                continue
            level, message = found
            changed = True
            times = 1
            if repeated := REPEATS.search(message):
                times, message = int(repeated.group(1)), message[: repeated.start()] + message[repeated.end() :]
            self.lines[level] += times
            key = problem_key(message)
            group = self.groups.get(key)
            if group is None:
                if len(self.groups) >= MAX_GROUPS:
                    self._drop_rarest()
                group = self.groups[key] = {"message": message, "level": level, "count": 0, "first_at": now}
            group["count"] += times
            group["last_at"] = now
            group["message"] = message  # the newest wording
        return changed

    def _drop_rarest(self) -> None:
        rarest = min(self.groups, key=lambda k: (self.groups[k]["count"], self.groups[k]["last_at"]))
        del self.groups[rarest]

    def to_json(self) -> dict:
        problems = sorted(self.groups.values(), key=lambda g: (-g["count"], -g["last_at"]))
        return {
            "errors": self.lines["error"],
            "warnings": self.lines["warning"],
            "problems": problems[:10],
            "registered": self.registered,
            "delivered": self.delivered,
            "first_registered_at": self.first_registered_at,
        }


class LogWatch:
    """Per process: its log's problems; per process with a status_url: the last answer."""

    def __init__(self, run_dir: Path, procs: dict):
        self.path = run_dir / HEALTH_FILE
        self.procs = procs  # name -> supervisor Proc (spec, log)
        self.logs = {name: LogProblems(proc.log) for name, proc in procs.items()}
        self.status: dict[str, dict] = {}
        self.status_at: dict[str, float] = {}  # when each answer was read (time.time())
        self.next_tick = 0.0
        self.written: str | None = None

    def due(self, now: float) -> float:
        """Seconds until the next tick."""
        return max(0.0, self.next_tick - now)

    def tick(self, monotonic_now: float) -> None:
        if monotonic_now < self.next_tick:
            return
        self.next_tick = monotonic_now + HEALTH_INTERVAL_S
        now = time.time()
        for name, proc in self.procs.items():
            if proc.ever_started:
                self.logs[name].update(now)
            url = proc.spec.status_url
            if url and proc.alive:
                asked = time.time()  # the answer was made after this
                self.status[name] = self.read_status(url)
                self.status_at[name] = asked
        record = {
            "time": now,
            "processes": {name: log.to_json() for name, log in self.logs.items()},
            "status": self.status,
        }
        text = json.dumps({k: v for k, v in record.items() if k != "time"}, sort_keys=True)
        if text == self.written:
            return  # nothing new: the record's time says when it last changed (the disk is spared)
        self.written = text
        try:
            atomic_write_json(self.path, record)
        except OSError:
            pass  # a full disk: health is an observation, the run goes on

    @staticmethod
    def read_status(url: str) -> dict:
        ok, body = http_get(url, timeout=1.0)
        if not ok:
            return {"error": body}
        try:
            answer = json.loads(body)
        except ValueError:
            return {"error": f"not JSON: {body[:80]}"}
        return answer if isinstance(answer, dict) else {"answer": answer}
