"""Run an environment file (`python -m hermes_rl.dataplane.env_launch FILE serve --config ...`) with
W&B made harmless (dataplane/wandb_fallback): if `wandb.init` fails (W&B unreachable, a bad key, its own
timeout), the run goes on logging to W&B offline, with one warning line, instead of the environment
crashing and being restarted into the same failure; and with transformers 5's chat templates returning
token ids where atroposlib 0.4 expects them (compat.chat_template_returns_ids). Everything else is the
file run as `python FILE ...` (a file in a package as its package module, core.base.envload)."""

from __future__ import annotations

import sys

from hermes_rl.core.base.envload import run_environment
from hermes_rl.dataplane.compat import chat_template_returns_ids
from hermes_rl.dataplane.wandb_fallback import install_wandb_fallback


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m hermes_rl.dataplane.env_launch ENV_FILE [ARGS...]")
    install_wandb_fallback()
    try:
        chat_template_returns_ids()  # every environment imports atroposlib, which imports transformers
    except ImportError:
        pass
    env_file = sys.argv[1]
    sys.argv = sys.argv[1:]
    run_environment(env_file)  # loaded as the config probe loads it: relative imports behave the same


if __name__ == "__main__":
    main()
