"""Find and end a run's processes, including grandchildren that left their process group.

Every child the supervisor starts carries `HERMES_RL_RUN_DIR=<run folder>` in its environment, and
its descendants inherit it. Reading /proc/<pid>/environ finds them even after they called setsid()
or were re-parented to init. Used by the supervisor's final sweep, the watchdog and clients that
stop a `lost` run. Linux only (like PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from ..base.clock import in_future
from ..base.paths import same_file
from ..base.polling import poll_until

MARKER = "HERMES_RL_RUN_DIR"  # in every child's environment: the run folder
PROCESS_MARKER = "HERMES_RL_PROCESS"  # the spec name the child was started for
SUPERVISOR_MARKER = "HERMES_RL_SUPERVISOR_OF"  # in the supervisor's environment: the run folder
# create_time is wall-clock based (boot time + ticks): it may move by a second when the clock is
# adjusted, so identity is checked on start_ticks (ticks since boot, exact) when recorded.
CREATE_TIME_TOLERANCE = 1.0


@dataclass
class Survivor:
    pid: int
    pgid: int | None
    name: str  # the spec name from the environment marker, "" if unknown
    cmdline: str
    create_time: float | None

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "process": self.name,
            "cmdline": self.cmdline,
            "create_time": self.create_time,
        }


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return True
    # The state follows the parenthesised command name, which may itself contain spaces or ')'.
    tail = stat[stat.rfind(b")") + 2 :]
    return tail[:1] in (b"Z", b"X")


def _environ(pid: int) -> dict[bytes, bytes]:
    raw = _read(f"/proc/{pid}/environ")
    if not raw:
        return {}
    out = {}
    # An empty entry ends the block (as for psutil): a warm fork's area is its own environment padded
    # with NULs to the room its server kept (warm.room.ENV_ROOM, 64 KiB), not thousands of entries.
    for item in raw.split(b"\0\0", 1)[0].split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key] = value
    return out


def process_start_ticks(pid: int) -> int | None:
    """Start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, a process's identity."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (state); starttime is field 22
    except (IndexError, ValueError):
        return None


def process_create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, zombie, or no access: all mean "not ours to report"
        return None


def marker_matches(found: bytes | None, value: str | os.PathLike) -> bool:
    """Whether a marker read from a process's environment names `value`, a run folder: the same folder
    by file identity, however either side spelled the path (a symlinked or relative $HERMES_HOME)."""
    if found is None:
        return False
    wanted = os.fsencode(str(value))
    if found == wanted:
        return True
    if not found.startswith(b"/"):
        return False  # a relative marker names nothing outside the process that wrote it
    return same_file(os.fsdecode(found), os.fsdecode(wanted))


def carries_marker(pid: int, name: str, value: str | os.PathLike) -> bool:
    """Whether the process's environment holds name=value (a marker only we set; a path compared as a
    file identity). Unreadable (another user's process, gone) means no."""
    return marker_matches(_environ(pid).get(name.encode()), value)


