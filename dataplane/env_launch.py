"""Run an environment file (`python -m hermes_rl.dataplane.env_launch FILE serve --config ...`) with
W&B made harmless (dataplane/wandb_fallback): if `wandb.init` fails (W&B unreachable, a bad key, its own
timeout), the run goes on logging to W&B offline, with one warning line, instead of the environment
crashing and being restarted into the same failure; and with transformers 5's chat templates returning
token ids where atroposlib 0.4 expects them (compat.chat_template_returns_ids); and, once it has
registered with run-api, its env_id noted in the run folder's env_ids.jsonl beside the process and
environment names (run-api's batches name environments only by that id). Everything else is the file
run as `python FILE ...` (a file in a package as its package module, core.base.envload)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from hermes_rl.core.base.envload import run_environment
from hermes_rl.dataplane.compat import chat_template_returns_ids
from hermes_rl.dataplane.wandb_fallback import install_wandb_fallback

ENV_IDS_FILE = "env_ids.jsonl"


def record_registrations() -> None:
    """Wrap BaseEnv.register_env so that each registration appends {time, env_id, process, environment}
    to <run>/env_ids.jsonl (a restarted worker registers again, under a new id)."""
    from hermes_rl.core.daemons.procscan import MARKER, PROCESS_MARKER

    folder = os.environ.get(MARKER)
    if not folder:
        return
    try:
        from atroposlib.envs.base import BaseEnv
    except ImportError:
        return
    original = BaseEnv.register_env

    async def register_env(self):
        await original(self)
        from hermes_rl.core.base.fsutil import append_jsonl

        row = {
            "time": time.time(),
            "env_id": getattr(self, "env_id", None),
            "process": os.environ.get(PROCESS_MARKER),
            "environment": getattr(self, "name", None) or type(self).__name__,
        }
        try:
            append_jsonl(Path(folder) / ENV_IDS_FILE, row)
        except OSError:
            pass  # only the per-environment views miss it; training goes on

    BaseEnv.register_env = register_env


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m hermes_rl.dataplane.env_launch ENV_FILE [ARGS...]")
    install_wandb_fallback()
    try:
        chat_template_returns_ids()  # every environment imports atroposlib, which imports transformers
    except ImportError:
        pass
    record_registrations()
    env_file = sys.argv[1]
    sys.argv = sys.argv[1:]
    run_environment(env_file)  # loaded as the config probe loads it: relative imports behave the same


if __name__ == "__main__":
    main()
