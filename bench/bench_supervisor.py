"""Supervisor and run-listing figures (prints them; not a test).

    .venv/bin/python bench/bench_supervisor.py [--repeat 3] [--runs 1000]

1. launch -> all ready, 4-process pipeline (api http -> tinker log -> trainer http -> env log), each
   process ready after a known delay. Baseline in the same run: a minimal launcher that starts the same
   four commands in the same order and detects readiness ideally (tight 2 ms HTTP polling, blocking
   readline on a pipe). Supervisor overhead = supervised time - baseline time; also per transition:
   detection latency (probe saw it - process says it became ready) and start latency (dependant
   started - dependency ready).
2. The supervisor at rest: RSS and CPU used by supervisor + watchdog while a run idles.
3. list_runs over N synthetic run folders: cold (empty cache), warm, and a baseline that reads every
   run.json and every whole metrics.jsonl (what a naive lister does).
Everything happens under a temporary $HERMES_HOME.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import atomic_write_json, read_json
from hermes_rl.core.base.paths import run_dir, runs_dir
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, free_ports

ROOT = Path(__file__).resolve().parent.parent

PY = sys.executable
PROCS = ROOT / "tests" / "procs"
DELAYS = {"api": 0.30, "tinker": 0.20, "trainer": 0.30, "env": 0.20}
STAMP = re.compile(r"ready at ([0-9.]+)")


def pipeline_specs() -> list[ProcessSpec]:
    http = lambda name, deps: ProcessSpec(  # noqa: E731
        name=name,
        argv=[PY, str(PROCS / "http_server.py"), "--port", f"{{port:{name}}}", "--delay", str(DELAYS[name])],
        readiness=Readiness("http", f"http://127.0.0.1:{{port:{name}}}/health", timeout_s=30),
        port=name,
        depends_on=deps,
    )
    log = lambda name, deps: ProcessSpec(  # noqa: E731
        name=name,
        argv=[PY, str(PROCS / "ready.py"), "--delay", str(DELAYS[name])],
        readiness=Readiness("log", pattern=r"^ready at", timeout_s=30),
        depends_on=deps,
    )
    return [
        http("api", []),
        log("tinker", [("api", "ready")]),
        http("trainer", [("tinker", "ready")]),
        log("env", [("trainer", "ready")]),
    ]


def wait_running(run_id: str, timeout: float = 60.0) -> dict:
    path = run_dir(run_id) / "run.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = read_json(path)
        if run["status"] != "starting":
            return run
        time.sleep(0.005)
    raise SystemExit(f"run {run_id} did not start within {timeout}s")


def supervised_once() -> dict:
    began = time.time()
    run = runs.launch(pipeline_specs(), environment="bench", profile="local")
    launched = time.time() - began
    run = wait_running(run["run_id"])
    if run["status"] != "running":
        raise SystemExit(f"bench run ended {run['status']}: {run.get('reason')}")
    procs = {p["name"]: p for p in run["processes"]}
    stamps = {}
    for name, proc in procs.items():
        match = STAMP.search(Path(proc["log"]).read_text())
        stamps[name] = float(match.group(1))
    order = ["api", "tinker", "trainer", "env"]
    detection = [procs[n]["ready_at"] - stamps[n] for n in order]
    start_latency = [procs[b]["started_at"] - procs[a]["ready_at"] for a, b in zip(order, order[1:])]
    all_ready = max(p["ready_at"] for p in procs.values()) - began
    sup = run["supervisor"]["pid"]
    result = {
        "launch_s": launched,
        "all_ready_s": all_ready,
        "detection": detection,
        "start_latency": start_latency,
        "run_id": run["run_id"],
        "supervisor_pid": sup,
        "watchdog_pid": run["watchdog"]["pid"],
    }
    return result


def baseline_once() -> float:
    """The same four processes, started in order by a minimal launcher with ideal readiness detection."""
    began = time.time()
    ports = free_ports(["api", "trainer"])
    children = []
    try:
        for name in ["api", "tinker", "trainer", "env"]:
            if name in ports:
                child = subprocess.Popen(
                    [PY, str(PROCS / "http_server.py"), "--port", str(ports[name]), "--delay", str(DELAYS[name])],
                    stdout=subprocess.DEVNULL,
                )
                children.append(child)
                while True:
                    conn = http.client.HTTPConnection("127.0.0.1", ports[name], timeout=1)
                    try:
                        conn.request("GET", "/health")
                        if conn.getresponse().status == 200:
                            break
                    except OSError:
                        pass
                    finally:
                        conn.close()
                    time.sleep(0.002)
            else:
                child = subprocess.Popen(
                    [PY, str(PROCS / "ready.py"), "--delay", str(DELAYS[name])], stdout=subprocess.PIPE
                )
                children.append(child)
                while not child.stdout.readline().startswith(b"ready"):
                    pass
        return time.time() - began
    finally:
        for child in children:
            child.kill()
            child.wait()


def idle_cost(pids: list[int], seconds: float = 3.0) -> tuple[float, float]:
    import psutil

    procs = [psutil.Process(pid) for pid in pids]
    before = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    time.sleep(seconds)
    after = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    rss = sum(p.memory_info().rss for p in procs)
    return (after - before) / seconds * 100.0, rss / 2**20


def bench_pipeline(repeat: int) -> None:
    delays = ", ".join(f"{k} {v:.2f}s" for k, v in DELAYS.items())
    print(f"== launch -> all ready, 4-process pipeline (delays {delays}; critical path {sum(DELAYS.values()):.2f}s)")
    sup, base = [], []
    for i in range(repeat):
        base.append(baseline_once())
        result = supervised_once()
        sup.append(result)
        if i == repeat - 1:
            cpu, rss = idle_cost([result["supervisor_pid"], result["watchdog_pid"]])
            calls = []
            for _ in range(20):
                began = time.perf_counter()
                runs.get_run(result["run_id"])
                calls.append(time.perf_counter() - began)
            get_run_ms = statistics.median(calls) * 1000
            began = time.perf_counter()
            stopped = runs.stop_run(result["run_id"])
            stop_ms = (time.perf_counter() - began) * 1000
            assert stopped["status"] == "stopped"
            continue
        runs.stop_run(result["run_id"])
    med = statistics.median
    all_ready = med(r["all_ready_s"] for r in sup)
    base_t = med(base)
    print(
        f"  supervised launch() returned after      {med(x['launch_s'] for x in sup) * 1000:7.1f} ms "
        "(supervisor registered)"
    )
    print(f"  supervised launch -> all 4 ready         {all_ready * 1000:7.1f} ms (median of {repeat})")
    print(f"  baseline (direct, ideal detection)       {base_t * 1000:7.1f} ms")
    print(
        f"  supervisor overhead vs baseline          {(all_ready - base_t) * 1000:7.1f} ms "
        f"(ratio {all_ready / base_t:.2f}x)"
    )
    print(
        f"  time beyond the delays themselves        {(all_ready - sum(DELAYS.values())) * 1000:7.1f} ms supervised, "
        f"{(base_t - sum(DELAYS.values())) * 1000:.1f} ms baseline (python start-up of 4 children is in both)"
    )
    detection = [d for r in sup for d in r["detection"]]
    starts = [d for r in sup for d in r["start_latency"]]
    print(
        f"  readiness detection latency per process  median {med(detection) * 1000:.1f} ms, "
        f"max {max(detection) * 1000:.1f} ms"
    )
    print(
        f"  dependant start latency after ready      median {med(starts) * 1000:.1f} ms, "
        f"max {max(starts) * 1000:.1f} ms"
    )
    print(f"  supervisor + watchdog at rest            {cpu:.2f}% CPU, {rss:.1f} MiB RSS together")
    print(f"  get_run() with psutil sampling, 4 procs  {get_run_ms:.1f} ms (median of 20)")
    print(f"  stop_run() of the 4-process run          {stop_ms:.0f} ms (reverse order, SIGTERM each group)")


def make_synthetic_runs(count: int, rows: int) -> None:
    root = runs_dir()
    root.mkdir(parents=True, exist_ok=True)
    now = time.time()
    processes = [
        {
            "name": n,
            "pid": 100000 + i,
            "create_time": now,
            "pgid": 100000 + i,
            "argv_redacted": [PY, "-m", n],
            "state": "stopped",
            "started_at": now,
            "ready_at": now,
            "ended_at": now,
            "exit_code": -15,
            "restarts": 0,
            "log": f"/tmp/{n}.log",
            "port": None,
            "required": True,
            "completes_run": False,
            "depends_on": [],
            "readiness": "http",
        }
        for i, n in enumerate(["api", "model", "tinker", "trainer", "env"])
    ]
    metric_rows = "".join(
        json.dumps(
            {
                "step": s,
                "time": now + s,
                "train/loss": 1.0 / s,
                "reward/mean": s / rows,
                "logprobs/mean": -1.2,
                "advantages/std": 0.5,
                "timing/step_s": 1.5,
            }
        )
        + "\n"
        for s in range(1, rows + 1)
    )
    for i in range(count):
        run_id = f"{i:08x}"
        folder = root / run_id
        folder.mkdir()
        atomic_write_json(
            folder / "run.json",
            {
                "run_id": run_id,
                "environment": "toy_addition",
                "profile": "local",
                "status": ("completed", "failed", "stopped")[i % 3],
                "created_at": now - i,
                "started_at": now - i,
                "ended_at": now - i + 60,
                "reason": "trainer finished",
                "supervisor": {"pid": 99999999, "create_time": 0},
                "ports": {"api": 8000, "inference": 8001, "tinker": 8002},
                "processes": processes,
                "total_steps": rows,
                "wandb": {"mode": "offline", "project": "p", "run_name": "r", "url": None},
            },
        )
        (folder / "metrics.jsonl").write_text(metric_rows)


def naive_list() -> list[dict]:
    """Baseline: read every run.json and every whole metrics.jsonl."""
    from hermes_rl.core.base.fsutil import read_jsonl

    out = []
    for entry in os.scandir(runs_dir()):
        run = read_json(Path(entry.path) / "run.json")
        rows = read_jsonl(Path(entry.path) / "metrics.jsonl")
        out.append((run["created_at"], run["run_id"], rows[-1] if rows else None))
    out.sort(reverse=True)
    return out


def bench_list(count: int, rows: int) -> None:
    print(f"== list_runs over {count} run folders ({rows} metric rows each)")
    began = time.perf_counter()
    make_synthetic_runs(count, rows)
    print(f"  (made them in {time.perf_counter() - began:.1f}s)")
    runs.store._LIST_CACHE.clear()
    began = time.perf_counter()
    listed = runs.list_runs()
    cold = time.perf_counter() - began
    assert len(listed) == count and listed[0]["step"] == rows
    warm_times = []
    for _ in range(5):
        began = time.perf_counter()
        runs.list_runs()
        warm_times.append(time.perf_counter() - began)
    began = time.perf_counter()
    naive_list()
    naive = time.perf_counter() - began
    warm = statistics.median(warm_times)
    print(f"  cold (empty cache; files in page cache)  {cold * 1000:7.1f} ms")
    print(f"  warm (mtime/size cache)                  {warm * 1000:7.1f} ms (median of 5)")
    print(
        f"  baseline: read every run.json + whole metrics.jsonl {naive * 1000:7.1f} ms "
        f"(cold list {naive / cold:.1f}x faster, warm {naive / warm:.1f}x faster)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=300)
    args = parser.parse_args()
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="hermes-bench-")  # never the user's ~/.hermes
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, "
        f"HERMES_HOME={os.environ['HERMES_HOME']}"
    )
    try:
        if args.repeat:
            bench_pipeline(args.repeat)
        shutil.rmtree(runs_dir(), ignore_errors=True)
        if args.runs:
            bench_list(args.runs, args.rows)
    finally:
        shutil.rmtree(os.environ["HERMES_HOME"], ignore_errors=True)


if __name__ == "__main__":
    main()
