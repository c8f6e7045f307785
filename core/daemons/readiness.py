"""Readiness: whether a run's process is ready (DESIGN §5), by an HTTP GET answering 200 or a line in a
process log. ("Readiness" is the supervisor's word; "probe" is config probing of environments.)

Each check runs in a small thread of its own (one per process attempt); it only reads, and posts what it
saw to the supervisor's loop (`ReadinessChecks.results`), which decides what follows."""

from __future__ import annotations

import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from ..base.fsutil import open_regular

FAST_CAP_S = 0.05  # check interval cap during the first FAST_WINDOW_S of a start
FAST_WINDOW_S = 10.0
SLOW_CAP_S = 0.25


def http_get(url: str, timeout: float) -> tuple[bool, str]:
    """GET url -> (status is 200, the body, or what happened instead). Direct connection: proxies never
    apply to 127.0.0.1 checks."""
    import http.client  # noqa: PLC0415 - 20 ms of ssl and email imports, paid only by runs with HTTP checks

    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "hermes-rl-supervisor"})
        response = conn.getresponse()
        body = response.read(65536)
        if response.status != 200:
            return False, f"HTTP {response.status}"
        return True, body.decode("utf-8", errors="replace")
    except ConnectionRefusedError:
        return False, "connection refused"
    except TimeoutError:
        return False, f"no answer within {timeout:.1f}s"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"[:200]
    finally:
        conn.close()


def http_ready(url: str, timeout: float) -> tuple[bool, str]:
    """GET url -> (status is 200, what happened)."""
    ok, detail = http_get(url, timeout)
    return ok, "HTTP 200" if ok else detail


class LogMatcher:
    """Finds the first line matching a regex in a process log, from a byte offset, reading only what is new."""

    def __init__(self, path: Path, offset: int, pattern: str):
        self.path = path
        self.offset = offset
        self.regex = re.compile(pattern)
        self.partial = b""
        self.handle: IO[bytes] | None = None

    def check(self) -> tuple[bool, str]:
        handle = self.handle
        if handle is None:
            try:
                handle = self.handle = open_regular(self.path)
            except OSError:
                return False, "log file not created yet"
            handle.seek(self.offset)
        data = handle.read(1 << 20)
        if not data:
            return False, f"no line matching /{self.regex.pattern}/ yet"
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > (1 << 20):  # an endless line: test it anyway rather than grow forever
            lines.append(self.partial)
            self.partial = b""
        for raw in lines:
            if self.regex.search(raw.decode("utf-8", errors="replace")):
                return True, "matched"
        return False, f"no line matching /{self.regex.pattern}/ yet"

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


class ReadinessChecks:
    """The readiness checks of one run's processes. `start` runs one in a thread for a process attempt;
    the thread posts ("ready" | "timeout", name, attempt, detail) and calls `wake`; the supervisor's loop
    takes those with `results` (stale ones, of an attempt that has ended, are the caller's to skip)."""

    def __init__(self, wake: Callable[[], None]):
        self.wake = wake
        self._results: queue.SimpleQueue = queue.SimpleQueue()

    def start(self, proc, source) -> None:
        """Check `proc` (a process.Proc) for readiness, reading `source`'s log when its check is by log
        line (another process's: run-api's, for an environment registering with it) from now on."""
        proc.readiness_log = (source.log, proc.log_offset if source is proc else _size(source.log))
        if proc.spec.readiness.kind == "http":
            import http.client  # noqa: F401, PLC0415 - imported here, in the main thread, not inside a check's thread
        cancel = threading.Event()
        proc.readiness_cancel = cancel
        thread = threading.Thread(
            target=self._loop, args=(proc, proc.attempt, cancel), name=f"ready-{proc.name}", daemon=True
        )
        thread.start()

    @staticmethod
    def cancel(proc) -> None:
        if proc.readiness_cancel is not None:
            proc.readiness_cancel.set()
            proc.readiness_cancel = None

    def results(self) -> Iterator[tuple[str, str, int, str | None]]:
        while True:
            try:
                yield self._results.get_nowait()
            except queue.Empty:
                return

    def _post(self, item: tuple) -> None:
        self._results.put(item)
        self.wake()

    def _loop(self, proc, attempt: int, cancel: threading.Event) -> None:
        readiness = proc.spec.readiness
        began = time.monotonic()
        deadline = began + readiness.timeout_s
        log, offset = proc.readiness_log
        matcher = LogMatcher(log, offset, readiness.pattern) if readiness.kind == "log" else None
        interval = 0.01
        last = "no answer yet"
        try:
            while not cancel.is_set():
                remaining = deadline - time.monotonic()
                if readiness.kind == "http":
                    ok, last = http_ready(readiness.url, timeout=max(0.05, min(1.0, remaining)))
                elif matcher is not None:
                    ok, last = matcher.check()
                else:  # a "none" check is ready at once and never waits here
                    ok = True
                if cancel.is_set():
                    return
                if ok:
                    self._post(("ready", proc.name, attempt, None))
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._post(("timeout", proc.name, attempt, last))
                    return
                cancel.wait(min(interval, remaining))
                # Quick checks while a fast start is likely, gentler ones for a long model load.
                cap = FAST_CAP_S if time.monotonic() - began < FAST_WINDOW_S else SLOW_CAP_S
                interval = min(interval * 1.5, cap)
        except Exception as exc:  # noqa: BLE001 - a check's bug must surface as a reason, not a silent hang
            self._post(("timeout", proc.name, attempt, f"readiness check error: {exc}"))
        finally:
            if matcher:
                matcher.close()


def timeout_reason(proc, detail: str | None) -> str:
    """Why `proc` was not ready in time, in words."""
    readiness = proc.spec.readiness
    what = (
        f"GET {readiness.url} did not return 200"
        if readiness.kind == "http"
        else f"no log line matched /{readiness.pattern}/"
    )
    return f"{proc.name} was not ready within {readiness.timeout_s:g}s ({what}; last: {detail})"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
