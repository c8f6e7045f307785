"""Where the test suite's time goes (prints figures; not a test).

    .venv/bin/python bench/bench_suite.py [pytest arguments…]     e.g.  -n 4   or   -m fast

Runs `python -m pytest -q --durations=30 …` once and prints its wall time, the CPU time of pytest and
of everything it started (supervisors and watchdogs detach from pytest, so this process becomes a
child subreaper and reaps them too: their CPU is counted), CPU/wall, the 30 slowest test phases and
the pass/fail line. The environment is the one scripts/test.sh sets (offline hubs, W&B offline).
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def main(argv: list[str]) -> int:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    counted_orphans = become_subreaper()
    started = time.monotonic()
    pytest = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "--durations=30", "-p", "no:cacheprovider", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        for line in pytest.stdout:
            lines.append(line)
            if re.search(r"\b(FAILED|ERROR)\b", line):
                print(line, end="", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # Reap pytest and, as a subreaper, every orphan it leaves (detached supervisors, watchdogs).
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == pytest.pid:
            status = os.waitstatus_to_exitcode(code)
            pytest.returncode = status
            wall = time.monotonic() - started
            if not counted_orphans:
                break
    reader.join(5)
    # Orphans still running after pytest ended (none expected) are not waited for past this point.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    output = "".join(lines)
    durations = re.search(r"=+ slowest 30 durations =+\n(.*?)(?:\n\n|\n=)", output, re.S)
    summary = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    print(f"pytest {' '.join(argv) or '(no arguments)'}")
    print(f"wall time            {wall:8.1f} s")
    print(
        f"CPU time             {cpu:8.1f} s  (user {usage.ru_utime:.1f} s, sys {usage.ru_stime:.1f} s; "
        f"{'pytest and every process it started' if counted_orphans else 'pytest and its waited-for children'})"
    )
    print(f"CPU / wall           {cpu / wall:8.2f}  on {os.cpu_count()} cores")
    print(f"peak RSS of one child {usage.ru_maxrss / 1024:7.0f} MB")
    if durations:
        print("\nthe 30 slowest test phases:")
        print(durations.group(1).rstrip())
    print("\n" + (summary[-1].strip() if summary else "(no summary line)"))
    return status if status is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
