"""A client standing in for the dashboard: loops on core.runs.get_run and core.toolset.rl_check_status
for RUN_ID, printing one line per look, until killed. Run with the test's HERMES_HOME."""

import sys
import time

from hermes_rl.core import runs
from hermes_rl.core.clients import toolset

run_id = sys.argv[1]
looks = 0
while True:
    run = runs.get_run(run_id)
    toolset.rl_check_status(run_id, min_interval_s=0)
    looks += 1
    print(f"look {looks}: {run['status']}", flush=True)
    time.sleep(0.05)
