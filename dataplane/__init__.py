"""The data plane: processes that may import torch (local Tinker server, tiny model builder, trainer)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """End a data-plane process whose work is done, without the interpreter's teardown.

    What a normal exit does for the program still happens: non-daemon threads are joined, atexit
    handlers run (logging.shutdown, W&B's teardown), stdout/stderr are flushed. What is skipped is
    freeing every module and object one by one, which with torch/transformers/tinker loaded costs
    0.6-1.2 s on a loaded 2-core machine: time that a stop or a failed run (the supervisor stops
    processes one after another) would otherwise spend waiting for a process that has finished.
    Only for `if __name__ == "__main__":` blocks: it never returns.
    """
    from hermes_rl.dataplane.compat import run_exit_hooks

    try:
        run_exit_hooks()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream must not keep us alive
                pass
        os._exit(code if isinstance(code, int) else 1)
