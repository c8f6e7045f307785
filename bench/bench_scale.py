"""Scale: thousands of runs and a million-step run cost what one screen needs (issue #45).

    .venv/bin/python bench/bench_scale.py [--runs 10000] [--rows 1000000] [--keep DIR]

Builds, in a temporary $HERMES_HOME, `--runs` finished runs (copies of one run's files as a 109-step
toy run leaves them: run.json, metrics.jsonl, env_metrics.jsonl; ids, dates, environments and sweeps
varied) and one run of `--rows` trainer steps (a trainer row and an environment row per step, an eval
every 10 steps). Then, each from a fresh process (`hermes-rl ...`) as a user runs it, it prints every
figure beside its goal and the load average:

- `hermes-rl runs` with the summary index cold (deleted) and warm, and filtered (`--status`, `--env`);
- `hermes-rl results` and `hermes-rl metrics --format csv` of the long run (wall time and peak RSS);
- the dashboard (headless) over all the runs: first listing, idle CPU, a cursor move in the runs pane;
- the dashboard (headless) opening the long run: seconds until its metrics pane shows them, peak RSS;
  and what it reads on opening the long run (RunMetrics: a downsampled history from the run's
  digest, .metrics_digest.json, and the last rows whole), time and RSS; `results` with the digest
  deleted first (built once) and then warm.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERMES = str(Path(sys.executable).with_name("hermes-rl"))
TEMPLATE_STEPS = 109
ENVIRONMENTS = ("toy_addition", "gsm8k", "countdown", "reasoning_gym")


def _template(created: float) -> tuple[dict, bytes, bytes]:
    run = {
        "run_id": "RUNID",
        "environment": "toy_addition",
        "profile": "local",
        "status": "completed",
        "reason": "trainer finished",
        "created_at": created,
        "started_at": created + 2,
        "ended_at": created + 30 * TEMPLATE_STEPS,
        "total_steps": TEMPLATE_STEPS,
        "supervisor": {"pid": 4242, "create_time": created},
        "ports": {},
        "processes": [{"name": n, "state": "exited", "exit_code": 0, "restarts": 0} for n in ("api", "trainer", "env")],
    }
    trainer, env = [], []
    for step in range(1, TEMPLATE_STEPS + 1):
        trainer.append(json.dumps(_trainer_row(step, created)) + "\n")
        env.append(json.dumps(_env_row(step)) + "\n")
    return run, "".join(trainer).encode(), "".join(env).encode()


def _trainer_row(step: int, start: float) -> dict:
    noise = math.sin(step * 12.9898) * 0.08
    return {
        "step": step,
        "time": start + 30 * step,
        "reward/mean": round(0.3 + 0.6 * (1 - math.exp(-step / 80)) + noise, 5),
        "train/loss": round(1.2 * math.exp(-step / 120) + 0.05 * math.sin(step), 5),
        "train/learning_rate": 4e-5,
        "logprobs/mean": round(-1.5 + 0.0004 * step, 5),
        "advantages/std": 0.42,
        "tokens/prompt": 5120,
        "tokens/completion": 2048,
        "time/step_s": 29.5,
    }


def _env_row(step: int) -> dict:
    row = {"step": step, "train/percent_correct": round(min(1.0, 0.1 + 0.004 * (step % 200)), 4)}
    if step % 10 == 0:
        row["eval/percent_correct"] = round(min(1.0, 0.05 + 0.003 * (step % 300)), 4)
    return row


def build_runs(count: int) -> None:
    from hermes_rl.core.base.paths import runs_dir

    root = runs_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = time.time()
    run, trainer, env = _template(now - 86400 * 200)
    for index in range(count):
        run_id = f"{index:08x}"
        folder = root / run_id
        folder.mkdir(mode=0o700)
        record = dict(run, run_id=run_id, created_at=now - 86400 * 200 + 600 * index)
        record["environment"] = ENVIRONMENTS[index % len(ENVIRONMENTS)]
        record["status"] = ("completed", "completed", "failed", "stopped")[index % 4]
        if index % 7 == 0:
            record["sweep"] = {"id": f"sw{index // 700:04d}", "index": index % 700 // 7}
        (folder / "run.json").write_text(json.dumps(record))
        (folder / "metrics.jsonl").write_bytes(trainer)
        (folder / "env_metrics.jsonl").write_bytes(env)


def build_long_run(run_id: str, rows: int) -> Path:
    from hermes_rl.core.base.paths import run_dir

    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    start = time.time() - 30 * rows
    run, _t, _e = _template(start)
    (folder / "run.json").write_text(json.dumps(dict(run, run_id=run_id, total_steps=rows, created_at=start)))
    with open(folder / "metrics.jsonl", "w") as trainer, open(folder / "env_metrics.jsonl", "w") as env:
        chunk_t, chunk_e = [], []
        for step in range(1, rows + 1):
            chunk_t.append(json.dumps(_trainer_row(step, start)))
            chunk_e.append(json.dumps(_env_row(step)))
            if len(chunk_t) == 10_000:
                trainer.write("\n".join(chunk_t) + "\n")
                env.write("\n".join(chunk_e) + "\n")
                chunk_t, chunk_e = [], []
        if chunk_t:
            trainer.write("\n".join(chunk_t) + "\n")
            env.write("\n".join(chunk_e) + "\n")
    return folder


def rss_of(argv: list[str], env: dict, stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """Wall and peak RSS of one command, measured by a wrapper process of its own (ru_maxrss of
    children only grows, so each measurement runs under a fresh parent)."""
    code = (
        "import resource,subprocess,sys,time;t=time.perf_counter();"
        "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL if sys.stdout.isatty() else None);"
        "w=time.perf_counter()-t;"
        "print(f'{w} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024}',file=sys.stderr);"
        "sys.exit(r.returncode)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, stdout=stdout, stderr=subprocess.PIPE)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-400:]}")
    wall, rss = proc.stderr.decode().strip().splitlines()[-1].split()
    return float(wall), float(rss)


# What the dashboard's metrics pane and charts read on opening a run (tui/live.py: RunMetrics), then
# every chart's series: wall time and peak RSS of a fresh process.
READER_PROBE = (
    "import sys,time,resource;t=time.perf_counter();"
    "from hermes_rl.core.readers.metrics import RunMetrics;"
    "m=RunMetrics(sys.argv[1]);m.poll();s={k:m.series(k) for k in m.keys()};"
    "print(f'{time.perf_counter()-t:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} '"
    "f'{len(m.rows)}')"
)


# The dashboard itself (headless, Textual's run_test) over a $HERMES_HOME holding only the long run (so
# it is the run selected at start): seconds until the metrics pane shows its rows, and peak RSS.
DASHBOARD_PROBE = """
import asyncio, resource, sys, time
t0 = time.perf_counter()
from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.metrics import MetricsPane
shown = []

