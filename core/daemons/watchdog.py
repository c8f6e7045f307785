"""Cleans up after a supervisor that died without stopping its run:
`python -m hermes_rl.core.daemons.watchdog RUN_ID SUPERVISOR_PID`.

The supervisor starts this first and keeps the only write end of a pipe that is our stdin. It writes
`pgid N` for every process group it creates, `job LAUNCHER ID` for every job a launcher runs elsewhere
(a Slurm job: `job slurm 16`; the `slurm_job N` of earlier versions still reads), and `done`
once the run is final. EOF without `done` means the supervisor died (SIGKILL, OOM killer, crash):
PR_SET_PDEATHSIG already killed its direct children, so we end what they left behind — the recorded
process groups, every process carrying the run's environment marker, and the run's jobs through their
launcher's cleanup (Slurm: scancel, then waiting until squeue no longer lists them) — record the run as
failed, "supervisor died", and deliver the alert rules' failure alerts (core.daemons.alerts) in the supervisor's place.

Idle, it does nothing but block on read(0); it imports what it cleans up with (psutil, the alert rules) only
when it has work to do.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ..base.names import is_ascii_digits


def read_commands(fd: int = 0) -> tuple[list[int], list[tuple[str, str]], bool]:
    """Block until EOF; return (pgids announced, (launcher, job id) announced, whether the supervisor said `done`)."""
    pgids: list[int] = []
    jobs: list[tuple[str, str]] = []
    done = False
    buffer = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            word, _, value = line.decode(errors="replace").partition(" ")
            if word == "pgid" and is_ascii_digits(value.strip()):
                pgids.append(int(value))
            elif word == "slurm_job" and is_ascii_digits(value.strip()):
                jobs.append(("slurm", value.strip()))
            elif word == "job" and len(value.split()) == 2:
                launcher, job_id = value.split()
                jobs.append((launcher, job_id))
            elif word == "done":
                done = True
    return pgids, jobs, done


def cancel_jobs(run_id: str, jobs: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
    """End the run's jobs through each one's launcher (those announced, and any other the launcher finds
    for the run: one submitted just before the supervisor died); a note for the final record."""
    if not jobs:
        return ""
    # deferred, as every import below: an idle watchdog (one per run) stays a bare 9 MiB interpreter, not 22
    from ..base.fsutil import atomic_write_json
    from ..base.paths import run_dir
    from . import launchers
    from .run_record import read_run_file

    by_launcher: dict[str, list[str]] = {}
    for name, job_id in jobs:
        by_launcher.setdefault(name, []).append(job_id)
    notes, run = [], read_run_file(run_dir(run_id))
    for name, ids in by_launcher.items():
        launcher = launchers.find(name)
        if launcher is None:
            notes.append(f"{name} job(s) {', '.join(ids)}: launcher {name!r} not installed")
            continue
        ended, left = launcher.cleanup(run_id, ids)
        for proc in (run or {}).get("processes") or []:
            job = launchers.job_of(proc)
            if proc.get("launcher") == name and job and job.get("id") in ended:
                proc["job"] = {**job, "state": getattr(launcher, "cancelled_state", "CANCELLED")}
        notes.append(
            f"{name} job(s) {', '.join(left)} still there after cleanup"
            if left
            else f"ended {len(ended)} {name} job(s)"
        )
    if run is not None:
        atomic_write_json(run_dir(run_id) / "run.json", run)
    return "".join(f"; {note}" for note in notes)


def clean_up(
    run_id: str, supervisor_pid: int, pgids: list[int], jobs: list[tuple[str, str]] | tuple[tuple[str, str], ...] = ()
) -> None:
    # deferred, as every import below: an idle watchdog (one per run) stays a bare 9 MiB interpreter, not 22
    from ..base.paths import run_dir
    from ..base.states import RunStatus
    from . import procscan
    from .alerts import AlertMonitor
    from .run_record import is_recorded_final, read_run_file, record_final

    folder = run_dir(run_id)
    run = read_run_file(folder)
    if run is not None and is_recorded_final(run):
        # It finished its work and died on the way out: only make sure nothing is left.
        survivors = procscan.find_run_processes(folder, pgids, since=run.get("created_at"))
        if survivors:
            procscan.terminate(survivors, timeout=2.0)
        cancel_jobs(run_id, list(jobs))
        return
    # Ask nicely first (a trainer may flush its metrics), then insist.
    for pgid in pgids:
        procscan.signal_group(pgid, signal.SIGTERM)
    since = run.get("created_at") if run else None
    survivors = procscan.find_run_processes(folder, pgids, since=since)
    result = procscan.terminate(survivors, timeout=3.0)
    for pgid in pgids:
        procscan.signal_group(pgid, signal.SIGKILL)
    jobs_note = cancel_jobs(run_id, list(jobs))
    if run is None:
        return
    # The supervisor may have written run.json while we were cleaning; re-read before the final write.
    run = read_run_file(folder) or run
    if is_recorded_final(run):
        return
    reason = f"supervisor died (pid {supervisor_pid})"
    record_final(
        folder,
        run,
        RunStatus.FAILED,
        reason,
        message=f"run failed: {reason}; watchdog ended {len(survivors)} leftover process(es) "
        f"({result['killed']} needed SIGKILL){jobs_note}",
    )
    # The supervisor cannot tell anyone now: its alert rules for a failure go out from here (once: what
    # it already delivered is in the run's alerts.jsonl).
    alerts = AlertMonitor(folder, run, lambda: run.get("processes") or [])
    alerts.on_final(RunStatus.FAILED, reason)
    alerts.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not is_ascii_digits(argv[1]):
        print("usage: python -m hermes_rl.core.daemons.watchdog RUN_ID SUPERVISOR_PID", file=sys.stderr)
        return 2
    run_id, supervisor_pid = argv[0], int(argv[1])
    # Our parent's terminal signals are not for us; SIGTERM still ends us (the supervisor restarts us).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgids, jobs, done = read_commands()
    if done:
        return 0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(
        f"{stamp} watchdog: supervisor {supervisor_pid} is gone without finishing run {run_id}; cleaning up", flush=True
    )
    clean_up(run_id, supervisor_pid, pgids, jobs)
    from .spawn import start_sweep_queue  # deferred: see clean_up

    problem = start_sweep_queue()  # the run's place is free: a sweep's waiting run may take it
    if problem:
        print(f"watchdog: {problem}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
