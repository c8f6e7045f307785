"""Acting on a run: stopping it (a lost one too) and restarting one of its processes.

A client signals the run's supervisor and waits for it to record the result; only a lost run (its
supervisor gone) is ended here: its surviving processes terminated and its final state recorded.
"""

from __future__ import annotations

import json
import secrets as _secrets
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..base.clock import remaining_s
from ..base.errors import Conflict, HermesError, NotFound
from ..base.fsutil import atomic_write_json, read_regular_text
from ..base.paths import ensure_private_dir, run_dir
from ..base.polling import poll_until
from ..base.records import RunView
from ..base.states import RECORDED_FINAL, RunStatus
from ..daemons import launchers, procscan
from ..daemons.run_record import is_recorded_final, record_final
from .store import (
    SUPERVISOR_START_TIMEOUT_S,
    UnreadableRun,
    get_run,
    lost_reason,
    read_run,
    supervisor_alive,
    survivors,
)

POLL_FIRST_S = 0.02  # the first re-read of run.json; later ones back off to polling's cap
STOP_WAIT_S = 15.0  # how long a stop waits for the run to be recorded final
SURVIVOR_GRACE_S = 3.0  # how long a recorded-final run's last processes get to exit by themselves


STOP_MARGIN_S = 15.0  # beyond the processes' stop timeouts: the sweep of leftovers, recording, a loaded machine
STOP_WAIT_MAX_S = 600.0


def stop_wait_s(run_id: str) -> float:
    """How long a run's stop can take: its supervisor stops the processes one at a time, each given its
    stop timeout before SIGKILL, then sweeps leftovers; at least STOP_WAIT_S."""
    try:
        specs = json.loads(read_regular_text(run_dir(run_id) / "pipeline.json"))
        total = sum(
            float(spec.get("stop_timeout", 10.0))
            for spec in specs
            if isinstance(spec, dict) and isinstance(spec.get("stop_timeout", 10.0), (int, float))
        )
    except (OSError, ValueError, TypeError, AttributeError, HermesError):
        return STOP_WAIT_S
    return min(max(STOP_WAIT_S, total + STOP_MARGIN_S), STOP_WAIT_MAX_S)


def _wait_final(run_id: str, wait: float, on_wait: Callable[[dict], None] | None = None) -> dict:
    """run.json once the run is final, its supervisor died while stopping (the caller turns that into
    a lost-run stop), or `wait` ran out. `on_wait` sees run.json at each look while it waits."""

    def settled() -> dict | None:
        run = read_run(run_id)
        died = not supervisor_alive(run) and (run.get("supervisor") or {}).get("pid")
        if is_recorded_final(run) or died:
            return run
        if on_wait is not None:
            on_wait(run)
        return None

    return poll_until(settled, wait, first=POLL_FIRST_S) or read_run(run_id)


def _wait_registered(run_id: str, wait: float) -> dict:
    """A run launched a moment ago may not have its supervisor's pid in run.json yet."""

    def registered() -> dict | None:
        run = read_run(run_id)
        return run if (run.get("supervisor") or {}).get("pid") else None

    return poll_until(registered, wait, first=POLL_FIRST_S) or read_run(run_id)


def stop_run(
    run_id: str, *, wait: float = STOP_WAIT_S, force: bool = False, on_wait: Callable[[dict], None] | None = None
) -> RunView:
    """Stop a starting, running or lost run; returns get_run() after it (status stopping if `wait` ran out;
    `stop_wait_s` is as long as its stop can take). `on_wait` sees run.json while the supervisor stops it.

    A running supervisor gets SIGTERM and stops its processes in reverse order. A lost run's surviving
    processes are ended here (SIGTERM, SIGKILL after 5 s) and the run recorded as stopped.
    `force`: stop now: the supervisor SIGKILLs the process groups instead of waiting out their stop timeouts.
    """
    try:
        run = read_run(run_id)
    except (UnreadableRun, NotFound):
        # run.json corrupt or gone: its supervisor is still found by its marker, and rewrites the record.
        if not _stop_unrecorded(run_id, wait, force):
            raise
        return get_run(run_id, sample=False)
    status = run.get("status")
    if status in RECORDED_FINAL:
        raise Conflict(
            f"run {run_id} already {status}" + (f" ({run['reason']})" if run.get("reason") else ""),
            hint="only starting, running or lost runs can be stopped",
        )
    if not (run.get("supervisor") or {}).get("pid"):
        run = _wait_registered(run_id, remaining_s(run.get("created_at"), SUPERVISOR_START_TIMEOUT_S))
    sup = run.get("supervisor") or {}
    if not is_recorded_final(run) and supervisor_alive(run):
        if run.get("status") != RunStatus.STOPPING or force:
            procscan.signal_process(sup["pid"], signal.SIGUSR2 if force else signal.SIGTERM)
        run = _wait_final(run_id, wait, on_wait)
    if not is_recorded_final(run) and not supervisor_alive(run):
        _stop_lost(run)
    _end_survivors(run_id)
    return get_run(run_id, sample=False)


