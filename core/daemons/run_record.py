"""run.json and events.jsonl, the record of a run, in one place: the one place a final status is written,
whoever ends the run (`record_final`: the supervisor, its watchdog, or a client stopping a run whose
supervisor is gone), and the record a live supervisor keeps (`RunRecord`: run.json written atomically once
per loop turn, events.jsonl one line per transition, and the supervisor's own log lines on its stdout,
supervisor.log).

While the supervisor lives it is run.json's only writer (the watchdog and clients write it only once it
is gone), so `RunRecord.check` rewrites a run.json deleted or changed behind its back. Light on purpose
(core.base only): the watchdog reads it when a supervisor dies.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..base.fsutil import append_jsonl, atomic_write_json, open_regular, read_json
from ..base.secrets import redact
from ..base.states import PROC_NOT_ENDED, RECORDED_FINAL, ProcState, RunStatus

STATE_CHECK_S = 1.0  # how often run.json is checked to still be the one written last
SPACE_RESERVE = ".space-reserve"  # bytes held back in the run folder to record its end on a full disk
SPACE_RESERVE_BYTES = 256 * 1024


def read_run_file(folder: Path) -> dict | None:
    """run.json as a dict, or None when it is missing or unreadable."""
    try:
        run = read_json(Path(folder) / "run.json")
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def record_final(
    folder: Path, run: dict, status: RunStatus, reason: str, message: str | None = None, **event_fields
) -> dict:
    """Write `status` and `reason` to run.json (processes not ended become stopped) and the matching
    run_status event to events.jsonl. `run` is the latest run.json; returns it as written."""
    now = time.time()
    for proc in run.get("processes") or []:
        if isinstance(proc, dict) and proc.get("state") in PROC_NOT_ENDED:
            proc["state"] = ProcState.STOPPED
            proc["ended_at"] = proc.get("ended_at") or now
    run.update(status=status, reason=reason, ended_at=now)
    atomic_write_json(Path(folder) / "run.json", run)
    append_jsonl(
        Path(folder) / "events.jsonl",
        {
            "time": now,
            "event": "run_status",
            "status": status,
            "reason": reason,
            **event_fields,
            "message": message or f"run {status}: {reason}",
        },
    )
    return run


def is_recorded_final(run: Mapping[str, Any] | None) -> bool:
    return run is not None and run.get("status") in RECORDED_FINAL


def log(message: str) -> None:
    """A line of the supervisor's own log (its stdout), secrets redacted."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(f"{stamp} {redact(message)}", flush=True)


def _sig(st: os.stat_result) -> tuple:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class RunRecord:
    """run.json's content (`run`) and events.jsonl for one run folder. `processes` gives the processes'
    records at each write; `on_final` hears the run's end once it is recorded (the alert rules)."""

    def __init__(
        self,
        folder: Path,
        run: dict,
        processes: Callable[[], list[dict]],
        on_final: Callable[[RunStatus, str], None],
    ):
        self.dir = folder
        self.run_json = folder / "run.json"
        self.events_path = folder / "events.jsonl"
        self.run = run
        self.processes = processes
        self.on_final = on_final
        self.dirty = False
        self.written: tuple | None = None  # (inode, mtime, size) of the run.json written last
        self.next_check = 0.0

    def mark_dirty(self) -> None:
        """run.json is stale; it is written (fsync'd) once per loop turn, before the loop sleeps, so a
        burst of transitions (ready -> start the dependant) costs one write, not one each."""
        self.dirty = True

    def flush(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        self.run["processes"] = self.processes()
        # the signature of what we wrote, not a stat after the rename: a file deleted in between would
        # leave no signature and `check` would never write it again
        self.written = _sig(atomic_write_json(self.run_json, self.run))

    def write_now(self) -> None:
        self.dirty = True
        self.flush()

    def check(self) -> None:
        """A run.json that is missing or not the file written last was deleted or damaged behind our back:
        write it again from memory now, not at the next transition, which may be hours away."""
        now = time.monotonic()
        if now < self.next_check or self.written is None:
            return
        self.next_check = now + STATE_CHECK_S
        try:
            found = _sig(os.stat(self.run_json))
        except OSError:
            found = None
        if found == self.written:
            return
        self.write_now()
        what = "deleted" if found is None else "changed by another program"
        self.event("state", f"run.json was {what}; written again from the supervisor's state")

    def event(self, event: str, message: str, **fields) -> None:
        record = {"time": time.time(), "event": event, **fields, "message": redact(message)}
        append_jsonl(self.events_path, record)
        log(message)

    def process_state(self, proc, state: ProcState, message: str, **fields) -> None:
        """`proc` (a process.Proc) is now in `state`: run.json shows it, an event says why."""
        proc.state = state
        self.mark_dirty()
        self.event("process_state", message, process=proc.name, state=state, pid=proc.pid, **fields)

    def set_status(self, status: RunStatus, reason: str | None = None) -> None:
        if status in RECORDED_FINAL:
            self.record_final(status, reason or "")
            return
        self.run["status"] = status
        if reason is not None:
            self.run["reason"] = reason
        if status == RunStatus.RUNNING and not self.run.get("started_at"):
            self.run["started_at"] = time.time()
        self.write_now()  # run status changes are written at once
        text = f"run {status}" + (f": {reason}" if reason else "")
        self.event("run_status", text, status=status, reason=reason)

    def reserve_space(self) -> None:
        """Hold some disk space in the run folder, freed to record the run's end on a full disk."""
        with contextlib.suppress(OSError):
            with open_regular(self.dir / SPACE_RESERVE, "wb") as handle:
                handle.write(b"\0" * SPACE_RESERVE_BYTES)

    def record_final(self, status: RunStatus, reason: str) -> None:
        """The run's end, through record_final above (run.json and the run_status event), and our log."""
        with contextlib.suppress(OSError):
            (self.dir / SPACE_RESERVE).unlink()  # its space is what the final record is written with
        self.run["processes"] = self.processes()
        self.dirty = False
        text = redact(f"run {status}: {reason}")
        record_final(self.dir, self.run, status, reason, message=text)
        log(text)
        self.on_final(status, reason)

    def record_final_patiently(self, status: RunStatus, reason: str, retry_s: float, wait_s: float) -> None:
        """record_final, tried again every `retry_s` for up to `wait_s` while the folder refuses it (full
        beyond the reserve, read-only): only the supervisor knows why the run ended, and its processes are
        gone, so it stays until the folder takes the record rather than leave the run `lost` with the cause
        nowhere but its log. A folder that disappears ends the wait."""
        try:
            self.record_final(status, reason)
            return
        except Exception as exc:  # noqa: BLE001 - the folder is read-only or full beyond the reserve
            log(f"cannot record the run's end: {exc}; trying again every {retry_s:g}s")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.dir.is_dir():
            time.sleep(retry_s)
            try:
                self.record_final(status, reason)
            except Exception:  # noqa: BLE001 - still not writable
                continue
            log("recorded the run's end")
            return

    def job_changed(self, proc, launcher: str, words: str, fields: Mapping[str, Any]) -> None:
        """Its launcher reported a new state or node for `proc`'s job (`words`; the job's `fields`, from
        launchers.event_fields): run.json shows it, an event says so."""
        self.mark_dirty()
        self.event(launcher, f"{proc.name}: {words}", process=proc.name, **fields)
