"""W&B made harmless and whole for every data-plane process (environments through env_launch, the
trainer). If `wandb.init` fails (W&B unreachable, a bad key, its own timeout), the process goes on
logging to W&B offline, with one warning, instead of failing or dropping its W&B record. A run that names
no group joins its hermes-rl run's group (the run id), so the trainer's and every environment's W&B runs
read as one after `wandb sync`. One mechanism for all: the process calls `install_wandb_fallback()`
before anything calls `wandb.init`; an environment process also calls `finish_wandb_on_sigterm()`, since
it is stopped by SIGTERM and its W&B run would otherwise end with no exit record ("crashed")."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from collections.abc import Callable

INIT_TIMEOUT_S = "30"  # W&B's own default is 90 s of retries before it gives up


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def install_wandb_fallback(warn: Callable[[str], None] = _to_stderr) -> None:
    """Wrap `wandb.init` (once per process): a failed online init is retried offline, `warn` says why."""
    os.environ.setdefault("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S)
    try:
        import wandb  # noqa: PLC0415 - W&B (a second) is optional: wrapped only where it is installed
    except ImportError:
        return
    online_init = wandb.init
    if getattr(online_init, "hermes_rl_fallback", False):
        return

    @functools.wraps(online_init)
    def init(*args, **kwargs):
        if not kwargs.get("group") and run_group():
            kwargs["group"] = run_group()
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


RUN_DIR_ENV = "HERMES_RL_RUN_DIR"  # core.daemons.procscan.MARKER: every process of a run has it
FINISH_TIMEOUT_S = 15.0


def run_group() -> str | None:
    """The W&B group of this process's runs: WANDB_RUN_GROUP when the user set it, else the hermes-rl run
    id (the name of the run folder every process of a run is started with)."""
    folder = os.environ.get(RUN_DIR_ENV)
    return os.environ.get("WANDB_RUN_GROUP") or (os.path.basename(folder.rstrip("/")) if folder else None)


def finish_wandb_run(timeout_s: float = FINISH_TIMEOUT_S) -> None:
    """End this process's W&B run, if it has one, with an exit record (exit code 0: a stop is not a
    crash); W&B is given `timeout_s` at most, so a stop never waits on it longer."""

    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return

    def finish() -> None:
        try:
            run.finish(exit_code=0)
        except Exception as exc:  # noqa: BLE001 - the stop goes on; the record says what happened
            print(f"hermes-rl: W&B finish failed: {exc}", file=sys.stderr, flush=True)

    worker = threading.Thread(target=finish, name="wandb-finish", daemon=True)
    worker.start()
    worker.join(timeout_s)


def finish_wandb_on_sigterm() -> None:
    """On SIGTERM, end the W&B run first, then do what SIGTERM did before (the handler already set)."""

    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame) -> None:
        finish_wandb_run()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
