"""One client of the 50-process storm. Imports, says it is armed (creates SYNC/armed-SEED), waits for
SYNC/go so that all clients hit the files together, then does OPS operations in random order: half
draft edits (core.envs.drafts.set_field), half run-state reads (core.runs.get_run / list_runs).
Prints "ok <edits> <reads>" or the first error."""

import os
import random
import sys
import time

from hermes_rl.core import runs
from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.envs import drafts as config

env_name, run_id, sync, ops, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
open(os.path.join(sync, f"armed-{seed}"), "w").close()
while not os.path.exists(os.path.join(sync, "go")):
    time.sleep(0.01)
plan = ["edit"] * (ops // 2) + ["read"] * (ops - ops // 2)
rng.shuffle(plan)
edits = reads = 0
for op in plan:
    try:
        if op == "edit":
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
