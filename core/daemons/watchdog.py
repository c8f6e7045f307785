"""Cleans up after a supervisor that died without stopping its run:
`python -m hermes_rl.core.daemons.watchdog RUN_ID SUPERVISOR_PID`.

The supervisor starts this first and keeps the only write end of a pipe that is our stdin. It writes
`pgid N` for every process group it creates and `done` once the run is final. EOF without `done`
means the supervisor died (SIGKILL, OOM killer, crash): PR_SET_PDEATHSIG already killed its direct
children, so we end what they left behind — the recorded process groups and every process carrying
the run's environment marker — record the run as failed, "supervisor died", and deliver the alert
rules' failure alerts (core.daemons.alerts) in the supervisor's place.

Idle, it does nothing but block on read(0); it imports psutil only when it has work to do.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def read_commands(fd: int = 0) -> tuple[list[int], bool]:
    """Block until EOF; return (pgids announced, whether the supervisor said `done`)."""
    pgids: list[int] = []
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
            if word == "pgid" and value.strip().isdigit():
                pgids.append(int(value))
            elif word == "done":
                done = True
    return pgids, done


def clean_up(run_id: str, supervisor_pid: int, pgids: list[int]) -> None:
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.base.states import RunStatus
    from hermes_rl.core.daemons import procscan
    from hermes_rl.core.daemons.runstate import is_recorded_final, read_run_file, record_final

    folder = run_dir(run_id)
    run = read_run_file(folder)
    if is_recorded_final(run):
        # It finished its work and died on the way out: only make sure nothing is left.
        survivors = procscan.find_run_processes(folder, pgids, since=run.get("created_at"))
        if survivors:
            procscan.terminate(survivors, timeout=2.0)
        return
    # Ask nicely first (a trainer may flush its metrics), then insist.
    for pgid in pgids:
        procscan.signal_group(pgid, signal.SIGTERM)
    since = run.get("created_at") if run else None
    survivors = procscan.find_run_processes(folder, pgids, since=since)
    result = procscan.terminate(survivors, timeout=3.0)
    for pgid in pgids:
        procscan.signal_group(pgid, signal.SIGKILL)
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
        f"({result['killed']} needed SIGKILL)",
    )
    # The supervisor cannot tell anyone now: its alert rules for a failure go out from here (once: what
    # it already delivered is in the run's alerts.jsonl).
    from hermes_rl.core.daemons.alerts import AlertMonitor

    alerts = AlertMonitor(folder, run, lambda: run.get("processes") or [])
    alerts.on_final(RunStatus.FAILED, reason)
    alerts.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m hermes_rl.core.daemons.watchdog RUN_ID SUPERVISOR_PID", file=sys.stderr)
        return 2
    run_id, supervisor_pid = argv[0], int(argv[1])
    # Our parent's terminal signals are not for us; SIGTERM still ends us (the supervisor restarts us).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgids, done = read_commands()
    if done:
        return 0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(
        f"{stamp} watchdog: supervisor {supervisor_pid} is gone without finishing run {run_id}; cleaning up", flush=True
    )
    clean_up(run_id, supervisor_pid, pgids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
