"""The local launcher: a run's process on this machine, as a process group of its own (or a fork of the
run's warm server). The supervisor ties each to itself (PDEATHSIG); the watchdog ends its group
(`pgid N`) should the supervisor die.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...base.errors import BadInput
from .. import procscan
from ..spawn import describe_exit, spawn_group
from ..warm.client import ColdStartNeeded, WarmStarts

SIGKILL_GRACE_S = 5.0  # how long a process group gets to vanish after SIGKILL before we report it


class LocalProcess:
    """A child of the supervisor, leader of its own process group (tied to us by PDEATHSIG)."""

    launcher = "local"
    kill_grace_s = SIGKILL_GRACE_S

    def __init__(self, popen: subprocess.Popen, why_cold: str | None = None):
        self.popen = popen
        self.why_cold = why_cold  # why it is not a fork of the run's warm server, when it was meant to be
        self.pid = self.pgid = popen.pid
        self.create_time = procscan.process_create_time(popen.pid)
        self.start_ticks = procscan.process_start_ticks(popen.pid)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def leftovers(self) -> bool:
        """Whether anything of its process group is still there (a leader's exit leaves workers behind)."""
        return procscan.group_alive(self.pgid)

    def what(self) -> str:
        return f"process group {self.pgid}"

    def terminate(self) -> None:
        procscan.signal_group(self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        procscan.signal_group(self.pgid, signal.SIGKILL)

    def watchdog_line(self) -> str:
        return f"pgid {self.pgid}"

    def stop_words(self, code: int) -> str:
        return describe_exit(code)

    def change_words(self) -> str:
        return self.what()

    def record(self) -> dict:
        if self.why_cold:
            return {"launcher": "local", "warm": False, "why_cold": self.why_cold}
        return {"launcher": "local"}


class WarmProcess(LocalProcess):
    """A fork of the run's warm server (warm.client.WarmStarts): a session and process group of its own,
    tied to the server, which is tied to us; its exit code comes from the server."""

    def __init__(self, starts: WarmStarts, pid: int):
        self.starts = starts
        self.pid = self.pgid = pid
        self.create_time = procscan.process_create_time(pid)
        self.start_ticks = procscan.process_start_ticks(pid)
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self._code

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self.starts.exit_code(self.pid)
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        """As Popen.wait: its exit code (reaped and reported by the server); TimeoutExpired after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.poll() or 0

    def record(self) -> dict:
        return {"launcher": "local", "warm": True}


def start_local(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    log_fd: int,
    log: Path,
    warm: WarmStarts | None = None,
    session: bool = False,
) -> LocalProcess:
    """A fork of `warm` where it can be one (see WarmStarts.start), else a fresh process (leading a session
    of its own with `session`: a fork always does), both streams to `log_fd` (a fork appends to `log`)."""
    why_cold = None
    if warm is not None:
        before = _size(log_fd)
        try:
            return WarmProcess(warm, warm.start(argv, cwd=cwd, env=env, log=str(log), folders=_path_folders(env)))
        except ColdStartNeeded as exc:
            why_cold = str(exc)
            # A fork whose answer came too late (30 s on a loaded machine) may have written to the log before
            # the warm server took it down: a client once read that fork's `ready` line and found its port closed.
            if before is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(log_fd, before)
    popen = spawn_group(
        argv, session=session, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT
    )
    return LocalProcess(popen, why_cold)


# sbatch's refusals that a later try can get past (the controller busy or restarting); any other


def _size(fd: int) -> int | None:
    """The size of the regular file open at `fd`, else None (a pipe, a terminal)."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _path_folders(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


class LocalLauncher:
    """Process groups on this machine (the default)."""

    name = "local"
    settings_class = None
    site_file = None
    remote = False

    def settings(self, data: Mapping | None) -> None:
        if data:
            raise BadInput(f"the local launcher takes no settings, got {', '.join(sorted(data))}")

    def site_settings(self) -> dict:
        return {}

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        return None

    def tracker(self, run_id: str, run_dir: Path) -> None:
        return None

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_fd: int,
        log: Path,
        settings: Mapping,
        tracker: Any,
        warm: WarmStarts | None = None,
    ) -> LocalProcess:
        return start_local(argv, cwd=cwd, env=env, log_fd=log_fd, log=log, warm=warm)

    def cleanup(self, run_id: str, job_ids: list[str]) -> tuple[list[str], list[str]]:
        return [], []  # its groups are the watchdog's `pgid` lines and procscan's

    def where(self, job: Mapping) -> str:
        return "local"

    def job_running(self, job: Mapping) -> bool:
        return False

    def view_fields(self, job: Mapping) -> dict:
        return {}


LAUNCHER = LocalLauncher()
