"""Spawns grandchildren: one in its own process group (like a worker), one that escapes with setsid.
Writes their pids, one per line, to --pids, then prints "ready" and sleeps."""

import argparse
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--pids", required=True)
parser.add_argument("--ignore-term", action="store_true")
args = parser.parse_args()
sleeper = "import signal, time\n"
if args.ignore_term:
    sleeper += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
sleeper += "time.sleep(3600)\n"
same_group = subprocess.Popen([sys.executable, "-c", sleeper])
escaped = subprocess.Popen([sys.executable, "-c", sleeper], start_new_session=True)
with open(args.pids + ".tmp", "w") as handle:
    handle.write(f"{same_group.pid}\n{escaped.pid}\n")
import os  # noqa: E402

os.replace(args.pids + ".tmp", args.pids)
print("ready", flush=True)
while True:
    time.sleep(3600)
