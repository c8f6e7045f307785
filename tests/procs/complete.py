"""A trainer stand-in that finishes: writes --steps metric rows to {run_dir}/metrics.jsonl, a checkpoint
folder, results.json and the completion file, then exits 0. Ready when it prints "ready"."""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--run-dir", required=True)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--step-s", type=float, default=0.05)
parser.add_argument("--completion-file", required=True)
parser.add_argument("--finish-reason", help="written into the completion file, as the real trainer's results.json does")
args = parser.parse_args()
print("ready", flush=True)
with open(os.path.join(args.run_dir, "metrics.jsonl"), "a") as metrics:
    for step in range(1, args.steps + 1):
        time.sleep(args.step_s)
        metrics.write(
            json.dumps({"step": step, "time": time.time(), "train/loss": 1.0 / step, "reward/mean": step / args.steps})
            + "\n"
        )
        metrics.flush()
checkpoint = os.path.join(args.run_dir, "checkpoints", f"step_{args.steps}")
os.makedirs(checkpoint, exist_ok=True)
with open(os.path.join(args.run_dir, "results.json"), "w") as handle:
    json.dump({"final_checkpoint": checkpoint, "tinker_path": f"tinker://local/{args.steps}"}, handle)
with open(args.completion_file, "w") as handle:
    handle.write(json.dumps({"finish_reason": args.finish_reason}) if args.finish_reason else "done\n")
print("finished", flush=True)
sys.exit(0)
