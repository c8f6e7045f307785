"""Find and end a run's processes, including grandchildren that left their process group.

Every child the supervisor starts carries `HERMES_RL_RUN_DIR=<run folder>` in its environment, and
its descendants inherit it. Reading each process's environment (through psutil) finds them even after
they called setsid() or were re-parented to init. Used by the supervisor's final sweep, the watchdog and
clients that stop a `lost` run. A process's identity is its pid with its start time: on Linux its start
in clock ticks since boot (exact), elsewhere its creation time (to a second).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

import psutil

from ..base.clock import in_future
from ..base.paths import same_file
from ..base.polling import poll_until

MARKER = "HERMES_RL_RUN_DIR"  # in every child's environment: the run folder
PROCESS_MARKER = "HERMES_RL_PROCESS"  # the spec name the child was started for
SUPERVISOR_MARKER = "HERMES_RL_SUPERVISOR_OF"  # in the supervisor's environment: the run folder
# create_time is wall-clock based (boot time + ticks): it may move by a second when the clock is
# adjusted, so identity is checked on start_ticks (ticks since boot, exact) when recorded.
CREATE_TIME_TOLERANCE = 1.0
_LINUX = sys.platform.startswith("linux")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _LINUX else 0
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


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


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (psutil.Error, ValueError):  # gone, no access, or not a pid at all
        return None


def _is_zombie(pid: int) -> bool:
    """Whether pid is a zombie, or gone: nothing that still runs."""
    try:
        return psutil.Process(pid).status() in _GONE
    except psutil.Error:
        return True


def _environ_of(proc: psutil.Process | None) -> dict[str, str]:
    """Its environment (empty when unreadable: another user's process, gone). psutil stops at an empty
    entry, as a warm fork's area is its own environment padded with NULs to the room its server kept
    (warm.room.ENV_ROOM, 64 KiB), not thousands of entries."""
    if proc is None:
        return {}
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def environ(pid: int) -> dict[bytes, bytes]:
    """A process's environment as bytes (as the kernel keeps it; empty when unreadable)."""
    return {os.fsencode(k): os.fsencode(v) for k, v in _environ_of(_process(pid)).items()}


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()).strip()[:300]
    except psutil.Error:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """Start time in clock ticks since boot (Linux; None elsewhere): with the pid, a process's identity.
    psutil gives it as boot time + ticks / CLK_TCK; the boot time is read on both sides of that, so that
    a clock adjusted in between (which moves the boot time) is read again rather than give wrong ticks."""
    if not _LINUX:
        return None
    try:
        for _ in range(3):
            boot = psutil.boot_time()
            created = psutil.Process(pid).create_time()
            if psutil.boot_time() == boot:
                return round((created - boot) * _CLOCK_TICKS)
    except (psutil.Error, ValueError, OSError):
        return None
    return None


def process_create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):  # gone, zombie, or no access: all mean "not ours to report"
        return None


def marker_matches(found: str | bytes | None, value: str | os.PathLike) -> bool:
    """Whether a marker read from a process's environment names `value`, a run folder: the same folder
    by file identity, however either side spelled the path (a symlinked or relative $HERMES_HOME)."""
    if found is None:
        return False
    found = os.fsencode(found)
    wanted = os.fsencode(str(value))
    if found == wanted:
        return True
    if not found.startswith(b"/"):
        return False  # a relative marker names nothing outside the process that wrote it
    return same_file(os.fsdecode(found), os.fsdecode(wanted))


def carries_marker(pid: int, name: str, value: str | os.PathLike) -> bool:
    """Whether the process's environment holds name=value (a marker only we set; a path compared as a
    file identity). Unreadable (another user's process, gone) means no."""
    return marker_matches(_environ_of(_process(pid)).get(name), value)


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
        started_as_recorded = (
            actual is not None and create_time is not None and abs(actual - float(create_time)) < CREATE_TIME_TOLERANCE
        )
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
    verdicts: dict[str, bool] = {}  # one identity check per distinct marker value in this scan
    pgid_set = {int(g) for g in pgids if g}
    if since is not None and in_future(since):
        since = None  # a creation time in the future proves nothing: every process would seem older
    skip = {os.getpid(), *exclude}
    found: list[Survivor] = []
    for pid in psutil.pids():
        if pid in skip:
            continue
        proc = _process(pid)
        env = _environ_of(proc)
        mark = env.get(MARKER)
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue
        if mark is not None and mark not in verdicts:
            verdicts[mark] = marker_matches(mark, run_dir)
        ours = verdicts[mark] if mark is not None else pgid in pgid_set
        if not ours or proc is None or _is_zombie(pid):
            continue
        created = process_create_time(pid)
        if since is not None and (created is None or created < since - CREATE_TIME_TOLERANCE):
            continue
        found.append(Survivor(pid, pgid, env.get(PROCESS_MARKER, ""), _cmdline(proc), created))
    return found


def marked_processes(name: str, value: str) -> list[Survivor]:
    """Live processes whose environment carries name=value: what a child started with a one-off
    marker left behind, even after setsid() and a double fork."""
    verdicts: dict[str, bool] = {}
    found = []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        proc = _process(pid)
        if proc is None:
            continue
        mark = _environ_of(proc).get(name)
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
        found.append(Survivor(pid, pgid, "", _cmdline(proc), process_create_time(pid)))
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


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is pgid."""
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) != pgid:
                continue
        except OSError:
            continue
        if not _is_zombie(pid):
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
