"""Run an environment file (`python -m hermes_rl.dataplane.env_launch FILE serve --config ...`) with
W&B made harmless (dataplane/wandb_fallback): if `wandb.init` fails (W&B unreachable, a bad key, its own
timeout), the run goes on logging to W&B offline, with one warning line, instead of the environment
crashing and being restarted into the same failure. Everything else is the file run as `python FILE ...`
(a file in a package as its package module, core.base.envload)."""

from __future__ import annotations

import sys

from hermes_rl.core.base.envload import run_environment
from hermes_rl.dataplane.wandb_fallback import install_wandb_fallback


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m hermes_rl.dataplane.env_launch ENV_FILE [ARGS...]")
    install_wandb_fallback()
    env_file = sys.argv[1]
    sys.argv = sys.argv[1:]
    run_environment(env_file)  # loaded as the config probe loads it: relative imports behave the same


if __name__ == "__main__":
    main()