class Probe(HermesDashboard):
    def on_live_updater_metrics_updated(self, message):
        super().on_live_updater_metrics_updated(message)
        if message.trainer_step and not shown:
            shown.append((time.perf_counter() - t0, len(message.rows)))

async def main():
    app = Probe()
    async with app.run_test(size=(160, 48)) as pilot:
        while not shown and time.perf_counter() - t0 < 120:
            await pilot.pause(0.05)
        await pilot.pause(0.5)  # the pane paints what it was given
asyncio.run(main())
took, rows = shown[0] if shown else (float("nan"), 0)
print(f"{took:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} {rows}")
"""


# The dashboard over all the runs: seconds to the first runs listing, then its idle CPU over 10 s and
# the time of a cursor move in the runs pane (20 presses of "down").
DASHBOARD_RUNS_PROBE = """
import asyncio, time
t0 = time.perf_counter()
from hermes_rl.tui.app import HermesDashboard
shown = []

class Probe(HermesDashboard):
    def on_live_updater_runs_updated(self, message):
        super().on_live_updater_runs_updated(message)
        if not shown:
            shown.append(time.perf_counter() - t0)

async def main():
    app = Probe()
    async with app.run_test(size=(160, 48)) as pilot:
        while not shown and time.perf_counter() - t0 < 120:
            await pilot.pause(0.05)
        await pilot.pause(1.0)
        c0, w0 = time.process_time(), time.perf_counter()
        await pilot.pause(10)
        cpu = (time.process_time() - c0) / (time.perf_counter() - w0) * 100
        t = time.perf_counter()
        for _ in range(20):
            await pilot.press("down")
        print(f"{shown[0]:.2f} {cpu:.1f} {(time.perf_counter() - t) / 20 * 1000:.0f}")
