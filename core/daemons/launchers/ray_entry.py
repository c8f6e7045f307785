"""A Ray job's entrypoint: `python -m hermes_rl.core.daemons.launchers.ray_entry SPEC_JSON`. Reads the
worker's argv, environment (keys included), working folder and log from the private file the Ray
launcher wrote in the run folder, removes it, appends its output to the run's process log, and execs the
worker, so the keys never appear in the job's entrypoint, metadata or runtime_env."""

from __future__ import annotations

import json
import os
import sys

from ...base.fsutil import read_regular_text, regular_fd


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hermes_rl.core.daemons.launchers.ray_entry SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(read_regular_text(argv[0], follow=False))
    os.unlink(argv[0])  # read once: the keys do not stay on disk
    log = regular_fd(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(spec["cwd"])
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
