"""Accelerated dashboard soak: the dashboard following a run that writes metrics and logs at a multiple
of a real local run's rate, to find what grows in the dashboard without waiting hours.

    .venv/bin/python bench/soak_dashboard.py [--steps-per-s 40] [--minutes 7] [--sample-s 30]

The run is real supervisor processes (core.runs.launch) that write what the real pipeline writes per
step: a trainer metrics row (the trainer's keys) and a log line, an environment metrics row, ~10 run-api
access-log lines. A local run on this machine does ~5-8 steps/s, so 40 steps/s for 7 minutes is about
as many steps as 35-55 minutes of a real run. The dashboard runs headless in its own process; printed
per sample: its RSS and CPU, and the size of every bounded structure (metric rows kept, merged log
lines, log index entries, DataTable render caches). At the end: the second half's RSS slope (≈ 0 once
every bound is reached). bench/soak.py is the slower soak over the real pipeline in a real terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from soak import _slope_mb_per_10min  # noqa: E402  (one slope for both soaks)

WRITER = textwrap.dedent("""
    import json, os, sys, time
    run_dir, role, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
    print("ready", flush=True)
    step, due = 0, time.monotonic()
    while True:
        step += 1
        if role == "api":      # uvicorn access lines: ~10 per trained step in a real run
            sys.stdout.write("".join(f'INFO:     127.0.0.1:{40000 + i} - "POST /scored_data HTTP/1.1" 200 OK\\n'
                                     for i in range(10)))
            sys.stdout.flush()
        elif role == "trainer":
            row = {"step": step, "time": time.time(), "train/loss": 0.1 * (step % 13), "train/learning_rate": 5e-4,
                   "reward/mean": (step % 9) / 9, "logprobs/mean": -1.5, "logprobs/mean_training": -1.5,
                   "logprobs/diff": 0.0, "advantages/mean": 0.0, "advantages/std": 0.3, "timing/step_s": 0.02,
                   "timing/wait_batch_s": 0.1, "batch/sequences": 16, "batch/groups": 2, "batch/groups_dropped": 0}
            with open(os.path.join(run_dir, "metrics.jsonl"), "a") as out:
                out.write(json.dumps(row) + "\\n")
            print(f"INFO trainer: step {step}/1000000 reward {row['reward/mean']:.3f} loss 0.1 step 0.02s", flush=True)
        elif role == "env":
            with open(os.path.join(run_dir, "env_metrics.jsonl"), "a") as out:
                out.write(json.dumps({"step": step, "time": time.time(), "environment": "toy_addition",
                                      "train/percent_correct": (step % 5) / 5, "train/score_mean": 0.5}) + "\\n")
        due += 1.0 / rate
        time.sleep(max(0.0, due - time.monotonic()))
""")

DASHBOARD = textwrap.dedent("""
    import sys, threading, time, json
    sys.path.insert(0, sys.argv[3])
    import psutil
    from textual.widgets import DataTable
    from hermes_rl.tui.app import HermesDashboard

    app = HermesDashboard(run_id=sys.argv[1])
    out_path, every = sys.argv[2], float(sys.argv[4])

    def sample(proc, began):
        row = {"t": round(time.monotonic() - began, 1), "rss": proc.memory_info().rss,
               "cpu_s": round(sum(proc.cpu_times()[:2]), 1)}
        live = app.live
        if live is not None and live.view is not None:
            view = live.view
            row.update(metric_rows=len(view.metrics.rows), merged_lines=view.merged.line_count - view.merged.first_line,
                       log_index={n: len(r._index) for n, r in list(view.readers.items())},
                       spark_readers=len(live._run_metrics))
        row["render_caches"] = {t.id: len(t._cell_render_cache) for t in app.screen.query(DataTable)}
        return row

    def sampler():
        proc, began = psutil.Process(), time.monotonic()
        while True:
            time.sleep(every)
            try:
                row = sample(proc, began)
            except Exception as exc:   # a widget mid-rebuild: say so and sample again next time
                row = {"error": repr(exc)}
            with open(out_path, "a") as out:
                out.write(json.dumps(row) + "\\n")

    threading.Thread(target=sampler, daemon=True).start()
    app.run(headless=True, size=(160, 48))
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps-per-s", type=float, default=40.0)
    parser.add_argument("--minutes", type=float, default=7.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hermes-soakdash-"))
    os.environ["HERMES_HOME"] = str(home)
    from hermes_rl.core import runs
    from hermes_rl.core.daemons.pipeline import ProcessSpec

    writer = home / "writer.py"
    writer.write_text(WRITER)
    specs = [
        ProcessSpec(
            name=name, argv=[sys.executable, str(writer), "{run_dir}", name, str(args.steps_per_s)], stop_timeout=3
        )
        for name in ("api", "trainer", "env")
    ]
    run_id = runs.launch(specs, environment="toy_addition", profile="local")["run_id"]
    samples_path = home / "samples.jsonl"
    dashboard = subprocess.Popen(
        [sys.executable, "-c", DASHBOARD, run_id, str(samples_path), str(ROOT), str(args.sample_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    print(f"run {run_id} at {args.steps_per_s:g} steps/s for {args.minutes:g} min; dashboard pid {dashboard.pid}")
    print(f"{'t':>6} {'step':>7} {'RSS':>8} {'CPU':>6} {'rows':>6} {'merged':>7} {'api idx':>8} render caches")
    seen, rows = 0, []
    deadline = time.monotonic() + args.minutes * 60
    try:
        while time.monotonic() < deadline and dashboard.poll() is None:
            time.sleep(2)
            lines = samples_path.read_text().splitlines() if samples_path.exists() else []
            for line in lines[seen:]:
                row = json.loads(line)
                row["step"] = (runs.get_run(run_id, sample=False).get("last_metric") or {}).get("step")
                rows.append(row)
                if "error" in row:
                    print(f"sample error: {row['error']}")
                    continue
                cpu = (
                    100
                    * (row["cpu_s"] - (rows[-2]["cpu_s"] if len(rows) > 1 and "cpu_s" in rows[-2] else 0))
                    / args.sample_s
                )
                print(
                    f"{row['t']:>6.0f} {row['step'] or 0:>7} {row['rss'] / 2**20:>6.1f}MB {cpu:>5.1f}% "
                    f"{row.get('metric_rows', 0):>6} {row.get('merged_lines', 0):>7} "
                    f"{(row.get('log_index') or {}).get('api', 0):>8} {row['render_caches']}",
                    flush=True,
                )
            seen = len(lines)
    finally:
        dashboard.kill()
        dashboard.wait()
        runs.stop_run(run_id, wait=10)
        shutil.rmtree(home, ignore_errors=True)
    good = [r for r in rows if "rss" in r]
    if len(good) >= 4:
        half = good[len(good) // 2 :]
        slope = _slope_mb_per_10min([r["t"] for r in half], [r["rss"] for r in half])
        print(
            f"\ndashboard RSS: first sample {good[0]['rss'] / 2**20:.1f} MB, "
            f"max {max(r['rss'] for r in good) / 2**20:.1f} MB,"
            f" last {good[-1]['rss'] / 2**20:.1f} MB; second-half slope {slope:+.2f} MB/10 min"
            f" over {good[-1]['step']} steps"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
