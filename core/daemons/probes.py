"""Readiness probes of the supervisor (DESIGN §5): an HTTP GET, or a line in a process log.

Run in small threads; they only read, and post what they saw to the supervisor's loop."""

from __future__ import annotations

import re
from pathlib import Path

from ..base.fsutil import open_regular


def http_get(url: str, timeout: float) -> tuple[bool, str]:
    """GET url -> (status is 200, the body, or what happened instead). Direct connection: proxies never
    apply to 127.0.0.1 probes."""
    import http.client  # only runs with HTTP probes pay for it
    import urllib.parse

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
        self.handle = None

    def check(self) -> tuple[bool, str]:
        if self.handle is None:
            try:
                self.handle = open_regular(self.path)
            except OSError:
                return False, "log file not created yet"
            self.handle.seek(self.offset)
        data = self.handle.read(1 << 20)
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
