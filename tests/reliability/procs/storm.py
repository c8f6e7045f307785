"""One client of the 50-process storm: alternately edits a draft (core.config.set_field) and reads run
state (core.runs.get_run / list_runs) for --seconds. Prints "ok <edits> <reads>" or the first error."""

import random
import sys
import time

from core import config, runs
from core.errors import HermesError

env_name, run_id, seconds, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
edits = reads = 0
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        if rng.random() < 0.5:
            config.set_field("group_size", rng.choice([2, 4, 8]), env_name=env_name, profile="local")
            edits += 1
        else:
            assert runs.get_run(run_id, sample=False)["run_id"] == run_id
            assert any(r["run_id"] == run_id for r in runs.list_runs())
            reads += 1
    except HermesError as exc:
        print(f"error {exc.message}", flush=True)
        sys.exit(1)
print(f"ok {edits} {reads}", flush=True)
