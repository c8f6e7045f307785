"""Run an environment file (`python -m hermes_rl.dataplane.env_launch FILE serve --config ...`) with
W&B made harmless: if `wandb.init` fails (W&B unreachable, a bad key, its own timeout), the run goes
on logging to W&B offline, with one warning line, instead of the environment crashing and being
restarted into the same failure. Everything else is the file run as `python FILE ...`."""

from __future__ import annotations

import functools
import os
import runpy
import sys

INIT_TIMEOUT_S = "30"  # W&B's own default is 90 s of retries before it gives up


def install_wandb_fallback() -> None:
    os.environ.setdefault("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S)
    try:
        import wandb
    except ImportError:
        return
    online_init = wandb.init

    @functools.wraps(online_init)
    def init(*args, **kwargs):
        try:
            return online_init(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any W&B failure: keep the run, log offline
            if kwargs.get("mode") in ("offline", "disabled") or os.environ.get("WANDB_MODE") in ("offline", "disabled"):
                raise
            first = (str(exc).splitlines() or [""])[0][:200]
            print(f"hermes-rl: W&B unavailable ({type(exc).__name__}: {first}); logging offline", file=sys.stderr)
            os.environ["WANDB_MODE"] = "offline"
            return online_init(*args, **{**kwargs, "mode": "offline"})

    wandb.init = init


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m hermes_rl.dataplane.env_launch ENV_FILE [ARGS...]")
    install_wandb_fallback()
    env_file = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(env_file)))
    runpy.run_path(env_file, run_name="__main__")


if __name__ == "__main__":
    main()
