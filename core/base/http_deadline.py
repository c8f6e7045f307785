"""One HTTP request with a deadline for the whole of it (connect, send, headers and body): a server that
trickles its answer cannot stretch it, as a per-read socket timeout would let it."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse


def request_within(
    url: str,
    deadline_s: float,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict | None = None,
    max_bytes: int = 2_000_000,
) -> tuple[int, str, bytes]:
    """(status, reason, at most max_bytes of the body); TimeoutError once the deadline passes (the
    connection is shut from this thread), else the OSError or http.client.HTTPException it met."""
    import http.client  # noqa: PLC0415 - 20 ms of ssl and email imports, paid only by a request

    parsed = urllib.parse.urlparse(url)
    if not parsed.hostname:
        raise http.client.InvalidURL(f"no host in {url!r}")
    kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    conn = kind(parsed.hostname, parsed.port, timeout=deadline_s)
    path = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    outcome: dict = {}

    def exchange() -> None:
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            outcome["answer"] = (response.status, response.reason, response.read(max_bytes))
        except (OSError, http.client.HTTPException) as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=exchange, daemon=True, name="hermes-rl-http")
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        if conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        worker.join(1.0)
        raise TimeoutError(f"no complete answer within {deadline_s:g} s")
    conn.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["answer"]