asyncio.run(main())
"""


def dashboard_home(home: Path, run_id: str) -> Path:
    """A second $HERMES_HOME whose only run is the long one (hard links: no copy of 295 MB)."""
    other = home / "dashboard_home"
    folder = other / "rl" / "runs" / run_id
    if not folder.exists():
        folder.mkdir(parents=True, mode=0o700)
        for name in ("run.json", "metrics.jsonl", "env_metrics.jsonl"):
            os.link(home / "rl" / "runs" / run_id / name, folder / name)
    return other


def probe(code: str, env: dict, *args: str) -> list[str]:
    """The last three words a probe (one of the programs above, run in a fresh interpreter) prints."""
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-600:])
    return out.stdout.split()[-3:]


def line(label: str, figure: str, goal: str) -> None:
    load = os.getloadavg()[0]
    print(f"{label:<52} {figure:>22}   goal {goal:<14} load {load:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", help="build in (or reuse) this folder as $HERMES_HOME and keep it")
    args = parser.parse_args()
    home = Path(args.keep or tempfile.mkdtemp(prefix="hermes-scale-"))
    env = dict(os.environ, HERMES_HOME=str(home), NO_COLOR="1", COLUMNS="160")
    os.environ["HERMES_HOME"] = str(home)
    long_id = "10ae0000"
    try:
        from hermes_rl.core.base.paths import run_dir, runs_dir

        if not (runs_dir() / f"{args.runs - 1:08x}").exists():
            t = time.perf_counter()
            build_runs(args.runs)
            print(f"built {args.runs} runs in {time.perf_counter() - t:.1f} s", flush=True)
        if not run_dir(long_id).exists():
            t = time.perf_counter()
            folder = build_long_run(long_id, args.rows)
            size = (folder / "metrics.jsonl").stat().st_size + (folder / "env_metrics.jsonl").stat().st_size
            print(f"built a {args.rows}-row run ({size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", flush=True)
        index = home / "rl" / "index.sqlite"
        n = args.runs + 1
        index.unlink(missing_ok=True)
        wall, rss = rss_of([HERMES, "runs"], env)
        line(f"runs: {n} runs, index cold (rebuilt)", f"{wall:.2f} s {rss:.0f} MB", "-")
        for label, extra in (
            ("", []),
            (", --status failed", ["--status", "failed"]),
            (", --env gsm8k --sort reward", ["--env", "gsm8k", "--sort", "reward"]),
            (", --all (every row printed)", ["--all"]),
        ):
            tries = sorted(rss_of([HERMES, "runs", *extra], env) for _ in range(5))
            wall, rss = tries[2]  # the median of 5: the machine is shared
            line(f"runs{label}: {n} runs, index warm (median of 5)", f"{wall:.2f} s {rss:.0f} MB", "<= 0.5 s")
        other = dashboard_home(home, long_id)
        idle = {}
        for count, where in ((1, other), (n, home)):  # the baseline: the same dashboard over one finished run
            first, cpu, key = probe(DASHBOARD_RUNS_PROBE, dict(env, HERMES_HOME=str(where)))
            idle[count] = float(cpu)
            line(f"dashboard, {count} run(s): first listing", f"{float(first):.2f} s", "-")
            line(f"dashboard, {count} run(s): idle CPU / cursor move", f"{cpu} % / {key} ms", "no growth")
        line(f"dashboard idle CPU, {n} runs / 1 run", f"{idle[n] / max(idle[1], 0.01):.2f}x", "~1x")
        digest = run_dir(long_id) / ".metrics_digest.json"
        digest.unlink(missing_ok=True)
        for label in ("digest cold (built)", "digest warm (as the trainer keeps it)"):
            wall, rss = rss_of([HERMES, "results", long_id], env)
            line(f"results: {args.rows}-row run, {label}", f"{wall:.2f} s {rss:.0f} MB", "<= 2 s")
        for label in ("digest warm (as the trainer keeps it)",):
            took, rss_mb, rows = probe(READER_PROBE, env, str(run_dir(long_id)))
            figure = f"{float(took):.2f} s {rss_mb} MB"
            line(f"dashboard metrics reader ({rows} rows), {label}", figure, "<= 2 s, 300 MB")
        for label in ("digest cold (built)", "digest warm (as the trainer keeps it)"):
            if "cold" in label:
                (other / "rl" / "runs" / long_id / ".metrics_digest.json").unlink(missing_ok=True)
            took, rss_mb, rows = probe(DASHBOARD_PROBE, dict(env, HERMES_HOME=str(other)))
            line(
                f"dashboard: metrics shown ({rows} rows), {label}", f"{float(took):.2f} s {rss_mb} MB", "<= 2 s, 300 MB"
            )
        with open(os.devnull, "wb") as sink:
            wall, rss = rss_of([HERMES, "metrics", long_id, "--format", "csv"], env, stdout=sink)
        line(f"metrics --format csv: {args.rows}-row run", f"{wall:.1f} s {rss:.0f} MB", "bounded RSS")
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
