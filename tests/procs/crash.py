"""Exits with --code after --after seconds (a crashing process). Appends its start time to --record if given."""

import argparse
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--after", type=float, default=0.0)
parser.add_argument("--code", type=int, default=1)
parser.add_argument("--record", default=None)
args = parser.parse_args()
if args.record:
    with open(args.record, "a") as handle:
        handle.write(f"{time.time()}\n")
print(f"crashing in {args.after}s with code {args.code}", flush=True)
time.sleep(args.after)
print("Traceback (most recent call last): simulated failure", flush=True)
sys.exit(args.code)
