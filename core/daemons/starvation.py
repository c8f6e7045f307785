"""A process fed by others that can get no more input: the trainer waiting for a batch while every environment
worker that feeds it has ended (the supervisor restarts a worker once, then fails the run with their words)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..base.states import PROC_NOT_ENDED, ProcState
from .process import Proc


def starving(
    procs: Mapping[str, Proc], statuses: Mapping[str, dict], read_at: Mapping[str, float], starved_s: float
) -> Iterator[tuple[Proc, list[Proc], dict]]:
    """(fed, its feeders, its last status) for each live, ready process that has said it waits for input
    (`waiting_for_batch_s` in its status) for `starved_s` while every process feeding it ended at least that
    long before the status was read."""
    for fed in procs.values():
        feeders = [p for p in procs.values() if p.spec.feeds == fed.name]
        if not feeders or not fed.alive or fed.state != ProcState.READY:
            continue
        if any(p.alive or p.state in PROC_NOT_ENDED for p in feeders):
            continue
        status = statuses.get(fed.name) or {}
        waiting = status.get("waiting_for_batch_s")
        if isinstance(waiting, bool) or not isinstance(waiting, (int, float)) or not waiting >= starved_s:
            continue
        if read_at.get(fed.name, 0.0) - max(p.ended_at or 0.0 for p in feeders) < starved_s:
            continue
        yield fed, feeders, status


def at_step(status: Mapping, total: object) -> str:
    """ " at step N of M" from a status's step and the run's total steps ("" without a step)."""
    step = status.get("step")
    at = f" at step {step}" if isinstance(step, int) and not isinstance(step, bool) else ""
    if at and isinstance(total, int) and not isinstance(total, bool):
        at += f" of {total}"
    return at
