"""Prints "ready at <epoch>" after --delay seconds, then sleeps until signalled (SIGTERM ends it, as by
default), or exits 0 after --exit-after seconds (an environment that has produced all its data)."""

import argparse
import time

parser = argparse.ArgumentParser()
parser.add_argument("--delay", type=float, default=0.0)
parser.add_argument("--exit-after", type=float, default=None)
args = parser.parse_args()
time.sleep(args.delay)
print(f"ready at {time.time():.6f}", flush=True)  # the bench reads the stamp
if args.exit_after is not None:
    time.sleep(args.exit_after)
    raise SystemExit(0)
while True:
    time.sleep(3600)
