"""Start → all workers ready, and stop → nothing left, for N workers on the local, Slurm and Ray launchers
in one run (prints figures; not a test).

    .venv/bin/python bench/bench_launch.py [--workers 4] [--repeat 3]

Each launcher starts N copies of the same program (tests/procs/ready.py, which prints its wall-clock time
at start) through the launcher registry, as the supervisor does (`launchers.get(NAME).start(…)` with the
launcher's tracker):
- ready: from the first start call to the last worker's own first line (its time stamp);
- stop: from terminate() of every worker to the launcher reporting nothing left of any.
Slurm needs a cluster (`sudo bash scripts/slurm_local.sh` makes a one-node one); Ray gets a one-node
cluster this script starts (`ray start --head` on loopback, its own ports and folder, ended after). A
launcher that cannot run here is reported as such. Everything else happens under a temporary folder and
a temporary HERMES_HOME. SkyPilot is not measured: no cloud or Kubernetes cluster is reachable here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY = str(ROOT / "tests" / "procs" / "ready.py")


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def ray_head():
    """A one-node Ray cluster's dashboard address, or None when Ray is missing or does not come up."""
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        yield None
        return
    folder = tempfile.mkdtemp(prefix="hrl-bray-", dir="/tmp")
    dashboard = _port()
    argv = [str(ray), "start", "--head", "--block", "--disable-usage-stats", "--num-cpus=8"]
    argv += ["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"]
    argv += [f"--port={_port()}", f"--ray-client-server-port={_port()}", f"--dashboard-agent-listen-port={_port()}"]
    argv += [f"--temp-dir={folder}"]
    head = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        from hermes_rl.core.daemons.launchers.ray_jobs import cluster_nodes

        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and head.poll() is None:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as answer:
                    if answer.status == 200 and cluster_nodes(address):
                        break
            time.sleep(1)
        else:
            yield None
            return
        yield address
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        found = subprocess.run(["pgrep", "-f", folder], capture_output=True, text=True).stdout.split()
        for pid in found:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def _stamp(log: Path, timeout: float = 180.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else ():
            if line.startswith("ready at "):
                return float(line.split()[2])
        time.sleep(0.01)
    raise SystemExit(f"no ready line in {log} within {timeout:g}s")


def one_round(name: str, folder: Path, workers: int, index: int) -> dict[str, float]:
    from hermes_rl.core.daemons import launchers

    launcher = launchers.get(name)
    run_id = f"b{index:03d}{name[:3]}"
    tracker = launcher.tracker(run_id, folder)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    handles, logs = [], []
    began = time.time()
    for w in range(workers):
        log = folder / f"{name}-{index}-{w}.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            handle = launcher.start(
                f"env-{w + 1}",
                [sys.executable, READY],
                cwd=str(folder),
                env=env,
                log_fd=fd,
                log=log,
                settings={},
                tracker=tracker,
            )
        finally:
            os.close(fd)
        handles.append(handle)
        logs.append(log)
    ready = max(_stamp(log) for log in logs) - began
    t0 = time.monotonic()
    for handle in handles:
        handle.terminate()
    deadline = time.monotonic() + 120
    while not all(h.poll() is not None and not h.leftovers() for h in handles):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: workers still there 120 s after terminate()")
        time.sleep(0.01)
    return {"ready": ready, "stop": time.monotonic() - t0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-launch-home-")
    os.environ["HERMES_HOME"] = home
    (Path(home) / "rl").mkdir(parents=True)
    results: dict[str, list[dict] | str] = {}
    with ray_head() as ray_address, tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        if ray_address:
            (Path(home) / "rl" / "ray.yaml").write_text(f"address: {ray_address}\n")
        slurm_up = shutil.which("sinfo") and subprocess.run(["sinfo"], capture_output=True).returncode == 0
        for name in ("local", "slurm", "ray"):
            if name == "slurm" and not slurm_up:
                results[name] = "no Slurm cluster (sudo bash scripts/slurm_local.sh)"
                continue
            if name == "ray" and not ray_address:
                results[name] = "no Ray cluster (ray not installed, or `ray start --head` did not come up)"
                continue
            results[name] = [one_round(name, Path(tmp), args.workers, i) for i in range(args.repeat)]
    shutil.rmtree(home, ignore_errors=True)
    print(f"{args.workers} workers per launcher, {args.repeat} rounds (median / max, seconds)")
    local = results["local"]
    for name, rows in results.items():
        if isinstance(rows, str):
            print(f"  {name:6s} not measured: {rows}")
            continue
        cells = []
        for measure in ("ready", "stop"):
            values = [r[measure] for r in rows]
            ratio = ""
            if name != "local" and isinstance(local, list):
                base = statistics.median(r[measure] for r in local)
                ratio = f" ({statistics.median(values) / base:.0f}x local)" if base > 0 else ""
            cells.append(f"{measure} {statistics.median(values):.2f} / {max(values):.2f}{ratio}")
        print(f"  {name:6s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