def still_alive(run: dict) -> list[str]:
    """What of a run lives now, in words: its supervisor and each process carrying its marker, with pids."""
    alive = []
    if supervisor_alive(run):
        alive.append(f"supervisor (pid {run['supervisor']['pid']})")
    alive += [f"{_survivor_name(run, s)} (pid {s.pid})" for s in survivors(run)]
    return alive


def _survivor_name(run: Mapping[str, Any], survivor: procscan.Survivor) -> str:
    """A survivor by its process's name: its marker, else the recorded process with its pid or process group
    (a child of it), else what it runs."""
    if survivor.name:
        return survivor.name
    for proc in run.get("processes") or []:
        if proc.get("pid") == survivor.pid:
            return str(proc.get("name"))
    for proc in run.get("processes") or []:
        if survivor.pgid is not None and proc.get("pgid") == survivor.pgid:
            return f"a child of {proc.get('name')}"
    words = survivor.cmdline.split()
    if not words:
        return "a process of the run"
    program = words[0].rsplit("/", 1)[-1]
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
    return f"{program} {module}".strip() if module else " ".join(w.rsplit("/", 1)[-1] for w in words[:2])


def stop_not_done(run: Mapping[str, Any], wait: float) -> HermesError | None:
    """None when the run is recorded final; else the error a stop that did not stop reports: what is
    still alive. A client must never report success while the run goes on."""
    if run.get("status") in RECORDED_FINAL:
        return None
    alive = still_alive(dict(run))
    status = run.get("status")
    shown = ", ".join(alive[:8]) + (f" and {len(alive) - 8} more" if len(alive) > 8 else "")
    text = f"run {run.get('run_id')} did not stop within {wait:g} s: it is still {status}"
    text += f"; still alive: {shown}" if alive else "; no process of it is alive now"
    if status == RunStatus.STOPPING:
        hint = "its supervisor is stopping its processes in order; check again with `hermes-rl status`"
    elif alive and alive[0].startswith("supervisor"):
        hint = (
            "its supervisor did not act on the stop request; `kill -9` its pid and its watchdog ends the run's "
            "processes and records the run failed"
        )
    else:
        hint = "run `hermes-rl stop` again, or end the processes named above"
    return HermesError(text, hint=hint)


def _end_survivors(run_id: str) -> None:
    """A stop never reports success while a process of the run lives: once the run is recorded final,
    its supervisor and any process still carrying its marker get SURVIVOR_GRACE_S to exit, then are
    ended here; one that outlives even SIGKILL fails the stop, naming it."""
    run = read_run(run_id)
    if not is_recorded_final(run):
        return  # still stopping (`wait` ran out): the caller reports `stopping`, not success
    remaining: list[procscan.Survivor] = []

    def all_gone() -> bool:
        remaining[:] = survivors(run)
        if supervisor_alive(run):  # it exits right after recording the end: waited for like the rest
            sup = run["supervisor"]
            remaining.append(procscan.Survivor(sup["pid"], None, "supervisor", "", sup.get("create_time")))
        return not remaining

    if poll_until(all_gone, SURVIVOR_GRACE_S, first=POLL_FIRST_S):
        return
    procscan.terminate(remaining, timeout=5.0)
    if all_gone():
        return
    shown = ", ".join(f"{_survivor_name(run, s)} (pid {s.pid})" for s in remaining[:5])
    raise HermesError(
        f"run {run_id} is recorded {run.get('status')} but {len(remaining)} of its processes are still alive: {shown}",
        hint="they ignored SIGTERM and SIGKILL; check them with `ps` and try `hermes-rl stop` again",
    )


