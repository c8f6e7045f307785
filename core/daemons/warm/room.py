"""The room a warm server keeps for its children: each fork writes its own command line and environment
over the server's (what /proc/PID/cmdline and /proc/PID/environ read), so `ps`, the run's environment marker
and every tool that reads them see what a cold start would show. Shared by the server (warm.server), which
writes it, and the warm base (warm.base) and clients (warm.client), which check that an environment fits.
Linux only by nature: the areas are found in /proc/self/stat (fields 48–51, which no library exposes)."""

from __future__ import annotations

import ctypes
import os

# The server starts with this much spare room in its command line and environment, so that a child can
# write its own over them (what /proc/PID/cmdline and /proc/PID/environ read).
ARGV_ROOM = 4096
ENV_ROOM = 64 * 1024
ROOM_ENV = "HERMES_RL_WARM_ROOM"


def _memory_areas() -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((arg_start, arg_end), (env_start, env_end)) of this process, from /proc/self/stat (Linux >= 3.5)."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        # after the command's closing parenthesis the fields start at number 3; these are 48–51
        arg_start, arg_end, env_start, env_end = (int(f) for f in fields[45:49])
    except (OSError, ValueError, IndexError):
        return None
    if not (0 < arg_start < arg_end and 0 < env_start < env_end):
        return None
    return (arg_start, arg_end), (env_start, env_end)


def env_room() -> int:
    """Bytes of environment a child of this process can show as its own."""
    areas = _memory_areas()
    return 0 if areas is None else areas[1][1] - areas[1][0]


def env_block(env: dict[str, str]) -> bytes:
    return b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())


def show_as(argv: list[str], env: dict[str, str]) -> None:
    """Write argv and env over this process's own command line and environment areas (padded with NULs),
    as setproctitle does for the command line. The C environment no longer points there: os.environ was
    replaced, by putenv, before this."""
    areas = _memory_areas()
    if areas is None:
        return
    (arg_start, arg_end), (env_start, env_end) = areas
    block = env_block(env)
    if len(block) < env_end - env_start:  # the client checked; a block that does not fit is not written
        ctypes.memmove(env_start, block.ljust(env_end - env_start, b"\0"), env_end - env_start)
    line = b"".join(os.fsencode(a) + b"\0" for a in argv)[: arg_end - arg_start - 1]
    ctypes.memmove(arg_start, line.ljust(arg_end - arg_start, b"\0"), arg_end - arg_start)
