"""A trainer stand-in for the dashboard tests: prints 'ready', then every --step-s appends a metric
row to {run_dir}/metrics.jsonl and log lines with colour and a \\r progress bar, until stopped."""

import argparse
import json
import math
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--run-dir", required=True)
parser.add_argument("--step-s", type=float, default=0.2)
parser.add_argument("--steps", type=int, default=100000)
args = parser.parse_args()
signal.signal(signal.SIGTERM, lambda *_: (print("trainer: stopping on SIGTERM", flush=True), sys.exit(0)))
print("ready", flush=True)
with open(os.path.join(args.run_dir, "metrics.jsonl"), "a") as metrics:
    for step in range(1, args.steps + 1):
        time.sleep(args.step_s)
        row = {"step": step, "time": time.time(), "train/loss": 1.0 / step, "reward/mean": 1 - math.exp(-step / 5)}
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        sys.stdout.write(f"\x1b[32mstep {step}\x1b[0m loss={row['train/loss']:.4f}\n")
        sys.stdout.write("sampling  10%\rsampling 100%\n")
        sys.stdout.flush()
