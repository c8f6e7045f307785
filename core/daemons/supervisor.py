"""The per-run supervisor: `python -m hermes_rl.core.daemons.supervisor RUN_ID`.

Started detached by core.runs.launch. It executes the run's pipeline.json (DESIGN §5) without
knowing what the processes are: starts them in dependency order gated by readiness probes, watches
them, restarts them by policy, and stops them in reverse order. Every transition goes to run.json
(atomically) and events.jsonl; clients only read those files and signal this process.

No orphans, in three layers:
- each child runs in its own process group with PR_SET_PDEATHSIG=SIGKILL (dies with us);
- a watchdog process (daemons.watchdog) holds the read end of a pipe only we can write to: if we die
  (even by SIGKILL) it sees EOF, ends every recorded process group and every process carrying the
  run's environment marker (grandchildren that left their group too), and records the run as failed;
- on a normal stop we sweep the same marker ourselves.

Single-threaded state machine; readiness probes run in small threads that only post results.
SIGTERM/SIGINT mean "stop by user"; a second one (a second or more later) or SIGUSR2 escalates to
SIGKILL at once. SIGUSR1: read client requests in <run>/control/ (restart one process).
Kept light: no third-party imports but psutil (create_time) and python-dotenv (reading .env), nothing heavy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from ..base.failures import exception_line, failure_hint, failure_line, repeats_on_restart
from ..base.fsutil import append_jsonl, atomic_write_json, open_append_fd, open_regular, read_json
from ..base.paths import ensure_private_dir, process_log_path, validate_run_id
from ..base.paths import run_dir as run_dir_of
from ..base.polling import poll_until
from ..base.secrets import LOCAL_TINKER_KEY_ENV, SECRET_NAMES, redact
from ..base.states import PROC_ALIVE, PROC_NOT_ENDED, RECORDED_FINAL, ProcState, RunStatus
from . import procscan
from .alerts import AlertMonitor
from .health_monitor import HealthMonitor
from .launchers import LauncherError, SlurmTracker, start_process
from .pipeline import (
    ProcessSpec,
    free_ports,
    load_pipeline,
    port_is_free,
    process_record,
    rebind_files,
    rebind_port,
    restart_delay,
    specs_to_json,
    start_order,
)
from .probes import LogMatcher, http_ready
from .runstate import record_final
from .spawn import describe_exit, spawn_group, start_sweep_queue
from .warm.base import NO_WARM_BASE
from .warm.client import WARM_START_ENV, WarmStarts

PROBE_FAST_CAP_S = 0.05  # probe interval cap during the first PROBE_FAST_WINDOW_S of a start
PROBE_FAST_WINDOW_S = 10.0
PROBE_SLOW_CAP_S = 0.25
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
        LOCAL_TINKER_KEY_ENV,
        *SECRET_NAMES,
    }
)
STOP_POLL_CAP_S = 0.1  # how often a stopping process is re-checked, at most (SIGCHLD wakes us sooner)
SIGKILL_GRACE_S = 5.0  # how long a process group gets to vanish after SIGKILL before we report it
SLURM_KILL_GRACE_S = 30.0  # how long a cancelled Slurm job gets to leave squeue (slurmd ends it, then reports)
SPACE_RESERVE = ".space-reserve"  # bytes held back in the run folder to record its end on a full disk
SPACE_RESERVE_BYTES = 256 * 1024

STATE_CHECK_S = 1.0  # how often the loop checks that run.json is still the one it wrote
RECORD_RETRY_S = 1.0  # a final record the disk refused is tried again this often...
RECORD_WAIT_S = 24 * 3600.0  # ...for at most this long


def _sig(st: os.stat_result) -> tuple:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _now() -> float:
    return time.time()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(f"{stamp} {redact(message)}", flush=True)


# ---------------------------------------------------------------- process records


class Proc:
    def __init__(self, spec: ProcessSpec, run_id: str, port: int | None):
        self.spec = spec
        self.name = spec.name
        self.log = process_log_path(spec.name, run_id)
        self.port = port
        self.state = ProcState.PENDING
        self.handle = None  # launchers.LocalProcess | launchers.SlurmJob of the latest attempt
        self.exit_handled = False  # on_exit has run for the latest attempt
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
        self.probe_cancel: threading.Event | None = None
        self.one_shot = False  # some process waits for it to complete
        self.last_failure: str | None = None  # the exception line of the previous failed attempt
        self.probe_log: tuple[Path, int] = (self.log, 0)  # the log a `log` probe reads, from this offset

    @property
    def alive(self) -> bool:
        # Not the handle's returncode: one squeue answer may end several jobs at once, and each end
        # must still go through on_exit.
        return self.handle is not None and not self.exit_handled

    def remains(self) -> bool:
        """Whether anything of its latest attempt is left: the process, its group, or its Slurm job."""
        return self.handle is not None and (self.handle.returncode is None or self.handle.leftovers())

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


class StartupError(Exception):
    pass


# ---------------------------------------------------------------- the supervisor


class Supervisor:
    def __init__(self, run_id: str):
        self.run_id = validate_run_id(run_id)
        self.dir = run_dir_of(run_id)
        self.run_json = self.dir / "run.json"
        self.events_path = self.dir / "events.jsonl"
        try:
            self.run = read_json(self.run_json)
            specs = load_pipeline(self.dir / "pipeline.json")
        except FileNotFoundError as exc:
            raise StartupError(f"run {run_id} is not prepared: {exc.filename} is missing") from None
        except Exception as exc:  # noqa: BLE001 - any unreadable state ends here with a clear line
            raise StartupError(f"run {run_id}: cannot read its state: {exc}") from None
        if self.run.get("status") != RunStatus.STARTING or self.run.get("supervisor"):
            raise StartupError(f"run {run_id} already has a supervisor (status {self.run.get('status')})")
        ports = self.run.get("ports") or {}
        self.order = start_order(specs)
        self.procs = {s.name: Proc(s, run_id, ports.get(s.port) if s.port else None) for s in specs}
        for spec in specs:
            for dep, condition in spec.depends_on:
                if condition == "completed":
                    self.procs[dep].one_shot = True
        # The local Tinker server's credential for this run: in memory and in the environment of the
        # processes that name it in secret_env, nowhere else (no argv, log or state file).
        self.local_tinker_key = "tml-local-" + secrets.token_urlsafe(24)
        self.stop_requests = 0  # 1: stop in order; 2: stop now (SIGKILL without waiting)
        self.first_stop_at = 0.0
        self.requests_pending = True  # look at control/ once at start: a request may predate us
        self.stopping = False
        self.finished = False
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.watchdog: subprocess.Popen | None = None
        self.watchdog_w: int | None = None
        self.watchdog_spawns = 0
        self.pgids: list[int] = []  # every local process group started, for the sweep
        self.watchdog_lines: list[str] = []  # what the watchdog must end should we die: `pgid N`, `slurm_job N`
        self.slurm = SlurmTracker(self.run_id, self.dir)
        self.slurm.on_change = self._slurm_changed
        self.dirty = False
        self.written: tuple | None = None  # (inode, mtime, size) of the run.json we wrote last
        self.next_state_check = 0.0
        self.warm: WarmStarts | None = None  # the run's warm server (start_warm), once started
        self.health = HealthMonitor(self.dir, self.procs)
        self.alerts = AlertMonitor(self.dir, self.run, lambda: [p.to_json() for p in self.procs.values()])

    # ------------------------------------------------------------ state output

    def write_state(self) -> None:
        """Mark run.json stale; it is written (fsync'd) once per loop turn, before the loop sleeps, so a
        burst of transitions (ready -> start the dependant) costs one write, not one each."""
        self.dirty = True

    def flush_state(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        self.run["processes"] = [self.procs[s].to_json() for s in self.procs]
        # the signature of what we wrote, not a stat after the rename: a file deleted in between would
        # leave no signature and check_run_json would never write it again
        self.written = _sig(atomic_write_json(self.run_json, self.run))

    def _file_sig(self) -> tuple | None:
        try:
            return _sig(os.stat(self.run_json))
        except OSError:
            return None

    def check_run_json(self) -> None:
        """While we live we are run.json's only writer (the watchdog and clients write it only once we are
        gone), so a run.json that is missing or not the file we wrote was deleted or damaged behind our
        back: write it again from memory now, not at the next transition, which may be hours away."""
        now = time.monotonic()
        if now < self.next_state_check or self.written is None:
            return
        self.next_state_check = now + STATE_CHECK_S
        found = self._file_sig()
        if found == self.written:
            return
        self.dirty = True
        self.flush_state()
        what = "deleted" if found is None else "changed by another program"
        self.event("state", f"run.json was {what}; written again from the supervisor's state")

    def event(self, event: str, message: str, **fields) -> None:
        record = {"time": _now(), "event": event, **fields, "message": redact(message)}
        append_jsonl(self.events_path, record)
        _log(message)

    def set_status(self, status: RunStatus, reason: str | None = None) -> None:
        if status in RECORDED_FINAL:
            self.record_final(status, reason or "")
            return
        self.run["status"] = status
        if reason is not None:
            self.run["reason"] = reason
        if status == RunStatus.RUNNING and not self.run.get("started_at"):
            self.run["started_at"] = _now()
        self.write_state()
        self.flush_state()  # run status changes are written at once
        text = f"run {status}" + (f": {reason}" if reason else "")
        self.event("run_status", text, status=status, reason=reason)

    def reserve_space(self) -> None:
        """Hold some disk space in the run folder, freed to record the run's end on a full disk."""
        with contextlib.suppress(OSError):
            with open(self.dir / SPACE_RESERVE, "wb") as handle:
                handle.write(b"\0" * SPACE_RESERVE_BYTES)

    def record_final(self, status: RunStatus, reason: str) -> None:
        """The run's end, through runstate.record_final (run.json and the run_status event), and our log."""
        with contextlib.suppress(OSError):
            (self.dir / SPACE_RESERVE).unlink()  # its space is what the final record is written with
        self.run["processes"] = [self.procs[s].to_json() for s in self.procs]
        self.dirty = False
        text = redact(f"run {status}: {reason}")
        record_final(self.dir, self.run, status, reason, message=text)
        _log(text)
        self.alerts.on_final(status, reason)

    def _slurm_changed(self, job) -> None:
        """squeue reported a new state or node for one of our jobs: run.json shows it."""
        proc = next((p for p in self.procs.values() if p.handle is job), None)
        if proc is None:
            return
        self.write_state()
        where = f" on {job.node}" if job.node else ""
        why = f" ({job.reason})" if job.reason and job.state == "PENDING" else ""
        self.event(
            "slurm",
            f"{proc.name}: Slurm job {job.job_id} {job.state}{where}{why}",
            process=proc.name,
            **job.record(),
        )

    def set_proc_state(self, proc: Proc, state: ProcState, message: str, **fields) -> None:
        proc.state = state
        self.write_state()
        self.event("process_state", message, process=proc.name, state=state, pid=proc.pid, **fields)

    # ------------------------------------------------------------ waking up

    def _on_signal(self, signum, _frame) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            # Two clients stopping the same run at the same moment is one stop; a repeat at least
            # a second later means "stop now" (SIGKILL instead of waiting out stop timeouts).
            now = time.monotonic()
            if not self.stop_requests:
                self.stop_requests, self.first_stop_at = 1, now
            elif now - self.first_stop_at >= 1.0:
                self.stop_requests = 2
        elif signum == signal.SIGUSR2:  # stop now, whatever came before
            self.stop_requests = 2
        elif signum == signal.SIGUSR1:
            self.requests_pending = True
        # SIGCHLD/SIGHUP only wake the loop (through the wakeup fd).

    def post(self, item: tuple) -> None:
        """From probe threads: hand a result to the main loop and wake it."""
        self.results.put(item)
        try:
            os.write(self.wake_w, b"p")
        except (BlockingIOError, OSError):
            pass

    def wait(self, timeout: float) -> None:
        self.flush_state()
        if timeout > 0:
            self.selector.select(max(0.0, timeout))
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # ------------------------------------------------------------ watchdog

    def start_watchdog(self) -> None:
        read_end, write_end = os.pipe()
        env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
        log = os.fdopen(open_append_fd(self.dir / "supervisor.log"), "ab")
        try:
            # Not tied to us (no PDEATHSIG): it must outlive our death to clean up after it.
            self.watchdog = spawn_group(
                [sys.executable, "-m", "hermes_rl.core.daemons.watchdog", self.run_id, str(os.getpid())],
                tied=False,
                stdin=read_end,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.dir),
                env=env,
            )
        finally:
            os.close(read_end)
            log.close()
        os.set_blocking(write_end, False)  # a wedged watchdog must never block the supervisor
        self.watchdog_w = write_end
        self.watchdog_spawns += 1
        self.run["watchdog"] = {"pid": self.watchdog.pid}
        for line in self.watchdog_lines:
            self.tell_watchdog(line)

    def tell_watchdog(self, line: str) -> None:
        if self.watchdog_w is None:
            return
        try:
            os.write(self.watchdog_w, (line + "\n").encode())
        except OSError:
            pass  # it died; check_watchdog restarts it and replays the groups

    def check_watchdog(self) -> None:
        if self.watchdog is None or self.watchdog.poll() is None or self.finished:
            return
        code = self.watchdog.returncode
        os.close(self.watchdog_w)
        self.watchdog_w = None
        if self.watchdog_spawns >= 5:
            self.event("watchdog", f"watchdog exited ({describe_exit(code)}); not restarting it again")
            self.watchdog = None
            return
        self.start_watchdog()
        self.reserve_space()
        self.write_state()
        self.flush_state()
        self.event("watchdog", f"watchdog {describe_exit(code)}; restarted it (pid {self.watchdog.pid})")

    def release_watchdog(self) -> None:
        self.tell_watchdog("done")
        if self.watchdog_w is not None:
            os.close(self.watchdog_w)
            self.watchdog_w = None

    # ------------------------------------------------------------ starting

    def child_env(self, proc: Proc) -> dict[str, str]:
        hidden = (*SECRET_NAMES, LOCAL_TINKER_KEY_ENV, procscan.SUPERVISOR_MARKER)
        env = {k: v for k, v in os.environ.items() if k not in hidden}
        env.setdefault("PYTHONUNBUFFERED", "1")
        for name in proc.spec.secret_env:
            value = self.local_tinker_key if name == LOCAL_TINKER_KEY_ENV else os.environ.get(name)
            if value:
                env[name] = value
        env.update(proc.spec.env)
        env[procscan.MARKER] = str(self.dir)
        env[procscan.PROCESS_MARKER] = proc.name
        env["HERMES_RL_RUN_ID"] = self.run_id
        return env

    # ------------------------------------------------------------ warm starts

    def wants_warm(self, proc: Proc) -> bool:
        return bool(proc.spec.warm) and proc.spec.launcher == "local"

    def start_warm(self) -> None:
        """One warm server for the run, importing what its processes' start-ups import (their specs' `warm`
        lists), started now so that it is ready by the time they may start (HERMES_RL_WARM_START=0: off)."""
        wanting = [p for p in self.procs.values() if self.wants_warm(p)]
        if not wanting or os.environ.get(WARM_START_ENV, "1") == "0":
            return
        preload = list(dict.fromkeys(m for p in wanting for m in p.spec.warm))
        base = self.child_env(wanting[0])
        env = {k: v for k, v in base.items() if k not in WARM_RUNTIME_ONLY_ENV}
        self.warm = WarmStarts(preload, env, WARM_RUNTIME_ONLY_ENV, on_change=self._wake)
        if self.warm.borrowed:
            self.event("warm", f"warm server forked from the warm base (pid {self.warm.pid}): {', '.join(preload)}")
        else:
            why = (
                "" if self.warm.not_borrowed == NO_WARM_BASE else f" (not from the warm base: {self.warm.not_borrowed})"
            )
            self.event("warm", f"warm server started (pid {self.warm.pid}) importing {', '.join(preload)}{why}")

    def warm_pending(self, proc: Proc) -> bool:
        """Whether `proc` waits for the warm server to finish its imports (then forks it)."""
        return self.warm is not None and self.wants_warm(proc) and self.warm.state == "starting"

    def close_warm(self) -> None:
        warm, self.warm = self.warm, None
        if warm is not None:
            warm.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"w")

    def spawn(self, proc: Proc) -> None:
        proc.restart_at = None
        proc.attempt += 1
        if proc.port and not port_is_free(proc.port):
            self.move_port(proc)
        spec = proc.spec
        ensure_private_dir(proc.log.parent)
        argv = " ".join(redact(a) for a in spec.argv)
        header = (
            f"==== hermes-rl {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: starting "
            f"{proc.name} (run {self.run_id}, attempt {proc.attempt}): {argv}\n"
        )
        fd = open_append_fd(proc.log)
        try:
            os.write(fd, header.encode("utf-8", errors="replace"))
            proc.log_offset = os.fstat(fd).st_size
            cwd = spec.cwd or str(self.dir)
            try:
                handle = start_process(
                    spec.launcher,
                    proc.name,
                    spec.argv,
                    cwd=cwd,
                    env=self.child_env(proc),
                    log_fd=fd,
                    log=proc.log,
                    slurm=self.slurm,
                    settings=spec.slurm,
                    warm=self.warm if self.wants_warm(proc) else None,
                )
            except (OSError, LauncherError) as exc:
                reason = self.describe_start_error(proc, exc, cwd)
                os.write(fd, f"==== {reason}\n".encode("utf-8", errors="replace"))  # `logs` shows it too
                self.start_failed(proc, reason)
                return
        finally:
            os.close(fd)
        proc.handle = handle
        proc.exit_handled = False
        proc.pid, proc.pgid = handle.pid, handle.pgid
        proc.create_time, proc.start_ticks = handle.create_time, handle.start_ticks
        if handle.pgid is not None:
            self.pgids.append(handle.pgid)
        self.watchdog_lines.append(handle.watchdog_line())
        self.tell_watchdog(handle.watchdog_line())
        proc.started_at = _now()
        proc.ready_at = proc.ended_at = proc.exit_code = None
        proc.ever_started = True
        again = f" (restart {proc.restarts})" if proc.restarts else ""
        self.set_proc_state(
            proc,
            ProcState.STARTING,
            f"{proc.name} started{again}, " + (f"pid {handle.pid}" if handle.pid else handle.what()),
            attempt=proc.attempt,
            **handle.record(),
        )
        if spec.readiness.kind != "none":
            self.start_probe(proc)
        elif not proc.one_shot:
            self.mark_ready(proc)
        # A one-shot step (others wait for it to complete) stays "starting" until it exits.

    def move_port(self, proc: Proc) -> None:
        """Another program took the port picked at launch: serve a free one, and tell every process (its
        spec's addresses, the run-folder files an argv names: config.yaml). Those already running keep
        the old address, so only a port no running process uses yet is moved cleanly."""
        old, name = proc.port, proc.spec.port
        proc.port = free_ports([name])[name]
        for other in self.procs.values():
            other.spec = rebind_port(other.spec, old, proc.port, own=other is proc)
        files = rebind_files(self.dir, [a for p in self.procs.values() for a in p.spec.argv], old, proc.port)
        self.run.setdefault("ports", {})[name] = proc.port
        atomic_write_json(self.dir / "pipeline.json", specs_to_json([p.spec for p in self.procs.values()]))
        told = ", ".join(Path(f).name for f in files)
        self.event(
            "port",
            f"port {old} of {proc.name} was taken by another program: moved to {proc.port}"
            + (f" (also in {told})" if told else ""),
            process=proc.name,
            old=old,
            new=proc.port,
        )

    @staticmethod
    def describe_start_error(proc: Proc, exc: OSError | LauncherError, cwd: str) -> str:
        exe = proc.spec.argv[0]
        if isinstance(exc, LauncherError):
            return f"cannot start {proc.name} on Slurm: {exc}"
        if isinstance(exc, FileNotFoundError):
            if exc.filename and str(exc.filename) == cwd:
                return f"cannot start {proc.name}: working folder {cwd} does not exist"
            return f"cannot start {proc.name}: executable {exe!r} not found"
        if isinstance(exc, PermissionError):
            return f"cannot start {proc.name}: {exe!r} is not executable (permission denied)"
        return f"cannot start {proc.name}: {exc.strerror or exc}"

    def start_failed(self, proc: Proc, reason: str) -> None:
        """A process could not even be spawned: like a failing exit, with the reason in words."""
        proc.ended_at = _now()
        proc.exit_code = None
        if self.schedule_restart(proc, reason):
            return
        self.set_proc_state(proc, ProcState.FAILED, reason)
        if proc.spec.required or proc.one_shot:
            self.shutdown(RunStatus.FAILED, reason)

    def mark_ready(self, proc: Proc) -> None:
        proc.ready_at = _now()
        self.set_proc_state(proc, ProcState.READY, f"{proc.name} is ready", ready_at=proc.ready_at)

    def start_probe(self, proc: Proc) -> None:
        source = self.procs.get(proc.spec.readiness.source or proc.name, proc)
        # Another process's log (run-api's, for an environment registering with it) is read from now on.
        proc.probe_log = (source.log, proc.log_offset if source is proc else _size(source.log))
        if proc.spec.readiness.kind == "http":
            import http.client  # noqa: F401 - imported here, in the main thread, not inside a probe thread
        cancel = threading.Event()
        proc.probe_cancel = cancel
        thread = threading.Thread(
            target=self.probe_loop, args=(proc, proc.attempt, cancel), name=f"probe-{proc.name}", daemon=True
        )
        thread.start()

    def probe_loop(self, proc: Proc, attempt: int, cancel: threading.Event) -> None:
        readiness = proc.spec.readiness
        began = time.monotonic()
        deadline = began + readiness.timeout_s
        matcher = LogMatcher(*proc.probe_log, readiness.pattern) if readiness.kind == "log" else None
        interval = 0.01
        last = "no answer yet"
        try:
            while not cancel.is_set():
                remaining = deadline - time.monotonic()
                if readiness.kind == "http":
                    ok, last = http_ready(readiness.url, timeout=max(0.05, min(1.0, remaining)))
                else:
                    ok, last = matcher.check()
                if cancel.is_set():
                    return
                if ok:
                    self.post(("ready", proc.name, attempt, None))
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.post(("timeout", proc.name, attempt, last))
                    return
                cancel.wait(min(interval, remaining))
                # Quick polls while a fast start is likely, gentler ones for a long model load.
                cap = PROBE_FAST_CAP_S if time.monotonic() - began < PROBE_FAST_WINDOW_S else PROBE_SLOW_CAP_S
                interval = min(interval * 1.5, cap)
        except Exception as exc:  # noqa: BLE001 - a probe bug must surface as a reason, not a silent hang
            self.post(("timeout", proc.name, attempt, f"probe error: {exc}"))
        finally:
            if matcher:
                matcher.close()

    def cancel_probe(self, proc: Proc) -> None:
        if proc.probe_cancel is not None:
            proc.probe_cancel.set()
            proc.probe_cancel = None

    def handle_probe_results(self) -> None:
        while True:
            try:
                kind, name, attempt, detail = self.results.get_nowait()
            except queue.Empty:
                return
            proc = self.procs[name]
            if attempt != proc.attempt or proc.state != ProcState.STARTING or not proc.alive or self.stopping:
                continue  # stale: the process exited or restarted since
            proc.probe_cancel = None
            if kind == "ready":
                self.mark_ready(proc)
            else:
                what = (
                    f"GET {proc.spec.readiness.url} did not return 200"
                    if proc.spec.readiness.kind == "http"
                    else f"no log line matched /{proc.spec.readiness.pattern}/"
                )
                reason = f"{proc.name} was not ready within {proc.spec.readiness.timeout_s:g}s ({what}; last: {detail})"
                self.event("probe_timeout", reason, process=proc.name)
                if proc.spec.required or self.has_dependants(proc):
                    self.shutdown(RunStatus.FAILED, reason)

    def has_dependants(self, proc: Proc) -> bool:
        return any(dep == proc.name for p in self.procs.values() for dep, _ in p.spec.depends_on)

    # ------------------------------------------------------------ scheduling

    def dependency_status(self, proc: Proc) -> tuple[bool, str | None]:
        """(all satisfied, why it never can be) for a pending process."""
        for dep_name, condition in proc.spec.depends_on:
            dep = self.procs[dep_name]
            done_ok = dep.state == ProcState.EXITED and dep.exit_code == 0
            if condition == "started":
                ok = dep.state in PROC_ALIVE or done_ok
            elif condition == "ready":
                ok = dep.state == ProcState.READY or (done_ok and dep.one_shot)
            else:
                ok = done_ok
            if ok:
                continue
            if dep.state in (ProcState.FAILED, ProcState.STOPPED) or (dep.state == ProcState.EXITED and not ok):
                return False, f"cannot start {proc.name}: {dep.name} {dep.state} before it was {condition}"
            return False, None
        return True, None

    def start_eligible(self) -> None:
        if self.stopping:
            return
        now = time.monotonic()
        for name in self.order:
            proc = self.procs[name]
            if proc.state != ProcState.PENDING:
                continue
            if proc.restart_at is not None:
                if now >= proc.restart_at and not self.warm_pending(proc):
                    self.spawn(proc)
                continue
            ok, never = self.dependency_status(proc)
            if ok and self.warm_pending(proc):
                continue
            if ok:
                self.spawn(proc)
            elif never:
                self.set_proc_state(proc, ProcState.FAILED, never)
                if proc.spec.required or proc.one_shot:
                    self.shutdown(RunStatus.FAILED, never)
            if self.stopping:
                return

    def schedule_restart(self, proc: Proc, reason: str) -> bool:
        policy = proc.spec.restart
        if self.stopping or policy.mode != "on_failure" or proc.policy_restarts >= policy.max_restarts:
            return False
        proc.policy_restarts += 1
        proc.restarts += 1
        delay = restart_delay(policy, proc.policy_restarts)
        proc.restart_at = time.monotonic() + delay
        self.set_proc_state(
            proc,
            ProcState.PENDING,
            f"{reason}; restarting in {delay:g}s (restart {proc.policy_restarts} of {policy.max_restarts})",
            exit_code=proc.exit_code,
            restart=proc.policy_restarts,
            delay_s=delay,
        )
        return True

    def maybe_running(self) -> None:
        if self.stopping or self.run.get("status") != RunStatus.STARTING:
            return
        if all(p.state in (ProcState.READY, ProcState.EXITED, ProcState.FAILED) for p in self.procs.values()):
            self.set_status(RunStatus.RUNNING)

    def next_timeout(self) -> float:
        now = time.monotonic()
        timeout = min(1.0, self.health.due(now))  # 1 s: a safety net, re-check children even without a signal
        for proc in self.procs.values():
            if proc.state == ProcState.PENDING and proc.restart_at is not None:
                timeout = min(timeout, max(0.0, proc.restart_at - now))
        return timeout  # the warm server's answers wake us through the wakeup fd

    # ------------------------------------------------------------ exits

    def log_tail(self, proc: Proc, lines: int = 3) -> str:
        try:
            with open_regular(proc.log) as handle:
                size = handle.seek(0, os.SEEK_END)
                start = max(proc.log_offset, size - 4096)
                handle.seek(start)
                data = handle.read()
        except OSError:
            return ""
        text = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
        return redact(" | ".join(text[-lines:]))[:500]

    def reap(self) -> None:
        for proc in self.procs.values():
            if proc.alive:
                code = proc.handle.poll()
                if code is not None:
                    self.on_exit(proc, code)
        self.check_watchdog()

    def on_exit(self, proc: Proc, code: int) -> None:
        proc.exit_handled = True
        self.cancel_probe(proc)
        proc.exit_code = code
        proc.ended_at = _now()
        # What the leader left behind in its group (workers, shells) goes with it.
        proc.handle.terminate()
        if self.stopping or proc.restarting:
            self.set_proc_state(proc, ProcState.STOPPED, f"{proc.name} stopped ({describe_exit(code)})", exit_code=code)
            return
        spec = proc.spec
        clean = code == 0
        if clean and spec.completes_run:
            if spec.completion_file and not self.completion_path(spec).exists():
                reason = f"{proc.name} exited 0 before finishing (no {Path(spec.completion_file).name})"
                self.exit_failed(proc, reason)
                return
            self.set_proc_state(proc, ProcState.EXITED, f"{proc.name} finished", exit_code=code)
            self.shutdown(RunStatus.COMPLETED, self.finish_reason(proc))
            return
        if clean and proc.one_shot:
            self.set_proc_state(proc, ProcState.EXITED, f"{proc.name} completed", exit_code=code)
            return
        if clean and spec.done_on_clean_exit and proc.ready_at is not None:
            self.set_proc_state(proc, ProcState.EXITED, f"{proc.name} finished its work", exit_code=code)
            return
        self.exit_failed(proc, f"{proc.name} {describe_exit(code)}")

    def finish_reason(self, proc: Proc) -> str:
        """`NAME finished`, or the process's own words for how it finished (its completion file's
        `finish_reason`, e.g. the trainer stopping early on an eval plateau)."""
        if proc.spec.completion_file:
            try:
                said = json.loads(self.completion_path(proc.spec).read_text()).get("finish_reason")
            except (OSError, ValueError, AttributeError):
                said = None
            if isinstance(said, str) and said.strip():
                return f"{proc.name} {said.strip()[:300]}"
        return f"{proc.name} finished"

    def completion_path(self, spec: ProcessSpec) -> Path:
        path = Path(spec.completion_file)
        return path if path.is_absolute() else self.dir / path

    def attempt_output(self, proc: Proc, limit: int = 65536) -> str:
        """The end of this attempt's part of the process log."""
        try:
            with open_regular(proc.log) as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(proc.log_offset, size - limit))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def restart_is_pointless(self, proc: Proc, failure: str | None) -> str | None:
        """Why a restart would fail the same way: a process that never became ready (by its probe; one
        without a probe never proves it) and failed on an import, or as the attempt before."""
        was_ready = proc.ready_at is not None and proc.spec.readiness.kind != "none"
        if was_ready or not failure:
            return None
        if repeats_on_restart(failure):
            return "not restarted: a restart would fail the same way"
        if failure == proc.last_failure:
            return "not restarted: it failed the same way as the attempt before"
        return None

    def exit_failed(self, proc: Proc, reason: str) -> None:
        detail = self.log_tail(proc)
        output = self.attempt_output(proc)
        # A process a signal ended was not ended by what it logged last: only a traceback counts then.
        line = failure_line(output) if (proc.exit_code or 0) >= 0 else exception_line(output)
        if line:
            hint = failure_hint(line)
            reason = f"{reason}: {redact(line)}" + (f" ({hint})" if hint else "")
        pointless = self.restart_is_pointless(proc, line) if proc.exit_code != 0 else None
        proc.last_failure = line
        if proc.exit_code != 0 and not pointless and self.schedule_restart(proc, reason):
            return
        n = proc.policy_restarts
        restarts = f"{n} restart{'s' if n != 1 else ''}"
        if pointless:
            reason += f"; {pointless}" + (f" (after {restarts})" if n else "")
        elif n:
            reason += f" (gave up after {restarts})"
        state = ProcState.EXITED if proc.exit_code == 0 else ProcState.FAILED
        self.set_proc_state(proc, state, reason, exit_code=proc.exit_code, detail=detail)
        if proc.spec.required or proc.one_shot:  # a failed one-shot step blocks its dependants for good
            self.run["detail"] = detail
            self.shutdown(RunStatus.FAILED, reason)

    # ------------------------------------------------------------ stopping

    def shutdown(self, final: RunStatus, reason: str) -> None:
        """Cancel pending starts, stop the rest in reverse dependency order, record the final state."""
        if self.stopping:
            return
        self.stopping = True
        for proc in self.procs.values():
            self.cancel_probe(proc)
        self.set_status(RunStatus.STOPPING, reason)
        for name in self.order:
            proc = self.procs[name]
            if proc.state == ProcState.PENDING:
                proc.restart_at = None
                self.set_proc_state(proc, ProcState.STOPPED, f"{proc.name} not started (cancelled)", cancelled=True)
        for name in reversed(self.order):
            proc = self.procs[name]
            if proc.remains():
                self.stop_process(proc)
        self.close_warm()  # before the sweep: it carries the run's marker
        self.sweep()
        self.set_status(final, reason)
        self.finished = True

    def stop_process(self, proc: Proc) -> None:
        timeout = 0.0 if self.stop_requests > 1 else proc.spec.stop_timeout
        if proc.alive:
            self.event(
                "signal",
                f"stopping {proc.name}: SIGTERM to {proc.handle.what()}",
                process=proc.name,
                signal="SIGTERM",
            )
        proc.handle.terminate()
        began = time.monotonic()

        def ended() -> bool:
            self.reap_during_stop()  # exits of any process are handled while we wait
            return not proc.remains()

        def ended_or_urged() -> str | None:
            if ended():
                return "ended"
            return "urged" if self.stop_requests > 1 else None  # a second stop request: no more waiting

        # self.wait sleeps on the loop's selector: SIGCHLD (through the wakeup fd) ends a sleep early.
        if poll_until(ended_or_urged, timeout, cap=STOP_POLL_CAP_S, sleep=self.wait) == "ended":
            return
        waited = time.monotonic() - began
        self.event(
            "signal",
            f"{proc.name} still running after {waited:.1f}s: SIGKILL to {proc.handle.what()}",
            process=proc.name,
            signal="SIGKILL",
        )
        proc.handle.kill()
        grace = SIGKILL_GRACE_S if proc.handle.launcher == "local" else SLURM_KILL_GRACE_S
        if not poll_until(ended, grace, cap=STOP_POLL_CAP_S, sleep=self.wait):
            self.event("error", f"{proc.name}: {proc.handle.what()} survived SIGKILL", process=proc.name)

    def reap_during_stop(self) -> None:
        for proc in self.procs.values():
            if proc.alive and proc.handle.poll() is not None:
                self.on_exit(proc, proc.handle.returncode)

    def sweep(self) -> None:
        """Anything still carrying this run's marker (grandchildren that left their group) is ended."""
        exclude = (self.watchdog.pid,) if self.watchdog else ()
        survivors = procscan.find_run_processes(self.dir, self.pgids, exclude=exclude, since=self.run.get("created_at"))
        if survivors:
            result = procscan.terminate(survivors, timeout=2.0)
            self.event(
                "sweep",
                f"ended {len(survivors)} leftover process(es) of this run "
                f"({result['killed']} needed SIGKILL): " + ", ".join(str(s.pid) for s in survivors),
                pids=[s.pid for s in survivors],
            )

    # ------------------------------------------------------------ requests from clients

    def handle_requests(self) -> None:
        """Requests clients leave in <run>/control/ (then SIGUSR1): {"action": "restart", "process": name}."""
        folder = self.dir / "control"
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(".json"):
                continue
            path = folder / name
            try:
                request = read_json(path)
            except (OSError, ValueError):
                request = None
            try:
                path.unlink()
            except OSError:
                pass
            if self.stopping:
                return
            if isinstance(request, dict) and request.get("action") == "restart":
                self.restart_requested(str(request.get("process")))
            else:
                self.event("request", f"ignored an unreadable request {name}")

    def restart_requested(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.state == ProcState.PENDING and not proc.ever_started:
            self.event("request", f"restart of {name} ignored: it has not started", process=name)
            return
        self.event("request", f"restart of {name} requested", process=name)
        if proc.remains():
            proc.restarting = True
            try:
                self.stop_process(proc)
            finally:
                proc.restarting = False
        if self.stopping or self.stop_requests:
            return
        proc.restarts += 1
        self.spawn(proc)

    # ------------------------------------------------------------ main loop

    def register(self) -> None:
        me = os.getpid()
        self.run["supervisor"] = {
            "pid": me,
            "create_time": procscan.process_create_time(me),
            "start_ticks": procscan.process_start_ticks(me),
        }
        self.start_watchdog()
        self.reserve_space()
        self.write_state()
        self.flush_state()
        self.event(
            "supervisor", f"supervisor started (pid {os.getpid()}, watchdog pid {self.watchdog.pid})", pid=os.getpid()
        )

    def install_signals(self) -> None:
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, self._on_signal)

    def loop(self) -> None:
        self.start_warm()
        while not self.finished:
            if self.stop_requests and not self.stopping:
                self.shutdown(RunStatus.STOPPED, "stopped by user")
                break
            if not self.dir.is_dir():  # the run folder was deleted: nothing may run on unseen
                ensure_private_dir(self.dir)  # room to record why it stopped
                self.shutdown(RunStatus.STOPPED, "its run folder was deleted while it ran")
                break
            self.check_run_json()
            self.reap()
            self.handle_probe_results()
            if self.requests_pending:
                self.requests_pending = False
                self.handle_requests()
            self.start_eligible()
            self.maybe_running()
            if self.finished:
                break
            self.health.tick(time.monotonic())
            self.alerts.tick(time.monotonic())
            self.wait(self.next_timeout())

    def emergency_stop(self, error: str) -> None:
        """The supervisor itself failed: kill everything, record why."""
        for proc in self.procs.values():
            if proc.handle is not None:
                proc.handle.kill()
        with contextlib.suppress(Exception):
            self.close_warm()
        try:
            self.sweep()
        except Exception:  # noqa: BLE001
            pass
        for proc in self.procs.values():
            if proc.state in PROC_NOT_ENDED:
                proc.state = ProcState.STOPPED
        reason = f"supervisor error: {error}"
        try:
            self.record_final(RunStatus.FAILED, reason)
            return
        except Exception as exc:  # noqa: BLE001 - the folder is read-only or full beyond the reserve
            _log(f"cannot record the run's end: {exc}; trying again every {RECORD_RETRY_S:g}s")
        # Only we know why the run ended, and its processes are gone: stay (they cannot come back) until
        # the folder takes the record (space freed, remounted writable), rather than leave the run
        # `lost` with the cause nowhere but this log. A folder that disappears ends the wait.
        deadline = time.monotonic() + RECORD_WAIT_S
        while time.monotonic() < deadline and self.dir.is_dir():
            time.sleep(RECORD_RETRY_S)
            try:
                self.record_final(RunStatus.FAILED, reason)
            except Exception:  # noqa: BLE001 - still not writable
                continue
            _log("recorded the run's end")
            return


