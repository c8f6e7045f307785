"""A trainer stand-in that never finishes: prints "ready", then every --step-s appends one metric row
to {run_dir}/metrics.jsonl (through fsutil.append_jsonl, the real trainer's writer) and one log line
naming its run id and port (cross-talk checks read them)."""

import argparse
import os
import time

from hermes_rl.core.base.fsutil import append_jsonl

parser = argparse.ArgumentParser()
parser.add_argument("--run-dir", required=True)
parser.add_argument("--run-id", required=True)
parser.add_argument("--port", default="")
parser.add_argument("--step-s", type=float, default=0.1)
args = parser.parse_args()
print(f"ready run={args.run_id} port={args.port}", flush=True)
step = 0
metrics = os.path.join(args.run_dir, "metrics.jsonl")
while True:
    step += 1
    append_jsonl(metrics, {"step": step, "time": time.time(), "train/loss": 1.0 / step, "reward/mean": 0.5})
    print(f"step {step} run={args.run_id} port={args.port}", flush=True)
    time.sleep(args.step_s)
