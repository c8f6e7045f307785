"""Starting and ending child processes as process groups: the one way every part of hermes-rl does it.

A long-lived child gets its own process group (or session) so it can be ended with everything it
started, and PR_SET_PDEATHSIG=SIGKILL so it dies with the process that started it, even by SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..base.fsutil import open_regular
from ..base.paths import sweep_queue_flag
from .procscan import MARKER, PROCESS_MARKER, SUPERVISOR_MARKER, marked_processes, signal_group, terminate

PR_SET_PDEATHSIG = 1
PARENT_GONE_EXIT = 70  # what a child exits with when its parent died before the guard was in place

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def child_preexec(parent_pid: int):
    """A `preexec_fn` that ties the child's life to `parent_pid` (the caller).

    In the forked child, before exec: PR_SET_PDEATHSIG=SIGKILL, umask 077 (what the child writes
    stays private), and exit PARENT_GONE_EXIT if the parent already died before the guard was set.
    """

    def setup() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.umask(0o077)
        if os.getppid() != parent_pid:  # we lost the race: the parent is already gone
            os._exit(PARENT_GONE_EXIT)

    return setup


def spawn_group(argv: list[str], *, tied: bool = True, session: bool = False, **popen: Any) -> subprocess.Popen:
    """Popen `argv` as the leader of a new process group (`session`: of a new session, which also drops
    the controlling terminal). `tied`: the child dies with us (child_preexec)."""
    popen.setdefault("close_fds", True)
    if session:
        popen["start_new_session"] = True
    else:
        popen["process_group"] = 0
    if tied:
        popen["preexec_fn"] = child_preexec(os.getpid())
    return subprocess.Popen(argv, **popen)


class Child(Protocol):
    """What end_group needs of a child: a Popen, or a launcher's process (launchers.LocalProcess)."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> int: ...


def end_group(proc: Child, grace: float = 5.0) -> int | None:
    """SIGTERM the child's process group (with SIGCONT: a stopped child still ends), SIGKILL the group
    after `grace` seconds, and reap the child. Returns its exit code (None if it could not be reaped)."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc.pid, signal.SIGKILL)  # the leader may be gone while the rest of its group lives on
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return None


def describe_exit(code: int | None) -> str:
    """An exit code in words: `exited with code 1`, `was killed by SIGKILL (exit code -9)`."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit code {code})"
    return f"exited with code {code}"


CHILD_TOKEN = "HERMES_RL_CHILD_TOKEN"  # a one-off marker in a bounded child's environment


@dataclass
class BoundedRun:
    stdout: bytes
    stderr: bytes
    returncode: int | None
    timed_out: bool


def run_bounded(
    argv: list[str],
    timeout: float,
    *,
    env: dict[str, str],
    cwd: str | None = None,
    max_bytes: int = 8 * 1024 * 1024,
    after_exit_s: float = 0.5,
) -> BoundedRun:
    """Run a short-lived child with an overall deadline, reading its stdout and stderr.

    `timeout` bounds the whole call, however the child behaves: output that trickles, pipes a forked
    daemon keeps open after the child exits (read for `after_exit_s` more, then closed), a child that
    never ends. Afterwards its session is killed and so is every process still carrying its one-off
    environment marker (a daemon that left the session by setsid() and a double fork), so it leaves
    nothing running. The child dies with the calling thread (which waits for it here), so a client
    killed mid-call leaves none either."""
    token = secrets.token_hex(8)
    proc = spawn_group(
        argv,
        session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env={**env, CHILD_TOKEN: token},
    )
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both asked for as pipes above
    out_fd, err_fd = stdout.fileno(), stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    sizes = dict.fromkeys(chunks, 0)
    deadline = time.monotonic() + timeout
    exited_at = None
    timed_out = False
    selector = selectors.DefaultSelector()
    for pipe in (stdout, stderr):
        selector.register(pipe, selectors.EVENT_READ)
    try:
        while selector.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            limit = deadline if exited_at is None else min(deadline, exited_at + after_exit_s)
            if now >= limit:
                timed_out = exited_at is None
                break
            for key, _ in selector.select(timeout=min(0.1, limit - now)):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                elif sizes[key.fd] < max_bytes:
                    chunks[key.fd].append(data)
                    sizes[key.fd] += len(data)
        if not timed_out and proc.poll() is None:  # it closed its pipes but runs on
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        selector.close()
        stdout.close()
        stderr.close()
        if proc.poll() is None:
            end_group(proc, grace=0.5)
        end_bounded_child(proc.pid, token)
    return BoundedRun(b"".join(chunks[out_fd]), b"".join(chunks[err_fd]), proc.returncode, timed_out)


def end_bounded_child(pid: int, token: str) -> None:
    """What a bounded child leaves once it is done or out of time: its session (it leads one), then every
    process still carrying its one-off CHILD_TOKEN (a daemon that left the session by setsid and a fork)."""
    signal_group(pid, signal.SIGKILL)
    leftovers = marked_processes(CHILD_TOKEN, token)
    if leftovers:
        terminate(leftovers, timeout=1.0)


def start_sweep_queue() -> str | None:
    """A run ended, so a place under the local-run limit may be free: when a sweep has runs waiting
    (its queue flag exists), start `python -m hermes_rl.core.runs.sweeps start-queued`, which starts
    them. It runs detached and untied, without any run's markers: it is no run's process and outlives
    the one that ended. Returns why it could not start, else None."""
    flag = sweep_queue_flag()
    if not flag.exists():
        return None
    env = {k: v for k, v in os.environ.items() if k not in (MARKER, PROCESS_MARKER, SUPERVISOR_MARKER)}
    try:
        with open_regular(flag.parent / "queue.log", "ab") as log:
            spawn_group(
                [sys.executable, "-m", "hermes_rl.core.runs.sweeps", "start-queued"],
                tied=False,
                session=True,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(flag.parent),
                env=env,
            )
    except OSError as exc:
        return f"could not start the sweep queue: {exc}"
    return None