def _daemonize() -> None:
    """Fork so the launcher can reap us at once; the child (the real supervisor) gets its own session."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_rl.core.daemons.supervisor", description="Supervise one run."
    )
    parser.add_argument("run_id")
    parser.add_argument("--foreground", action="store_true", help="do not fork into the background")
    parser.add_argument("--notify-fd", type=int, default=None, help="write 'ok' here once registered")
    args = parser.parse_args(argv)
    os.umask(0o077)  # every file the supervisor (and, inherited, its watchdog) creates is 0600, folders 0700

    def notify(text: str) -> None:
        if args.notify_fd is not None:
            try:
                os.write(args.notify_fd, (text + "\n").encode())
                os.close(args.notify_fd)
            except OSError:
                pass
            args.notify_fd = None

    try:
        supervisor = Supervisor(args.run_id)
    except (StartupError, Exception) as exc:  # noqa: BLE001
        _log(f"cannot supervise run {args.run_id!r}: {exc}")
        notify(f"error: {exc}")
        return 2
    if not args.foreground:
        _daemonize()
    supervisor.install_signals()
    try:
        supervisor.register()
        notify("ok")
        supervisor.loop()
    except Exception as exc:  # noqa: BLE001
        _log("supervisor error:\n" + traceback.format_exc())
        notify(f"error: {exc}")
        supervisor.emergency_stop(f"{type(exc).__name__}: {exc}")
        supervisor.alerts.close()
        supervisor.release_watchdog()
        _log_problem(start_sweep_queue())
        return 1
    supervisor.alerts.close()  # the run's last alerts go out before we exit (bounded)
    supervisor.release_watchdog()
    _log(f"supervisor exiting: run {supervisor.run.get('status')} ({supervisor.run.get('reason')})")
    _log_problem(start_sweep_queue())
    return 0


def _log_problem(problem: str | None) -> None:
    if problem:
        _log(problem)


if __name__ == "__main__":
    sys.exit(main())
