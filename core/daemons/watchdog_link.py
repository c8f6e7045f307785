"""The supervisor's link to its watchdog (daemons.watchdog): starting it, telling it what to end should
the supervisor die (`pgid N`, `job LAUNCHER ID`), restarting it if it dies, and `done` once the run is final.

The watchdog holds the read end of a pipe only the supervisor writes to: EOF without `done` means the
supervisor died, however it died. The write end never blocks: a wedged watchdog must not stall the run.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..base.fsutil import open_append_fd
from ..base.secrets import SECRET_NAMES
from .run_record import RunRecord
from .spawn import describe_exit, spawn_group

MAX_SPAWNS = 5  # a watchdog that keeps dying is not restarted after this many starts


class WatchdogLink:
    def __init__(self, run_id: str, record: RunRecord):
        self.run_id = run_id
        self.record = record
        self.proc: subprocess.Popen | None = None
        self._write: int | None = None
        self.spawns = 0
        self.lines: list[str] = []  # what it must end should we die, replayed to a restarted watchdog

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        read_end, write_end = os.pipe()
        env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
        folder = self.record.dir
        log = os.fdopen(open_append_fd(folder / "supervisor.log"), "ab")
        try:
            # Not tied to us (no PDEATHSIG): it must outlive our death to clean up after it.
            self.proc = spawn_group(
                [sys.executable, "-m", "hermes_rl.core.daemons.watchdog", self.run_id, str(os.getpid())],
                tied=False,
                stdin=read_end,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(folder),
                env=env,
            )
        finally:
            os.close(read_end)
            log.close()
        os.set_blocking(write_end, False)
        self._write = write_end
        self.spawns += 1
        self.record.run["watchdog"] = {"pid": self.proc.pid}
        for line in self.lines:
            self._tell(line)

    def add(self, line: str) -> None:
        """Something more to end should we die (a handle's watchdog_line)."""
        self.lines.append(line)
        self._tell(line)

    def _tell(self, line: str) -> None:
        if self._write is None:
            return
        try:
            os.write(self._write, (line + "\n").encode())
        except OSError:
            pass  # it died; check() restarts it and replays the lines

    def check(self) -> None:
        """A watchdog that died is started again (at most MAX_SPAWNS starts in all)."""
        if self.proc is None or self.proc.poll() is None:
            return
        code = self.proc.returncode
        if self._write is not None:
            os.close(self._write)
        self._write = None
        if self.spawns >= MAX_SPAWNS:
            self.record.event("watchdog", f"watchdog exited ({describe_exit(code)}); not restarting it again")
            self.proc = None
            return
        self.start()
        self.record.reserve_space()
        self.record.write_now()
        self.record.event("watchdog", f"watchdog {describe_exit(code)}; restarted it (pid {self.proc.pid})")

    def release(self) -> None:
        """The run is recorded final: the watchdog may go without cleaning up."""
        self._tell("done")
        if self._write is not None:
            os.close(self._write)
            self._write = None