def is_same_process(
    pid: object,
    create_time: object,
    start_ticks: object = None,
    *,
    marker: tuple[str, str | os.PathLike] | None = None,
) -> bool:
    """Whether pid is alive (not a zombie) and proven to be the process recorded: its start time
    (start_ticks, else create_time) matches and, with `marker` = (name, value), its environment carries
    that marker. A missing or malformed identity field proves nothing: the answer is then False, so a
    pid reused after a reboot is never taken (or signalled) as ours."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if isinstance(start_ticks, bool) or not isinstance(start_ticks, (int, type(None))):
        return False
    if isinstance(create_time, bool) or not isinstance(create_time, (int, float, type(None))):
        return False
    if start_ticks is None and create_time is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _is_zombie(pid):
        return False
    if start_ticks is not None:
        started_as_recorded = process_start_ticks(pid) == start_ticks
    else:
        actual = process_create_time(pid)
        started_as_recorded = actual is not None and abs(actual - float(create_time)) < CREATE_TIME_TOLERANCE
    if not started_as_recorded:
        return False
    return marker is None or carries_marker(pid, *marker)


def find_run_processes(
    run_dir: str | os.PathLike,
    pgids: list[int] | tuple[int, ...] = (),
    exclude: tuple[int, ...] = (),
    since: float | None = None,
) -> list[Survivor]:
    """Live processes that carry the run's marker and started after `since` (the run's creation), or
    sit in one of `pgids`, carry no marker and started after `since`. Only the supervisor and its
    watchdog, which know their groups are live, pass `pgids`: a pgid read back from a state file
    proves nothing (after a reboot it may be anyone's)."""
    marker = MARKER.encode()
    verdicts: dict[bytes, bool] = {}  # one identity check per distinct marker value in this scan
    pgid_set = {int(g) for g in pgids if g}
    if since is not None and in_future(since):
        since = None  # a creation time in the future proves nothing: every process would seem older
    skip = {os.getpid(), *exclude}
    found: list[Survivor] = []
    for pid in _all_pids():
        if pid in skip:
            continue
        env = _environ(pid)
        mark = env.get(marker)
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue
        if mark is not None and mark not in verdicts:
            verdicts[mark] = marker_matches(mark, run_dir)
        ours = verdicts[mark] if mark is not None else pgid in pgid_set
        if not ours or _is_zombie(pid):
            continue
        created = process_create_time(pid)
        if since is not None and (created is None or created < since - CREATE_TIME_TOLERANCE):
            continue
        cmd = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").strip()
        found.append(
            Survivor(
                pid=pid,
                pgid=pgid,
                name=env.get(PROCESS_MARKER.encode(), b"").decode(errors="replace"),
                cmdline=cmd.decode(errors="replace")[:300],
                create_time=created,
            )
        )
    return found


def marked_processes(name: str, value: str) -> list[Survivor]:
    """Live processes whose environment carries name=value: what a child started with a one-off
    marker left behind, even after setsid() and a double fork."""
    key = name.encode()
    verdicts: dict[bytes, bool] = {}
    found = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        mark = _environ(pid).get(key)
        if mark is None:
            continue
        if mark not in verdicts:
            verdicts[mark] = marker_matches(mark, value)
        if not verdicts[mark] or _is_zombie(pid):
            continue
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue
        cmd = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").strip()
        found.append(Survivor(pid, pgid, "", cmd.decode(errors="replace")[:300], process_create_time(pid)))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def terminate(survivors: list[Survivor], timeout: float = 5.0) -> dict:
    """SIGTERM each, SIGKILL whatever is left after `timeout`. Returns {"terminated": n, "killed": n}."""
    pending = []
    for proc in survivors:
        if signal_process(proc.pid, signal.SIGTERM):
            pending.append(proc)

    def all_ended() -> bool:
        nonlocal pending
        pending = [p for p in pending if _alive(p.pid)]
        return not pending

    poll_until(all_ended, timeout, cap=0.2)
    killed = 0
    for proc in pending:
        if _alive(proc.pid):
            try:
                os.kill(proc.pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return {"terminated": len(survivors) - killed, "killed": killed}


def group_alive(pgid: int | None) -> bool:
    """Whether the process group has a live member. Zombies do not count: an orphan's zombie waits for
    init to reap it, which some container inits do late or never."""
    if not pgid:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


def _all_pids() -> list[int]:
    """Every pid in /proc (empty when /proc cannot be read)."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is pgid, from /proc/<pid>/stat."""
    members = []
    for pid in _all_pids():
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        # fields[0] is field 3 (state), fields[2] is field 5 (pgrp)
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            members.append(pid)
    return members


# A stopped process (SIGSTOP, a debugger, Ctrl-Z) acts on a terminating signal only once continued:
# follow it with SIGCONT, as systemd does, or a frozen process waits out its whole stop timeout.
_NEEDS_CONT = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def signal_group(pgid: int | None, sig: int) -> bool:
    if not pgid:
        return False
    try:
        os.killpg(pgid, sig)
        if sig in _NEEDS_CONT:
            os.killpg(pgid, signal.SIGCONT)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_process(pid: int, sig: int) -> bool:
    """Like signal_group, for one process."""
    try:
        os.kill(pid, sig)
        if sig in _NEEDS_CONT:
            os.kill(pid, signal.SIGCONT)
        return True
    except (ProcessLookupError, PermissionError):
        return False
