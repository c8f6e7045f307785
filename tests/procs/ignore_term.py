"""Ignores SIGTERM (only SIGKILL ends it). Prints "ready" once the handler is in place."""

import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(3600)
