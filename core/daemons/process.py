"""One process of a run and its life: spawning an attempt (its log header, its child environment, a warm
fork or a cold start, here or on Slurm), moving a port another program took, reading how it ended (its
finish reason, or the failure line of its log) and stopping it (SIGTERM, then SIGKILL after its timeout).

The supervisor (daemons.supervisor) decides when: start order, dependencies, restart policy, the run's
end. A process here only knows its spec, its run folder and what its latest attempt left.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..base.failures import exception_line, exit_failure_line, failure_hint, failure_line
from ..base.fsutil import atomic_write_json, open_append_fd, open_regular, read_regular_text
from ..base.paths import ensure_private_dir, process_log_path
from ..base.polling import poll_until
from ..base.secrets import RUN_KEYS, SECRET_NAMES, redact
from ..base.states import ProcState
from . import launchers, procscan
from .launchers import LauncherError
from .pipeline import ProcessSpec, free_ports, process_record, rebind_files, rebind_port, specs_to_json
from .spawn import describe_exit
from .warm.base import NO_WARM_BASE
from .warm.client import WARM_START_ENV, WarmStarts

STOP_POLL_CAP_S = 0.1  # how often a stopping process is re-checked, at most (SIGCHLD wakes the loop sooner)
# Variables that differ between a run's processes and are read once a process runs, never while it imports
# (names, markers and credentials of its own, the tinker SDK's telemetry switch; PYTHONPATH is applied to
# sys.path, and a folder on it that shadows an imported module makes the process start cold): a process
# whose environment differs from the warm server's only in these may be a fork of it.
WARM_RUNTIME_ONLY_ENV = frozenset(
    {
        procscan.PROCESS_MARKER,
        "HERMES_ENV_METRICS",
        "TINKER_TELEMETRY",
        "PYTHONPATH",
        *RUN_KEYS,
        *SECRET_NAMES,
    }
)


class StartFailed(Exception):
    """An attempt could not even be spawned; the message says why in words (also in the process log).
    `retry` is False where another attempt cannot help or could start the process twice (a refusal
    sbatch gives every time, a Slurm submission whose outcome is unknown)."""

    def __init__(self, message: str, *, retry: bool = True):
        super().__init__(message)
        self.retry = retry


class Proc:
    """One process of the run: its spec, its state, and what its latest attempt is and left."""

    def __init__(self, spec: ProcessSpec, run_id: str, run_dir: Path, port: int | None):
        self.spec = spec
        self.name = spec.name
        self.run_id = run_id
        self.run_dir = run_dir
        self.log = process_log_path(spec.name, run_id)
        self.port = port
        self.state = ProcState.PENDING
        self.handle: launchers.Handle | None = None  # the latest attempt
        self.exit_handled = False  # its exit has been handled for the latest attempt
        self.pid: int | None = None
        self.create_time: float | None = None
        self.start_ticks: int | None = None
        self.pgid: int | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.ended_at: float | None = None
        self.exit_code: int | None = None
        self.restarts = 0  # every restart (policy or requested)
        self.policy_restarts = 0  # those the restart policy made (bounded by max_restarts)
        self.restart_at: float | None = None  # monotonic time of a scheduled restart
        self.restarting = False  # being stopped on request, to be started again
        self.attempt = 0
        self.ever_started = False
        self.log_offset = 0
        self.readiness_cancel: threading.Event | None = None
        self.one_shot = False  # some process waits for it to complete
        self.last_failure: str | None = None  # the exception line of the previous failed attempt
        # it ended cleanly once while the process it feeds still waited for input (restarted once for that)
        self.ended_too_soon = False
        self.readiness_log: tuple[Path, int] = (self.log, 0)  # the log a `log` check reads, from this offset

    @property
    def alive(self) -> bool:
        # Not the handle's returncode: one squeue answer may end several jobs at once, and each end
        # must still be handled.
        return self.handle is not None and not self.exit_handled

    def remains(self) -> bool:
        """Whether anything of its latest attempt is left: the process, its group, or its Slurm job."""
        return self.handle is not None and (self.handle.returncode is None or self.handle.leftovers())

    @property
    def wants_warm(self) -> bool:
        return bool(self.spec.warm) and not launchers.get(self.spec.launcher).remote

    def to_json(self) -> dict:
        return process_record(
            self.spec,
            log=str(self.log),
            port=self.port,
            pid=self.pid,
            create_time=self.create_time,
            start_ticks=self.start_ticks,
            pgid=self.pgid,
            state=self.state,
            started_at=self.started_at,
            ready_at=self.ready_at,
            ended_at=self.ended_at,
            exit_code=self.exit_code,
            restarts=self.restarts,
            **(self.handle.record() if self.handle is not None else {}),
        )

    # ------------------------------------------------------------ starting

    def child_env(self, run_keys: dict[str, str]) -> dict[str, str]:
        """Our environment less our secrets and markers, plus the secrets its spec names, its spec's
        variables and the run's markers (how procscan finds it and everything it starts)."""
        hidden = (*SECRET_NAMES, *RUN_KEYS, procscan.SUPERVISOR_MARKER)
        env = {k: v for k, v in os.environ.items() if k not in hidden}
        env.setdefault("PYTHONUNBUFFERED", "1")
        for name in self.spec.secret_env:
            value = run_keys[name] if name in RUN_KEYS else os.environ.get(name)
            if value:
                env[name] = value
        env.update(self.spec.env)
        env[procscan.MARKER] = str(self.run_dir)
        env[procscan.PROCESS_MARKER] = self.name
        env["HERMES_RL_RUN_ID"] = self.run_id
        return env

    def spawn(self, *, run_keys: dict[str, str], trackers: dict, warm: WarmStarts | None):
        """`trackers`: the run's tracker of each launcher that has one (by name)."""
        """Start its next attempt (a header line in its log first); the handle, or StartFailed."""
        self.restart_at = None
        self.attempt += 1
        spec = self.spec
        ensure_private_dir(self.log.parent)
        argv = " ".join(redact(a) for a in spec.argv)
        header = (
            f"==== hermes-rl {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: starting "
            f"{self.name} (run {self.run_id}, attempt {self.attempt}): {argv}\n"
        )
        fd = open_append_fd(self.log)
        try:
            os.write(fd, header.encode("utf-8", errors="replace"))
            self.log_offset = os.fstat(fd).st_size
            cwd = spec.cwd or str(self.run_dir)
            try:
                handle = launchers.get(spec.launcher).start(
                    self.name,
                    spec.argv,
                    cwd=cwd,
                    env=self.child_env(run_keys),
                    log_fd=fd,
                    log=self.log,
                    settings=spec.settings,
                    tracker=trackers.get(spec.launcher),
                    warm=warm if self.wants_warm else None,
                )
            except (OSError, LauncherError) as exc:
                reason = self.describe_start_error(exc, cwd)
                os.write(fd, f"==== {reason}\n".encode("utf-8", errors="replace"))  # `logs` shows it too
                self.ended_at = time.time()
                self.exit_code = None
                raise StartFailed(reason, retry=getattr(exc, "retry", True)) from None
        finally:
            os.close(fd)
        self.handle = handle
        self.exit_handled = False
        self.pid, self.pgid = handle.pid, handle.pgid
        self.create_time, self.start_ticks = handle.create_time, handle.start_ticks
        self.started_at = time.time()
        self.ready_at = self.ended_at = self.exit_code = None
        self.ever_started = True
        return handle

    def describe_start_error(self, exc: OSError | LauncherError, cwd: str) -> str:
        exe = self.spec.argv[0]
        if isinstance(exc, LauncherError):
            return f"cannot start {self.name} on {self.spec.launcher}: {exc}"
        if isinstance(exc, FileNotFoundError):
            if exc.filename and str(exc.filename) == cwd:
                return f"cannot start {self.name}: working folder {cwd} does not exist"
            return f"cannot start {self.name}: executable {exe!r} not found"
        if isinstance(exc, PermissionError):
            return f"cannot start {self.name}: {exe!r} is not executable (permission denied)"
        return f"cannot start {self.name}: {exc.strerror or exc}"

    # ------------------------------------------------------------ ending

    def ended(self, code: int) -> None:
        """Its latest attempt exited with `code`: what its leader left in its group (workers, shells)
        goes with it."""
        self.exit_handled = True
        self.exit_code = code
        self.ended_at = time.time()
        if self.handle is not None:
            self.handle.terminate()

    def exit_outcome(self) -> tuple[str, str]:
        """How a clean or failed exit reads, once not stopped by us: ("run_done" | "done" | "failed", words).
        run_done: it completes the run; done: it finished its part; failed: the words start the reason."""
        spec, code = self.spec, self.exit_code
        if code == 0 and spec.completes_run:
            if spec.completion_file and not self.completion_path().exists():
                return "failed", f"{self.name} exited 0 before finishing (no {Path(spec.completion_file).name})"
            return "run_done", f"{self.name} finished"
        if code == 0 and self.one_shot:
            return "done", f"{self.name} completed"
        if code == 0 and spec.done_on_clean_exit and self.ready_at is not None:
            return "done", f"{self.name} finished its work"
        return "failed", f"{self.name} {describe_exit(code)}"

    def finish_reason(self) -> str:
        """`NAME finished`, or the process's own words for how it finished (its completion file's
        `finish_reason`, e.g. the trainer stopping early on an eval plateau)."""
        if self.spec.completion_file:
            try:
                said = json.loads(read_regular_text(self.completion_path(), 1 << 20)).get("finish_reason")
            except (OSError, ValueError, AttributeError):
                said = None
            if isinstance(said, str) and said.strip():
                return f"{self.name} {said.strip()[:300]}"
        return f"{self.name} finished"

    def completion_path(self) -> Path:
        assert self.spec.completion_file is not None  # asked only of a process that names one
        path = Path(self.spec.completion_file)
        return path if path.is_absolute() else self.run_dir / path

    def attempt_output(self, limit: int = 65536) -> str:
        """The end of this attempt's part of the process log."""
        try:
            with open_regular(self.log) as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(self.log_offset, size - limit))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 3, worded: bool = False) -> str:
        """The last `lines` non-empty lines of its latest attempt's log (with `worded`, lines holding a letter or
        digit: not the brackets that close a printed structure), joined by ` | `, keys redacted."""
        try:
            with open_regular(self.log) as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(self.log_offset, size - 4096))
                data = handle.read()
        except OSError:
            return ""
        text = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
        if worded:
            text = [ln for ln in text if any(c.isalnum() for c in ln)]
        return redact(" | ".join(text[-lines:]))[:500]

    def failure(self, reason: str) -> tuple[str, str | None]:
        """`reason` with the line its log says it failed on (and a hint), and that line."""
        output = self.attempt_output()
        # A process a signal ended was not ended by what it logged last: only a traceback counts then.
        code = self.exit_code or 0
        # A non-zero exit says its failure last, as an exception, an error log line or plain words.
        line = (exit_failure_line if code > 0 else failure_line)(output) if code >= 0 else exception_line(output)
        if line:
            hint = failure_hint(line)
            reason = f"{reason}: {redact(line)}" + (f" ({hint})" if hint else "")
        return reason, line

    def last_words(self) -> str:
        """How its latest attempt ended, in its own words: the exit, then the line its log says it failed on
        (an exception or a logged error) with its hint, else its last log lines."""
        words, line = self.failure(f"{self.name} {describe_exit(self.exit_code)}")
        if line is None and (tail := self.log_tail(worded=True)):
            words += f", its last lines: {tail}"
        elif line is None:
            words += ", its log is empty"
        n = self.policy_restarts
        return words + (f" (after {n} restart{'s' if n != 1 else ''})" if n else "")

    # ------------------------------------------------------------ stopping

    def stop(
        self,
        *,
        urged: Callable[[], bool],
        reap: Callable[[], None],
        sleep: Callable[[float], None],
        event: Callable[..., None],
    ) -> None:
        """SIGTERM its latest attempt, SIGKILL once its stop timeout is out (at once when `urged`). `reap`
        handles the exits of any process meanwhile; `sleep` waits on the supervisor's loop."""
        handle = self.handle
        if handle is None:  # never started: nothing to stop
            return
        timeout = 0.0 if urged() else self.spec.stop_timeout
        if self.alive:
            event(
                "signal",
                f"stopping {self.name}: SIGTERM to {handle.what()}",
                process=self.name,
                signal="SIGTERM",
            )
        handle.terminate()
        began = time.monotonic()

        def gone() -> bool:
            reap()
            return not self.remains()

        def gone_or_urged() -> str | None:
            if gone():
                return "ended"
            return "urged" if urged() else None  # a second stop request: no more waiting

        if poll_until(gone_or_urged, timeout, cap=STOP_POLL_CAP_S, sleep=sleep) == "ended":
            return
        waited = time.monotonic() - began
        event(
            "signal",
            f"{self.name} still running after {waited:.1f}s: SIGKILL to {handle.what()}",
            process=self.name,
            signal="SIGKILL",
        )
        handle.kill()
        if not poll_until(gone, handle.kill_grace_s, cap=STOP_POLL_CAP_S, sleep=sleep):
            event("error", f"{self.name}: {handle.what()} survived SIGKILL", process=self.name)


