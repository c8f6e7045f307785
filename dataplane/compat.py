"""The private interpreter APIs the data plane relies on, in one place (tests/test_dataplane_compat.py
fails loudly when a Python release changes them)."""

from __future__ import annotations

import atexit
import threading


def run_exit_hooks() -> None:
    """What a normal interpreter exit does for the program before it frees modules: the first two steps
    of Py_FinalizeEx, in its order. There is no public API for either.

    threading._shutdown: threading's own exit hooks (concurrent.futures tells its workers to end there),
    then the join of every non-daemon thread. atexit._run_exitfuncs: the atexit handlers, last registered
    first (logging.shutdown, W&B's teardown)."""
    threading._shutdown()
    atexit._run_exitfuncs()
