"""Launch and stop latency of an environment worker: a Slurm batch job against a local process group
(prints figures; not a test). Needs a Slurm cluster (`sudo bash scripts/slurm_local.sh` makes a one-node one).

    .venv/bin/python bench/bench_slurm_launch.py [--repeat 10]

Each launcher starts the same program (tests/procs/ready.py, which prints its wall-clock time at start)
through core.daemons.launchers (local, slurm), as the supervisor does:
- launch: from the call that starts it to the program's own first line (its time stamp);
- stop: from terminate() to the launcher reporting nothing left (the process group empty; the job gone
  from squeue);
- end seen: from the program's end to the launcher's poll() returning its exit code (squeue is asked
  every SLURM_STEADY_POLL_S while all jobs run; a local exit arrives by SIGCHLD).
Everything happens under a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hermes_rl.core.daemons.launchers.local import start_local
from hermes_rl.core.daemons.launchers.slurm import SLURM_POLL_S, SLURM_STEADY_POLL_S, SlurmSettings, SlurmTracker

ROOT = Path(__file__).resolve().parent.parent
READY = str(ROOT / "tests" / "procs" / "ready.py")
CRASH = str(ROOT / "tests" / "procs" / "crash.py")


def _stamp(log: Path, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else ():
            if line.startswith("ready at "):
                return float(line.split()[2])
        time.sleep(0.005)
    raise SystemExit(f"no ready line in {log} within {timeout:g}s")


def _wait(predicate, timeout: float = 60.0) -> float:
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise SystemExit("timed out")
        time.sleep(0.005)
    return time.monotonic() - began


def one(kind: str, folder: Path, tracker: SlurmTracker, index: int) -> dict[str, float]:
    log = folder / f"{kind}-{index}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    began = time.time()
    if kind == "local":
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        handle = start_local([sys.executable, READY], cwd=str(folder), env=env, log_fd=fd)
        os.close(fd)
    else:
        handle = tracker.submit(
            f"bench-{index}", [sys.executable, READY], cwd=str(folder), env=env, log=log, settings=SlurmSettings()
        )
    launch = _stamp(log) - began
    t0 = time.monotonic()
    handle.terminate()
    _wait(lambda: handle.poll() is not None and not handle.leftovers())
    stop = time.monotonic() - t0
    # End seen: a program that exits by itself after 1 s.
    log2 = folder / f"{kind}-{index}-end.log"
    argv = [sys.executable, CRASH, "--after", "1.0", "--code", "0"]
    if kind == "local":
        fd = os.open(log2, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        handle = start_local(argv, cwd=str(folder), env=env, log_fd=fd)
        os.close(fd)
    else:
        handle = tracker.submit(
            f"bench-end-{index}", argv, cwd=str(folder), env=env, log=log2, settings=SlurmSettings()
        )
    _wait(lambda: "crashing in" in (log2.read_text() if log2.exists() else ""))
    started = time.monotonic()
    _wait(lambda: handle.poll() is not None)
    end_seen = time.monotonic() - started - 1.0
    return {"launch": launch, "stop": stop, "end_seen": max(0.0, end_seen)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        folder = Path(tmp)
        tracker = SlurmTracker("bench", folder)
        results: dict[str, list[dict]] = {"local": [], "slurm": []}
        for index in range(args.repeat):
            for kind in results:
                results[kind].append(one(kind, folder, tracker, index))
    print(
        f"{args.repeat} launches each (median / max, seconds); squeue polled every {SLURM_POLL_S:g} s "
        f"(every {SLURM_STEADY_POLL_S:g} s while all jobs run)"
    )
    for measure in ("launch", "stop", "end_seen"):
        row = []
        for kind, rows in results.items():
            values = [r[measure] for r in rows]
            row.append(f"{kind} {statistics.median(values):.3f} / {max(values):.3f}")
        local = statistics.median(r[measure] for r in results["local"])
        slurm = statistics.median(r[measure] for r in results["slurm"])
        ratio = f"  (slurm {slurm / local:.0f}x local)" if local > 0 else ""
        print(f"  {measure:9s} " + "   ".join(row) + ratio)


if __name__ == "__main__":
    main()
