"""Starting and ending child processes as process groups: the one way every part of hermes-rl does it.

A long-lived child gets its own process group (or session) so it can be ended with everything it
started, and PR_SET_PDEATHSIG=SIGKILL so it dies with the process that started it, even by SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from typing import Any

from hermes_rl.core.daemons.procscan import signal_group

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


def end_group(proc: subprocess.Popen, grace: float = 5.0) -> int | None:
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
