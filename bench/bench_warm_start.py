"""Warm starts of a run's processes (prints figures; not a test).

    .venv/bin/python bench/bench_warm_start.py [--repeat 3]

A supervised run of three processes that import what a local run's Tinker server, trainer and
environment import at start-up (the specs' `warm` lists from core.runs.training), each printing `ready`
once imported. Measured with HERMES_RL_WARM_START=0 (every process a fresh interpreter, the baseline) and
with warm starts (one warm server per run, the processes forks of it), in the same invocation:

- launch -> all three ready (wall), and the CPU of every process of the run at that moment (the warm
  server included);
- get_run of the running run (it proves each process's identity from /proc/PID/environ): CPU per call;
- an environment killed with SIGKILL -> ready again after its restart (wall) and the CPU of its new process.

Everything happens under a temporary $HERMES_HOME; the machine should be otherwise idle.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CHILD = """
import sys, time
for name in sys.argv[1:]:
    __import__(name)
print("ready", flush=True)
time.sleep(3600)
"""


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def _run_cpu(folder: str) -> float:
    """CPU of every live process carrying the run's marker (its processes and the warm server)."""
    needle = f"HERMES_RL_RUN_DIR={folder}".encode()
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
        except OSError:
            continue
        total += _cpu(int(entry))
    return total


def _wait(predicate, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError("the run did not get there in time")


def one_run(folder: Path, warm: bool) -> dict:
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
    from hermes_rl.core.runs.training import WARM_ENVIRONMENT, WARM_TINKER_LOCAL, WARM_TRAINER

    os.environ["HERMES_RL_WARM_START"] = "1" if warm else "0"
    kinds = {"tinker": WARM_TINKER_LOCAL, "trainer": WARM_TRAINER, "env": WARM_ENVIRONMENT}
    specs = [
        ProcessSpec(
            name=name,
            argv=[sys.executable, "-m", "bench_warm_child", *modules],
            cwd=str(folder),
            readiness=Readiness(kind="log", pattern=r"^ready", timeout_s=300.0),
            restart=RestartPolicy(mode="on_failure", max_restarts=1, backoff_s=0.0),
            warm=list(modules),
        )
        for name, modules in kinds.items()
    ]
    began = time.monotonic()
    run = runs.launch(specs, environment="bench", profile="local")
    run_id = run["run_id"]
    marker = str(run_dir(run_id))
    try:
        view = _wait(lambda: (r := runs.get_run(run_id, sample=False))["status"] == "running" and r)
        ready_s = time.monotonic() - began
        cpu = _run_cpu(marker)
        env = next(p for p in view["processes"] if p["name"] == "env")
        forked = (
            all(p.get("warm") for p in view["processes"]) if warm else not any(p.get("warm") for p in view["processes"])
        )
        assert forked, view["processes"]
        calls, began_cpu = 50, time.process_time()
        for _ in range(calls):  # what a dashboard or an agent's status check pays per look
            runs.get_run(run_id, sample=False)
        look_ms = (time.process_time() - began_cpu) / calls * 1000
        os.kill(env["pid"], signal.SIGKILL)
        killed = time.monotonic()

        def restarted():
            procs = {p["name"]: p for p in runs.get_run(run_id, sample=False)["processes"]}
            new = procs["env"]
            return new["pid"] != env["pid"] and new["state"] == "ready" and new

        new = _wait(restarted)
        restart_s = time.monotonic() - killed
        restart_cpu = _cpu(new["pid"])
    finally:
        runs.stop_run(run_id, wait=60)
    return {"ready_s": ready_s, "cpu_s": cpu, "look_ms": look_ms, "restart_s": restart_s, "restart_cpu_s": restart_cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    home = tempfile.mkdtemp(prefix="hermes-bench-warm-")
    os.environ["HERMES_HOME"] = home
    folder = Path(home) / "child"
    folder.mkdir()
    (folder / "bench_warm_child.py").write_text(CHILD)
    results: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.repeat):
        for warm in (False, True):  # interleaved: drift in the machine's load hits both alike
            results[warm].append(one_run(folder, warm))

    def median(warm: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[warm])

    print(
        "three processes importing what a local run's Tinker server, trainer and environment import; "
        f"median of {args.repeat}"
    )
    print(f"{'':44} {'fresh':>8} {'warm':>8} {'warm/fresh':>10}")
    for key, label in (
        ("ready_s", "launch -> all ready (s)"),
        ("cpu_s", "CPU of the run's processes then (s)"),
        ("look_ms", "get_run of the running run, CPU (ms)"),
        ("restart_s", "environment killed -> ready again (s)"),
        ("restart_cpu_s", "CPU of the restarted environment (s)"),
    ):
        cold, warm = median(False, key), median(True, key)
        print(f"{label:44} {cold:8.2f} {warm:8.2f} {warm / cold if cold else float('nan'):10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
