"""The state model every part of hermes-rl shares: run status, process state, how each is shown,
and the names of the metrics everyone reads. Defined here once; the supervisor, the watchdog, the
run library, the agent tools, the CLI and the dashboard all import it.

A run's recorded status (run.json, written by its supervisor or watchdog) is one of STARTING,
RUNNING, STOPPING, COMPLETED, FAILED, STOPPED. LOST and UNREADABLE are never recorded: readers derive
LOST when a non-final run's supervisor is gone, UNREADABLE when its run.json fails validation.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"  # derived by readers: the supervisor is gone and no final state was recorded
    UNREADABLE = "unreadable"  # derived by readers: run.json is missing fields, of wrong types or not JSON


class ProcState(StrEnum):
    PENDING = "pending"  # waiting to be started (or restarted)
    STARTING = "starting"  # started, its readiness probe has not passed yet
    READY = "ready"
    EXITED = "exited"  # ended by itself (a one-shot step that completed, or a clean exit)
    FAILED = "failed"
    STOPPED = "stopped"


# What the supervisor or watchdog records as the end of a run: it never changes again.
RECORDED_FINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED})
# The end of a run as readers see it: recorded, or lost.
FINAL = RECORDED_FINAL | {RunStatus.LOST, RunStatus.UNREADABLE}
# A supervisor is (or should be) working on the run.
ACTIVE = frozenset({RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING})
# A process whose group may still hold live members.
PROC_ALIVE = frozenset({ProcState.STARTING, ProcState.READY})
PROC_NOT_ENDED = PROC_ALIVE | {ProcState.PENDING}


# (icon, colour) per state, for the CLI (Rich styles) and the dashboard alike.
RUN_STYLE: dict[RunStatus, tuple[str, str]] = {
    RunStatus.STARTING: ("◌", "yellow"),
    RunStatus.RUNNING: ("●", "green"),
    RunStatus.STOPPING: ("◍", "yellow"),
    RunStatus.STOPPED: ("■", "grey62"),
    RunStatus.COMPLETED: ("✔", "bright_green"),
    RunStatus.FAILED: ("✖", "red"),
    RunStatus.LOST: ("?", "magenta"),
    RunStatus.UNREADABLE: ("!", "red"),
}
PROC_STYLE: dict[ProcState, tuple[str, str]] = {
    ProcState.PENDING: ("·", "grey62"),
    ProcState.STARTING: ("◌", "yellow"),
    ProcState.READY: ("●", "green"),
    ProcState.EXITED: ("✔", "grey62"),
    ProcState.FAILED: ("✖", "red"),
    ProcState.STOPPED: ("■", "grey62"),
}
UNKNOWN_STYLE = ("?", "white")


def run_style(status: object) -> tuple[str, str]:
    """A status's icon and colour; a labelled one ("completed (budget)", status_label) styled as its status."""
    if isinstance(status, str) and status not in RUN_STYLE and " (" in status:
        status = status.split(" (", 1)[0]
    return RUN_STYLE.get(status, UNKNOWN_STYLE)  # type: ignore[call-overload]


def ended_by(reason: object) -> str | None:
    """What ended a completed run before its last step, from the reason its trainer gave: "budget" or
    "plateau"; None otherwise."""
    if not isinstance(reason, str):
        return None
    if reason.startswith("budget reached"):
        return "budget"
    if reason.endswith("(stop_on_plateau)"):
        return "plateau"
    return None


def status_label(status: object, reason: object) -> str:
    """A run's status as lists show it: "completed (budget)" for a run its budget ended, never plainly
    "completed" (and "(plateau)" for stop_on_plateau)."""
    by = ended_by(reason) if status == RunStatus.COMPLETED else None
    return f"{status} ({by})" if by else str(status)


def proc_style(state: object) -> tuple[str, str]:
    return PROC_STYLE.get(state, UNKNOWN_STYLE)  # type: ignore[call-overload]


class Metric(StrEnum):
    """Metric names in metrics.jsonl (the trainer) and env_metrics.jsonl (environments)."""

    STEP = "step"
    TIME = "time"
    REWARD_MEAN = "reward/mean"
    LOSS = "train/loss"
    PERCENT_CORRECT = "train/percent_correct"
    EVAL_PERCENT_CORRECT = "eval/percent_correct"
    LOGPROBS_DIFF = "logprobs/diff"
    ADVANTAGES_STD = "advantages/std"


# Metrics with a direction: their "best" is their highest value. Others (the GRPO surrogate loss,
# logprob drift, advantage spread) have none.
HIGHER_IS_BETTER = frozenset({Metric.REWARD_MEAN, Metric.PERCENT_CORRECT, Metric.EVAL_PERCENT_CORRECT})

# The metrics a summary shows first (results, status reports, the dashboard's metrics pane).
HEADLINE_METRICS = (
    Metric.REWARD_MEAN,
    Metric.EVAL_PERCENT_CORRECT,
    Metric.LOSS,
    Metric.PERCENT_CORRECT,
    Metric.LOGPROBS_DIFF,
    Metric.ADVANTAGES_STD,
)


# One training step's phases as the trainer records them in metrics.jsonl, in seconds; together they
# make up STEP_TIME, the wall time from the previous step's row to this one's.
STEP_TIME = "time/step_s"
STEP_PHASES: dict[str, str] = {
    "time/wait_batch_s": "waiting for rollouts",
    "time/prepare_s": "preparing the batch",
    "time/forward_backward_s": "forward_backward",
    "time/optim_step_s": "optim_step",
    "time/sampler_refresh_s": "saving weights for the sampler",
    "time/checkpoint_s": "saving checkpoints",
    "time/log_s": "logging",
}

# The headline reward everywhere (runs listing, status, tools, compare, the dashboard): the mean of
# reward/mean over the last REWARD_WINDOW steps, not one batch's value (one batch of 16 is noisy).
REWARD_WINDOW = 20
