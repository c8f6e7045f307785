"""Telling a conversation when a run it started ends or stalls, without anyone polling a tool.

`watch_run(run_id, notify)` starts a daemon thread asleep on the run's folder (watchfiles): it wakes when
the supervisor writes run.json or a metric row, and at least every `recheck_s` seconds, because two
endings write nothing there (a supervisor that died makes the run `lost`; a run that stops making
progress becomes `stalled`). Each wake re-reads the run; `notify(text)` is called once when the run
reaches a final state (the thread then ends) and once each time it becomes stalled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..base.paths import run_dir, validate_run_id
from ..base.states import FINAL, RunStatus
from ..readers.logs import quoted_from_run
from .toolset import agent_wording

log = logging.getLogger(__name__)

RECHECK_S = 60.0


def _eval_text(run_id: str) -> str:
    from ..runs import report

    try:
        accuracy: Mapping[str, Any] = report.results_summary(run_id).get("eval_accuracy") or {}
    except Exception:  # the notice still goes out without the figure
        log.debug("results of %s unreadable", run_id, exc_info=True)
        return ""
    if accuracy.get("first") is None or accuracy.get("last") is None:
        return ""
    return f", eval accuracy {accuracy['first']:.2f} -> {accuracy['last']:.2f} (best {accuracy.get('best', 0):.2f})"


def end_notice(run: Mapping[str, Any]) -> str:
    """One message for a run in a final state: what happened, why, and the tool to read more."""
    run_id = run["run_id"]
    status = run.get("status")
    step = (run.get("last_metric") or {}).get("step")
    steps = f" at step {step}/{run.get('total_steps')}" if step is not None else ""
    # The reason holds what a process wrote (an environment's exception message): quoted as data.
    reason = f": {quoted_from_run(agent_wording(str(run['reason'])))}" if run.get("reason") else ""
    figures = _eval_text(run_id) if status == RunStatus.COMPLETED else ""
    follow = (
        f"rl_get_results('{run_id}') for metrics and weights"
        if status == RunStatus.COMPLETED
        else f"rl_check_status('{run_id}') for processes and logs, rl_start_training(resume_run_id='{run_id}') "
        "to continue it"
    )
    return f"[hermes-rl] Run {run_id} ({run.get('environment')}) {status}{steps}{reason}{figures}. Next: {follow}."


def stall_notice(run: Mapping[str, Any]) -> str:
    run_id = run["run_id"]
    idle = int(run.get("stalled_for_s") or 0)
    return (
        f"[hermes-rl] Run {run_id} ({run.get('environment')}) is stalled: no metric row and no trainer log line "
        f"for {idle} s. Next: rl_check_status('{run_id}') shows its processes and log paths; "
        f"rl_stop_training('{run_id}') ends it."
    )


def watch_run(
    run_id: str,
    notify: Callable[[str], object],
    *,
    stop: threading.Event | None = None,
    recheck_s: float = RECHECK_S,
) -> threading.Thread:
    """Start the watcher thread of one run (see the module docstring); `stop` ends it early."""
    validate_run_id(run_id)
    stop = stop or threading.Event()
    thread = threading.Thread(
        target=_watch, args=(run_id, notify, stop, recheck_s), name=f"hermes-rl-watch-{run_id}", daemon=True
    )
    thread.start()
    return thread


def _watch(run_id: str, notify: Callable[[str], object], stop: threading.Event, recheck_s: float) -> None:
    from watchfiles import watch

    from .. import runs

    told_stalled = False
    wakes = watch(
        run_dir(run_id),
        stop_event=stop,
        debounce=500,
        rust_timeout=int(recheck_s * 1000),
        yield_on_timeout=True,
        raise_interrupt=False,
    )
    try:
        while not stop.is_set():
            try:
                run = runs.get_run(run_id, sample=False)
            except Exception:
                log.warning("watching run %s: cannot read it; giving up", run_id, exc_info=True)
                return
            if run.get("status") in FINAL:
                notify(end_notice(run))
                return
            stalled = run.get("stalled") is True
            if stalled and not told_stalled:
                notify(stall_notice(run))
            told_stalled = stalled
            try:
                if next(wakes, None) is None:  # the stop event was set
                    return
            except OSError:  # the run folder went away (deleted): nothing left to watch
                log.warning("watching run %s: its folder is gone", run_id)
                return
    finally:
        wakes.close()
