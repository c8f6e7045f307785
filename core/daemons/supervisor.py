"""The per-run supervisor: `python -m hermes_rl.core.daemons.supervisor RUN_ID`.

Started detached by core.runs.launch. It executes the run's pipeline.json (DESIGN §5) without
knowing what the processes are: starts them in dependency order gated by readiness checks, watches
them, restarts them by policy, and stops them in reverse order. Every transition goes to run.json
(atomically) and events.jsonl; clients only read those files and signal this process.

No orphans, in three layers:
- each child runs in its own process group with PR_SET_PDEATHSIG=SIGKILL (dies with us);
- a watchdog process (daemons.watchdog) holds the read end of a pipe only we can write to: if we die
  (even by SIGKILL) it sees EOF, ends every recorded process group and every process carrying the
  run's environment marker (grandchildren that left their group too), and records the run as failed;
- on a normal stop we sweep the same marker ourselves.

Single-threaded state machine; readiness checks run in small threads that only post results.
SIGTERM/SIGINT mean "stop by user"; a second one (a second or more later) or SIGUSR2 escalates to
SIGKILL at once. SIGUSR1: read client requests in <run>/control/ (restart one process).
Kept light: no third-party imports but psutil (process inspection) and python-dotenv (reading .env).

This module keeps the run's order: dependencies, restart policy, signals and client requests. One process's
life is daemons.process, readiness checks daemons.readiness, run.json and events.jsonl daemons.run_record,
the watchdog daemons.watchdog_link.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from ..base.envvar_limits import env_number
from ..base.errors import BadInput
from ..base.failures import ENDS_A_WORKER, exception_type, repeats_on_restart
from ..base.fsutil import read_json
from ..base.paths import ensure_private_dir, validate_run_id
from ..base.paths import run_dir as run_dir_of
from ..base.secrets import ENDPOINT_KEY_ENV, forget_endpoint_key, new_run_keys, write_endpoint_key
from ..base.states import PROC_ALIVE, PROC_NOT_ENDED, ProcState, RunStatus
from . import launchers, procscan
from .alerts import AlertMonitor
from .log_watch import LogWatch
from .pipeline import load_pipeline, port_is_free, restart_delay, start_order
from .process import Proc, StartFailed, move_port, start_run_warm
from .readiness import ReadinessChecks, timeout_reason
from .run_record import RunRecord, log
from .spawn import describe_exit, start_sweep_queue
from .starvation import at_step, starving
from .warm.client import WarmStarts
from .watchdog_link import WatchdogLink

RECORD_RETRY_S = 1.0  # a final record the disk refused is tried again this often...
RECORD_WAIT_S = 24 * 3600.0  # ...for at most this long
# A process fed by others (the trainer) that has waited this long for input while every process that feeds it
# (the environment workers) has ended, this long ago too, gets no more: the run cannot go on. The trainer polls
# run-api every 0.25 s at most, so whatever the last worker delivered has been seen by then.
STARVED_ENV = "HERMES_RL_STARVED_S"
DEFAULT_STARVED_S = 20.0


class StartupError(Exception):
    pass


class Supervisor:
    def __init__(self, run_id: str):
        self.run_id = validate_run_id(run_id)
        self.dir = run_dir_of(run_id)
        try:
            run = read_json(self.dir / "run.json")
            specs = load_pipeline(self.dir / "pipeline.json")
        except FileNotFoundError as exc:
            raise StartupError(f"run {run_id} is not prepared: {exc.filename} is missing") from None
        except Exception as exc:  # noqa: BLE001 - any unreadable state ends here with a clear line
            raise StartupError(f"run {run_id}: cannot read its state: {exc}") from None
        if run.get("status") != RunStatus.STARTING or run.get("supervisor"):
            raise StartupError(f"run {run_id} already has a supervisor (status {run.get('status')})")
        ports = run.get("ports") or {}
        self.order = start_order(specs)
        self.procs = {s.name: Proc(s, run_id, self.dir, ports.get(s.port) if s.port else None) for s in specs}
        for spec in specs:
            for dep, condition in spec.depends_on:
                if condition == "completed":
                    self.procs[dep].one_shot = True
        # in the environment of the processes that name them in secret_env (and the endpoint's key file)
        self.run_keys = new_run_keys()
        self.stop_requests = 0  # 1: stop in order; 2: stop now (SIGKILL without waiting)
        self.first_stop_at = 0.0
        self.requests_pending = True  # look at control/ once at start: a request may predate us
        self.stopping = False
        self.finished = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.alerts = AlertMonitor(self.dir, run, lambda: [p.to_json() for p in self.procs.values()])
        self.record = RunRecord(
            self.dir, run, lambda: [self.procs[s].to_json() for s in self.procs], self.alerts.on_final
        )
        self.run = run  # the record's run.json content
        self.watchdog = WatchdogLink(self.run_id, self.record)
        self.pgids: list[int] = []  # every local process group started, for the sweep
        # each launcher the run's processes use that keeps a tracker (Slurm: one squeue for all its jobs)
        self.trackers: dict = {}
        for name in dict.fromkeys(p.spec.launcher for p in self.procs.values()):
            tracker = launchers.get(name).tracker(self.run_id, self.dir)
            if tracker is not None:
                tracker.on_change = self._job_changed
                self.trackers[name] = tracker
        self.warm: WarmStarts | None = None  # the run's warm server (start_warm), once started
        self.readiness = ReadinessChecks(self._wake)
        self.log_watch = LogWatch(self.dir, self.procs)
        self.event = self.record.event
        self.set_proc_state = self.record.process_state
        try:
            self.starved_s = env_number(STARVED_ENV, DEFAULT_STARVED_S, minimum=0.1, maximum=24 * 3600)
        except BadInput as exc:
            self.starved_s = DEFAULT_STARVED_S
            self.event("limit", f"{exc}; using {DEFAULT_STARVED_S:g} s")

    def _job_changed(self, handle) -> None:
        proc = next((p for p in self.procs.values() if p.handle is handle), None)
        if proc is not None:
            fields = launchers.event_fields(handle.record())
            self.record.job_changed(proc, handle.launcher, handle.change_words(), fields)

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

    def _wake(self) -> None:
        """From other threads (readiness checks, the warm server's reader): wake the loop."""
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"w")

    def wait(self, timeout: float) -> None:
        self.record.flush()
        if timeout > 0:
            self.selector.select(max(0.0, timeout))
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # ------------------------------------------------------------ warm starts

    def start_warm(self) -> None:
        self.warm, message = start_run_warm(self.procs, self.run_keys, on_change=self._wake)
        if self.warm is not None:
            self.event("warm", message)

    def warm_pending(self, proc: Proc) -> bool:
        """Whether `proc` waits for the warm server to finish its imports (then forks it)."""
        return self.warm is not None and proc.wants_warm and self.warm.state == "starting"

    def close_warm(self) -> None:
        warm, self.warm = self.warm, None
        if warm is not None:
            warm.close()

    # ------------------------------------------------------------ starting

    def spawn(self, proc: Proc) -> None:
        if proc.port and not port_is_free(proc.port):
            old, message = proc.port, move_port(proc, self.procs, self.run)
            self.event("port", message, process=proc.name, old=old, new=proc.port)
        try:
            handle = proc.spawn(run_keys=self.run_keys, trackers=self.trackers, warm=self.warm)
        except StartFailed as exc:
            self.start_failed(proc, str(exc), retry=exc.retry)
            return
        if handle.pgid is not None:
            self.pgids.append(handle.pgid)
        self.watchdog.add(handle.watchdog_line())
        again = f" (restart {proc.restarts})" if proc.restarts else ""
        self.set_proc_state(
            proc,
            ProcState.STARTING,
            f"{proc.name} started{again}, " + (f"pid {handle.pid}" if handle.pid else handle.what()),
            attempt=proc.attempt,
            **launchers.event_fields(handle.record()),
        )
        if proc.spec.readiness.kind != "none":
            self.readiness.start(proc, self.procs.get(proc.spec.readiness.source or proc.name, proc))
        elif not proc.one_shot:
            self.mark_ready(proc)
        # A one-shot step (others wait for it to complete) stays "starting" until it exits.

    def start_failed(self, proc: Proc, reason: str, *, retry: bool = True) -> None:
        """A process could not even be spawned: like a failing exit, with the reason in words; not started
        again where another attempt cannot help (`retry` False)."""
        if retry and self.schedule_restart(proc, reason):
            return
        self.set_proc_state(proc, ProcState.FAILED, reason)
        if proc.spec.required or proc.one_shot:
            self.shutdown(RunStatus.FAILED, reason)

    def mark_ready(self, proc: Proc) -> None:
        proc.ready_at = time.time()
        self.set_proc_state(proc, ProcState.READY, f"{proc.name} is ready", ready_at=proc.ready_at)

    def handle_readiness(self) -> None:
        for kind, name, attempt, detail in self.readiness.results():
            proc = self.procs[name]
            if attempt != proc.attempt or proc.state != ProcState.STARTING or not proc.alive or self.stopping:
                continue  # stale: the process exited or restarted since
            proc.readiness_cancel = None
            if kind == "ready":
                self.mark_ready(proc)
                continue
            reason = timeout_reason(proc, detail)
            self.event("probe_timeout", reason, process=proc.name)  # the event's name is part of the record
            if proc.spec.required or self.has_dependants(proc):
                self.shutdown(RunStatus.FAILED, reason)

    def has_dependants(self, proc: Proc) -> bool:
        return any(dep == proc.name for p in self.procs.values() for dep, _ in p.spec.depends_on)

    # ------------------------------------------------------------ scheduling

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
            ok, never = dependency_status(proc, self.procs)
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
            self.record.set_status(RunStatus.RUNNING)

    def next_timeout(self) -> float:
        now = time.monotonic()
        timeout = min(1.0, self.log_watch.due(now))  # 1 s: a safety net, re-check children even without a signal
        for proc in self.procs.values():
            if proc.state == ProcState.PENDING and proc.restart_at is not None:
                timeout = min(timeout, max(0.0, proc.restart_at - now))
        return timeout  # the warm server's answers wake us through the wakeup fd

    # ------------------------------------------------------------ exits

    def reap(self) -> None:
        for proc in self.procs.values():
            if proc.alive and proc.handle is not None:
                code = proc.handle.poll()
                if code is not None:
                    self.on_exit(proc, code)
        if not self.finished:
            self.watchdog.check()

    def on_exit(self, proc: Proc, code: int) -> None:
        self.readiness.cancel(proc)
        handle = proc.handle
        stop_words = handle.stop_words if handle is not None else describe_exit  # in its launcher's words
        proc.ended(code)
        if self.stopping or proc.restarting:
            self.set_proc_state(proc, ProcState.STOPPED, f"{proc.name} stopped ({stop_words(code)})", exit_code=code)
            return
        outcome, words = proc.exit_outcome()
        if outcome == "failed":
            self.exit_failed(proc, words)
            return
        self.set_proc_state(proc, ProcState.EXITED, words, exit_code=code)
        if outcome == "run_done":
            self.shutdown(RunStatus.COMPLETED, proc.finish_reason())

    def exit_failed(self, proc: Proc, reason: str) -> None:
        detail = proc.log_tail()
        reason, line = proc.failure(reason)
        pointless = restart_is_pointless(proc, line) if proc.exit_code != 0 else None
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

    # ------------------------------------------------------------ processes that feed another

    def check_fed(self) -> None:
        """A live process fed by others (the trainer, by the environment workers) that says it waits for input
        while every process that feeds it has ended: nothing can send it any more. A worker that ended cleanly
        (its own verdict that its share was done) is restarted once by its policy, with its back-off; when none
        can be, the run fails with each worker's own last words."""
        if self.stopping:
            return
        statuses, read_at = self.log_watch.status, self.log_watch.status_at
        for fed, feeders, status in list(starving(self.procs, statuses, read_at, self.starved_s)):
            self.starved(fed, feeders, status)
            if self.stopping:
                return

    def starved(self, fed: Proc, feeders: list[Proc], status: dict) -> None:
        at = at_step(status, self.run.get("total_steps"))
        restarted = False
        for proc in feeders:
            if proc.state == ProcState.EXITED and proc.exit_code == 0 and not proc.ended_too_soon:
                proc.ended_too_soon = True
                why = f"{proc.name} ended (exit code 0) while {fed.name} still waited for input{at}"
                restarted = self.schedule_restart(proc, why) or restarted
        if restarted:
            return
        words = [proc.last_words() for proc in feeders]
        reason = f"{fed.name} can get no more input{at}: every process that feeds it has ended: " + "; ".join(words)
        self.run["detail"] = " | ".join(proc.log_tail() for proc in feeders)[:500]
        self.shutdown(RunStatus.FAILED, reason)

    # ------------------------------------------------------------ stopping

    def shutdown(self, final: RunStatus, reason: str) -> None:
        """Cancel pending starts, stop the rest in reverse dependency order, record the final state."""
        if self.stopping:
            return
        self.stopping = True
        for proc in self.procs.values():
            self.readiness.cancel(proc)
        self.record.set_status(RunStatus.STOPPING, reason)
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
        forget_endpoint_key(self.dir)  # the endpoint ended with its processes
        self.record.set_status(final, reason)
        self.finished = True

    def stop_process(self, proc: Proc) -> None:
        # self.wait sleeps on the loop's selector: SIGCHLD (through the wakeup fd) ends a sleep early.
        proc.stop(urged=lambda: self.stop_requests > 1, reap=self.reap_during_stop, sleep=self.wait, event=self.event)

    def reap_during_stop(self) -> None:
        """Exits of any process are handled while one is being stopped."""
        for proc in self.procs.values():
            if proc.alive and proc.handle is not None and (code := proc.handle.poll()) is not None:
                self.on_exit(proc, code)

    def sweep(self) -> None:
        """Anything still carrying this run's marker (grandchildren that left their group) is ended."""
        exclude = (self.watchdog.pid,) if self.watchdog.pid else ()
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
        for name, request in read_requests(self.dir / "control"):
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
        self.watchdog.start()
        self.record.reserve_space()
        write_endpoint_key(self.dir, self.run_keys[ENDPOINT_KEY_ENV])
        self.record.write_now()
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
            self.record.check()
            self.reap()
            self.handle_readiness()
            if self.requests_pending:
                self.requests_pending = False
                self.handle_requests()
            self.start_eligible()
            self.maybe_running()
            if self.finished:
                break
            self.log_watch.tick(time.monotonic())
            self.check_fed()
            if self.finished:
                break
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
        forget_endpoint_key(self.dir)  # the endpoint ended with its processes
        for proc in self.procs.values():
            if proc.state in PROC_NOT_ENDED:
                proc.state = ProcState.STOPPED
        self.record.record_final_patiently(
            RunStatus.FAILED, f"supervisor error: {error}", RECORD_RETRY_S, RECORD_WAIT_S
        )


