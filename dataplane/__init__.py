"""The data plane: processes that may import torch (local Tinker server, tiny model builder, trainer)."""

from __future__ import annotations

import os
import resource
import sys
from typing import NoReturn

from .compat import run_exit_hooks


def exit_now(code: int) -> NoReturn:
    """End a data-plane process whose work is done, without the interpreter's teardown.

    What a normal exit does for the program still happens: non-daemon threads are joined, atexit
    handlers run (logging.shutdown, W&B's teardown), stdout/stderr are flushed. What is skipped is
    freeing every module and object one by one, which with torch/transformers/tinker loaded costs
    0.6-1.2 s on a loaded 2-core machine: time that a stop or a failed run (the supervisor stops
    processes one after another) would otherwise spend waiting for a process that has finished.
    Only for `if __name__ == "__main__":` blocks: it never returns.
    """

    try:
        run_exit_hooks()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream must not keep us alive
                pass
        os._exit(code if isinstance(code, int) else 1)


MIN_OPEN_FILES = 256  # sockets to run-api, the Tinker server and environments, logs, model files, threads


def open_files_problem(minimum: int = MIN_OPEN_FILES) -> str | None:
    """Why this process cannot count on `minimum` open files, or None.

    Below it the process does not fail at once: every connection its HTTP clients open fails with
    EMFILE and is retried, for a minute, before a generic error. So it is the error, named, at start."""

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= minimum:
        return None
    shown_hard = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return (
        f"Too many open files (EMFILE) ahead: the open-file limit is {soft} (hard limit {shown_hard}), "
        f"below the {minimum} this process needs; raise it (ulimit -n {minimum}) and start again"
    )
