"""Prints "ready at <epoch>" after --delay seconds, then sleeps until signalled (SIGTERM ends it, as by default)."""

import argparse
import time

parser = argparse.ArgumentParser()
parser.add_argument("--delay", type=float, default=0.0)
args = parser.parse_args()
time.sleep(args.delay)
print(f"ready at {time.time():.6f}", flush=True)  # the bench reads the stamp
while True:
    time.sleep(3600)
