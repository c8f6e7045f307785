"""The HTML run report: its size, how long `hermes-rl report` takes to write it, and how long headless
Chromium takes to render it, for runs of several lengths, against an empty page rendered the same way
in the same run (Chromium's own start-up, the baseline).

    .venv/bin/python bench/bench_report.py [--steps 800 20000 100000] [--repeats 3]

Each run folder is written in a temporary $HERMES_HOME: every step a trainer row (45 metrics, as many as
the trainer logs now: signals/, tokens/, time/...; `--metrics N` changes it) and an
environment row, an eval every 10 steps, the rollouts a real 12-step toy_addition run recorded, and
its config. Needs Debian's chromium (apt-get install -y chromium).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_ROLLOUTS = ROOT / "tests" / "data" / "rollouts_toy_addition.jsonl"


def write_run(run_id: str, steps: int, metrics: int = 45) -> None:
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.base.paths import ensure_private_dir, run_dir

    folder = ensure_private_dir(run_dir(run_id))
    start = time.time() - 30 * steps
    atomic_write_json(
        folder / "run.json",
        {
            "run_id": run_id,
            "environment": "toy_addition",
            "profile": "local",
            "status": "completed",
            "reason": "trainer finished",
            "created_at": start,
            "started_at": start + 2,
            "ended_at": start + 30 * steps,
            "total_steps": steps,
            "processes": [
                {"name": n, "state": "exited", "exit_code": 0, "restarts": 0} for n in ("api", "trainer", "env")
            ],
        },
    )
    with open(folder / "metrics.jsonl", "w") as trainer, open(folder / "env_metrics.jsonl", "w") as env:
        for step in range(1, steps + 1):
            noise = math.sin(step * 12.9898) * 0.08
            row = {
                "step": step,
                "time": start + 30 * step,
                "reward/mean": 0.3 + 0.6 * (1 - math.exp(-step / 80)) + noise,
            }
            row |= {f"train/m{i}": math.cos(step / (20 + i)) for i in range(metrics - 1)}
            trainer.write(json.dumps(row) + "\n")
            env_row = {"step": step, "train/percent_correct": min(1.0, step / steps + noise)}
            if step % 10 == 0:
                env_row["eval/percent_correct"] = min(1.0, 0.2 + 0.8 * step / steps)
            env.write(json.dumps(env_row) + "\n")
    shutil.copyfile(REAL_ROLLOUTS, folder / "rollouts.jsonl")
    (folder / "config.yaml").write_text("env:\n  group_size: 8\n  batch_size: 16\ntinker:\n  learning_rate: 0.0001\n")


def render_s(page: Path, profile: Path) -> float:
    began = time.perf_counter()
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--window-size=1280,1600",
            f"--screenshot={profile / 'shot.png'}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[800, 20000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--metrics", type=int, default=45, help="metrics per trainer row")
    args = parser.parse_args()
    if shutil.which("chromium") is None:
        print("chromium is not installed: apt-get install -y chromium", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="bench-report-"))
    os.environ["HERMES_HOME"] = str(home)
    from hermes_rl.core.runs import export

    try:
        empty = home / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body></body></html>")
        baseline = statistics.median(render_s(empty, home / f"p{i}") for i in range(args.repeats))
        print(f"chromium, an empty page: {baseline:.2f} s (median of {args.repeats})")
        print(f"{'steps':>8} {'size':>9} {'write (s)':>10} {'render (s)':>11} {'render / empty':>15}")
        for index, steps in enumerate(args.steps):
            run_id = f"{index + 1:08x}"
            write_run(run_id, steps, args.metrics)
            writes, page = [], None
            for _ in range(args.repeats):
                began = time.perf_counter()
                page = export.write_report(run_id, home / f"{run_id}.html")
                writes.append(time.perf_counter() - began)
            renders = [render_s(page, home / f"p{index}-{i}") for i in range(args.repeats)]
            size = page.stat().st_size
            render = statistics.median(renders)
            print(
                f"{steps:>8} {size / 1024:>7.0f} KB {statistics.median(writes):>10.2f} {render:>11.2f} "
                f"{render / baseline:>14.2f}×"
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