def dependency_status(proc: Proc, procs: dict[str, Proc]) -> tuple[bool, str | None]:
    """(all satisfied, why it never can be) for a pending process."""
    for dep_name, condition in proc.spec.depends_on:
        dep = procs[dep_name]
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


def restart_is_pointless(proc: Proc, failure: str | None) -> str | None:
    """Why a restart would fail the same way: a process that never became ready (by its check; one
    without a check never proves it) and failed on an import, or as the attempt before."""
    if exception_type(failure) in ENDS_A_WORKER:
        return "not restarted: a restart would fail the same way"
    was_ready = proc.ready_at is not None and proc.spec.readiness.kind != "none"
    if was_ready or not failure:
        return None
    if repeats_on_restart(failure):
        return "not restarted: a restart would fail the same way"
    if failure == proc.last_failure:
        return "not restarted: it failed the same way as the attempt before"
    return None


def read_requests(folder: Path) -> Iterator[tuple[str, object]]:
    """Each request file in `folder` (name, its JSON or None when unreadable), removed once read."""
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
        with contextlib.suppress(OSError):
            path.unlink()
        yield name, request


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
        log(f"cannot supervise run {args.run_id!r}: {exc}")
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
        log("supervisor error:\n" + traceback.format_exc())
        notify(f"error: {exc}")
        supervisor.emergency_stop(f"{type(exc).__name__}: {exc}")
        supervisor.alerts.close()
        supervisor.watchdog.release()
        _log_problem(start_sweep_queue())
        return 1
    supervisor.alerts.close()  # the run's last alerts go out before we exit (bounded)
    supervisor.watchdog.release()
    log(f"supervisor exiting: run {supervisor.run.get('status')} ({supervisor.run.get('reason')})")
    _log_problem(start_sweep_queue())
    return 0


def _log_problem(problem: str | None) -> None:
    if problem:
        log(problem)


if __name__ == "__main__":
    sys.exit(main())
