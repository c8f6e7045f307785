"""W&B made harmless for every data-plane process (environments through env_launch, the trainer): if
`wandb.init` fails (W&B unreachable, a bad key, its own timeout), the process goes on logging to W&B
offline, with one warning, instead of failing or dropping its W&B record. One mechanism for all: the
process calls `install_wandb_fallback()` before anything calls `wandb.init`."""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable

INIT_TIMEOUT_S = "30"  # W&B's own default is 90 s of retries before it gives up


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def install_wandb_fallback(warn: Callable[[str], None] = _to_stderr) -> None:
    """Wrap `wandb.init` (once per process): a failed online init is retried offline, `warn` says why."""
    os.environ.setdefault("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S)
    try:
        import wandb
    except ImportError:
        return
    online_init = wandb.init
    if getattr(online_init, "hermes_rl_fallback", False):
        return

    @functools.wraps(online_init)
    def init(*args, **kwargs):
        try:
            return online_init(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any W&B failure: keep the run, log offline
            if kwargs.get("mode") in ("offline", "disabled") or os.environ.get("WANDB_MODE") in ("offline", "disabled"):
                raise
            first = (str(exc).splitlines() or [""])[0][:200]
            warn(f"hermes-rl: W&B unavailable ({type(exc).__name__}: {first}); logging offline")
            os.environ["WANDB_MODE"] = "offline"
            return online_init(*args, **{**kwargs, "mode": "offline"})

    init.hermes_rl_fallback = True  # type: ignore[attr-defined]
    wandb.init = init