def _stop_unrecorded(run_id: str, wait: float, force: bool) -> bool:
    """Stop a run whose run.json cannot be read through the supervisor carrying its marker; False when
    there is none. The supervisor writes run.json again as it records the stop."""

    def supervisors() -> list[procscan.Survivor]:
        marked = procscan.marked_processes(procscan.SUPERVISOR_MARKER, str(run_dir(run_id)))
        return [p for p in marked if f"daemons.supervisor {run_id}" in p.cmdline]  # not its watchdog

    found = supervisors()
    if not found:
        return False
    for sup in found:
        procscan.signal_process(sup.pid, signal.SIGUSR2 if force else signal.SIGTERM)
    poll_until(lambda: not supervisors(), wait, first=POLL_FIRST_S)
    return True


def _stop_lost(run: dict) -> None:
    run_id = run["run_id"]
    surviving = survivors(run)
    result = procscan.terminate(surviving, timeout=5.0) if surviving else {"terminated": 0, "killed": 0}
    jobs: dict[str, list[str]] = {}  # its jobs elsewhere by launcher, if the watchdog did not get to end them
    for proc in run.get("processes") or []:
        job = launchers.job_of(proc)
        if job and job.get("id"):
            jobs.setdefault(proc.get("launcher") or job.get("launcher") or "local", []).append(str(job["id"]))
    left: list[str] = []
    for name, ids in jobs.items():
        launcher = launchers.find(name)
        if launcher is not None:
            left += [f"{name} {job_id}" for job_id in launcher.cleanup(run_id, ids)[1]]
    current = read_run(run_id)
    if is_recorded_final(current):
        return  # the watchdog (or another client) finished it meanwhile
    reason = "stopped by user (its supervisor was gone)"
    record_final(
        run_dir(run_id),
        current,
        RunStatus.STOPPED,
        reason,
        message=f"run stopped: {reason}; ended {len(surviving)} surviving process(es) "
        f"({result['killed']} needed SIGKILL)" + (f"; job(s) {', '.join(left)} still queued" if left else ""),
        pids=[s.pid for s in surviving],
    )


def restart_process(run_id: str, name: str, *, wait: float = 30.0) -> RunView:
    """Ask the supervisor to restart one process (stop its group, start it again); its dependants keep
    running. Returns get_run() once it has started again (or when `wait` runs out)."""
    run = read_run(run_id)
    names = [p.get("name") for p in run.get("processes") or []]
    if name not in names:
        raise NotFound(f"run {run_id} has no process {name!r}", hint=f"processes: {', '.join(map(str, names))}")
    status = run.get("status")
    lost = lost_reason(run)
    if status in RECORDED_FINAL or status == RunStatus.STOPPING or lost:
        raise Conflict(
            f"run {run_id} is {RunStatus.LOST if lost else status}: cannot restart {name}", hint="start a new run"
        )
    before = next(p for p in run["processes"] if p.get("name") == name)
    if before.get("pid") is None:
        raise Conflict(f"{name} has not started yet", hint="it starts once its dependencies are ready")
    folder = run_dir(run_id) / "control"
    ensure_private_dir(folder)
    atomic_write_json(folder / f"{time.time_ns()}-{_secrets.token_hex(2)}.json", {"action": "restart", "process": name})
    if supervisor_alive(run):  # never signal a pid not proven to be this run's supervisor
        procscan.signal_process(run["supervisor"]["pid"], signal.SIGUSR1)

    def restarted() -> bool:
        current = read_run(run_id)
        proc: dict = next((p for p in current.get("processes") or [] if p.get("name") == name), {})
        return proc.get("started_at") != before.get("started_at") or is_recorded_final(current)

    poll_until(restarted, wait, first=POLL_FIRST_S)
    return get_run(run_id, sample=False)