def move_port(proc: Proc, procs: dict[str, Proc], run: dict) -> str:
    """Another program took the port picked at launch: serve a free one, and tell every process (its
    spec's addresses, the run-folder files an argv names: config.yaml). Those already running keep the
    old address, so only a port no running process uses yet is moved cleanly. Returns the event's words."""
    old, name = proc.port, proc.spec.port
    assert old is not None and name is not None  # only a process serving a port has it taken
    proc.port = free_ports([name])[name]
    for other in procs.values():
        other.spec = rebind_port(other.spec, old, proc.port, own=other is proc)
    files = rebind_files(proc.run_dir, [a for p in procs.values() for a in p.spec.argv], old, proc.port)
    run.setdefault("ports", {})[name] = proc.port
    atomic_write_json(proc.run_dir / "pipeline.json", specs_to_json([p.spec for p in procs.values()]))
    told = ", ".join(Path(f).name for f in files)
    return f"port {old} of {proc.name} was taken by another program: moved to {proc.port}" + (
        f" (also in {told})" if told else ""
    )


def start_run_warm(procs: dict[str, Proc], run_keys: dict[str, str], on_change) -> tuple[WarmStarts | None, str]:
    """One warm server for the run, importing what its processes' start-ups import (their specs' `warm`
    lists), started at once so that it is ready by the time they may start (HERMES_RL_WARM_START=0: off).
    Returns it (None: no process wants one) and the words of the run's `warm` event."""
    wanting = [p for p in procs.values() if p.wants_warm]
    if not wanting or os.environ.get(WARM_START_ENV, "1") == "0":
        return None, ""
    preload = list(dict.fromkeys(m for p in wanting for m in p.spec.warm))
    base = wanting[0].child_env(run_keys)
    env = {k: v for k, v in base.items() if k not in WARM_RUNTIME_ONLY_ENV}
    warm = WarmStarts(preload, env, WARM_RUNTIME_ONLY_ENV, on_change=on_change)
    if warm.borrowed:
        return warm, f"warm server forked from the warm base (pid {warm.pid}): {', '.join(preload)}"
    why = "" if warm.not_borrowed == NO_WARM_BASE else f" (not from the warm base: {warm.not_borrowed})"
    return warm, f"warm server started (pid {warm.pid}) importing {', '.join(preload)}{why}"
