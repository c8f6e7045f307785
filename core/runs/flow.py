"""Run flow, one rule for every client: is work flowing through a running run, and if not, why (the
verdict status reports show under `health`; process health is core.daemons.log_watch's).

Computed from files only: the run's state (run.json), its last trained step (metrics.jsonl) and what
its supervisor observed (health.json, core.daemons.log_watch: problem lines of each process log,
grouped and counted, and run-api's /status). Two verdicts carry a reason and a tip:

- `no_progress`: no trained step for `threshold_s` since the run became ready (every process ready,
  the environment registered with run-api) or since its last step. The threshold is the run's own
  pace: the longest of NO_STEP_MIN_S, a third of the start-up time of its slowest process (spawn to ready:
  the environment's imports and dataset, the trainer's model) and five step times, and never more
  than the stall threshold. A slow machine starts slowly too, so it waits longer there.
  $HERMES_RL_NO_STEP_S sets it outright (0: never).
  When no process logged a problem but the environments got DROPPED_GROUPS groups' worth of completions
  from the policy and run-api received no scored group, the reason says the environment drops what it scores.
- `failing`: a process (not run-api) logged at least FAILING_MIN_ERRORS error lines and more errors
  than run-api received scored groups: most of an environment's items fail, steps or not.

A starting run has no verdict state, but when a process that is not ready yet logged a problem, the reason
names it (`starting, env not ready yet: logged …`) instead of a bare `starting` until its readiness timeout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..base.failures import context_overflow, problem_tip
from ..base.fsutil import epoch_seconds, read_json
from ..base.records import HealthVerdict
from ..base.stall import stall_threshold
from ..base.states import RunStatus
from ..daemons.log_watch import HEALTH_FILE
from .runconfig import read_run_config

NO_STEP_ENV = "HERMES_RL_NO_STEP_S"
NO_STEP_MIN_S = 20.0
STEP_TIMES = 5.0
STARTUP_SHARE = 1 / 3
FAILING_MIN_ERRORS = 20
# Completions served, in groups, before a run that delivered nothing is said to drop what it scores: one group
# may still be in scoring, or (an environment that plays several turns an episode) still being played.
DROPPED_GROUPS = 2

_QUOTE_CHARS = 120


def no_step_threshold(startup_s: float | None, step_s: float | None) -> float:
    """Seconds without a trained step after which a ready run is reported as not progressing (0: never)."""
    fixed = os.environ.get(NO_STEP_ENV)
    if fixed:
        try:
            return max(0.0, float(fixed))
        except ValueError:
            pass
    threshold = max(NO_STEP_MIN_S, STARTUP_SHARE * (startup_s or 0.0), STEP_TIMES * (step_s or 0.0))
    stall = stall_threshold()
    return min(threshold, stall) if stall > 0 else threshold


def startup_seconds(processes) -> float | None:
    """The start-up time of the run's slowest process (spawn to ready), or None before any is ready."""
    times = [
        p["ready_at"] - p["started_at"]
        for p in processes or []
        if isinstance(p, dict)
        and isinstance(p.get("ready_at"), (int, float))
        and isinstance(p.get("started_at"), (int, float))
    ]
    return max(times) if times else None


def read_health_record(run_dir: str | os.PathLike) -> dict:
    try:
        record = read_json(Path(run_dir) / HEALTH_FILE)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _quote(message: str) -> str:
    text = message if len(message) <= _QUOTE_CHARS else message[: _QUOTE_CHARS - 1] + "…"
    overflow = context_overflow(message)
    if overflow and len(message) > _QUOTE_CHARS:  # the numbers that matter must survive the cut
        text += f" (the prompt has {overflow[0]} tokens; the model's context is {overflow[1]})"
    return f'"{text}"'


def _top_problem(processes: dict, *, errors_only: bool = False) -> tuple[str, dict] | None:
    best = None
    for name, observed in processes.items():
        for problem in observed.get("problems") or []:
            if errors_only and problem.get("level") != "error":
                continue
            if best is None or problem.get("count", 0) > best[1].get("count", 0):
                best = (name, problem)
    return best


def _policy_count(status: dict, key: str) -> int:
    """A count from the trainer's inference server's /health answer: `completions` served to the
    environments, `in_flight` requests being sampled now."""
    total = 0
    for answer in status.values():
        count = answer.get(key) if isinstance(answer, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            total += count
    return total


LONG_COMPLETION_TOKENS = 128  # a mean completion at least this long is what makes sampling slow on a CPU
OVERLOAD = 1.5  # a load average past this many times the cores: other work competes with the policy


def slow_policy_tip(status: dict, run_id: str, *, load: float, cores: int) -> str:
    """Why the policy is slow, from what was measured: the completions' mean length and the policy's
    tokens per second (the trainer's /health), the machine's load; the cause named is the one they show."""
    served, tokens = _policy_count(status, "completions"), _policy_count(status, "completion_tokens")
    seconds = sum(
        float(a["sample_s"])
        for a in status.values()
        if isinstance(a, dict) and isinstance(a.get("sample_s"), (int, float))
    )
    mean = tokens / served if served and tokens else None
    measured = [f"completions average {mean:.0f} tokens" if mean is not None else "completion lengths unknown yet"]
    if tokens and seconds > 0:
        measured.append(f"the policy samples {tokens / seconds:.0f} tokens/s")
    measured.append(f"load {load:.1f} on {cores} core(s)")
    if load > OVERLOAD * cores:
        cause = (
            "the machine is overloaded: other work competes with the policy (fewer runs at once, "
            "HERMES_RL_MAX_LOCAL_RUNS, or fewer other programs)"
        )
    elif mean is not None and mean >= LONG_COMPLETION_TOKENS:
        cause = (
            "long completions are slow on a CPU: a smaller max_token_length (a derived profile) or a shorter "
            "reply asked by the environment speeds each step"
        )
    elif mean is not None:
        cause = "the completions are short, so sampling itself is slow here"
    else:
        cause = "no completion has finished yet"
    return f"{', '.join(measured)}: {cause}; hermes-rl logs {run_id} --process tinker"


def _group_size(run: dict) -> int:
    """The run's group size (its config.yaml), or 8 when it cannot be read."""
    size = (read_run_config(run["run_id"]).get("env") or {}).get("group_size") if run.get("run_id") else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 8


def _api_words(status: dict) -> str:
    for answer in status.values():
        if isinstance(answer, dict) and "queue_size" in answer:
            return f"run-api holds {answer['queue_size']} scored group(s) at step {answer.get('current_step')}"
    return "run-api's status unknown"


def _problem_counts(processes: dict) -> dict:
    """Per process that logged any: its error and warning counts and its three commonest problems."""
    return {
        name: {"errors": p.get("errors", 0), "warnings": p.get("warnings", 0), "top": (p.get("problems") or [])[:3]}
        for name, p in processes.items()
        if p.get("errors") or p.get("warnings")
    }


def _starting_verdict(run: dict, verdict: HealthVerdict) -> HealthVerdict:
    """A starting run has no flow yet (state stays None), but a process not ready yet that logged a problem
    is the likely reason it waits (a dataset generator that never finishes, a download refused offline): say
    so, rather than a bare `starting` until its readiness timeout, minutes later."""
    waiting = {p.get("name") for p in run.get("processes") or [] if p.get("state") == "starting"}
    processes = (read_health_record(run.get("run_dir") or "") if run.get("run_dir") else {}).get("processes") or {}
    top = _top_problem({name: p for name, p in processes.items() if name in waiting})
    if top:
        name, problem = top
        verdict.update(
            {
                "process": name,
                "reason": f"starting, {name} not ready yet: logged {problem['count']:,} × {_quote(problem['message'])}",
                "tip": problem_tip(problem["message"], process=name, run_id=run.get("run_id") or "RUN"),
                "problems": _problem_counts(processes),
            }
        )
    return verdict


def flow_verdict(
    run: dict, last_metric: dict | None, *, startup_s: float | None = None, now: float | None = None
) -> HealthVerdict:
    """The verdict on a run (see the module's rule); state None for a run that is not running."""
    now = time.time() if now is None else now
    verdict: HealthVerdict = {
        "state": None,
        "reason": None,
        "tip": None,
        "process": None,
        "no_step_for_s": None,
        "threshold_s": None,
        "groups_delivered": None,
        "api": None,
        "problems": {},
    }
    if run.get("status") == RunStatus.STARTING:
        return _starting_verdict(run, verdict)
    if run.get("status") != RunStatus.RUNNING:
        return verdict
    run_id = run.get("run_id") or "RUN"
    record = read_health_record(run.get("run_dir") or "") if run.get("run_dir") else {}
    processes = record.get("processes") or {}
    status = record.get("status") or {}
    delivered = sum(int(p.get("delivered") or 0) for p in processes.values())
    verdict["groups_delivered"] = delivered
    verdict["api"] = status.get("api") if isinstance(status.get("api"), dict) else None
    verdict["problems"] = _problem_counts(processes)
    ready_at = epoch_seconds(run.get("started_at"))
    created = epoch_seconds(run.get("created_at"))
    last = last_metric or {}
    startup = startup_s if startup_s is not None else startup_seconds(run.get("processes"))
    threshold = no_step_threshold(startup, epoch_seconds(last.get("time/step_s", last.get("timing/step_s"))))
    since = max(t for t in (ready_at, epoch_seconds(last.get("time")), created, 0.0) if t is not None)
    idle = max(0.0, now - since)
    verdict.update({"threshold_s": round(threshold, 1), "no_step_for_s": round(idle, 1), "state": "ok"})

    if _failing(verdict, processes, delivered, run_id):
        return verdict
    if threshold <= 0 or idle <= threshold:
        return verdict
    what = "no trained step" if not last.get("step") else f"no trained step since step {last['step']}"
    verdict["state"] = "no_progress"
    _why_no_progress(verdict, run, processes, status, f"{what} in {idle:.0f} s", run_id)
    return verdict


def _failing(verdict: HealthVerdict, processes: dict, delivered: int, run_id: str) -> bool:
    """Whether a process that never delivered fails on most of its items: the verdict then says so."""
    senders = {name for name, p in processes.items() if p.get("delivered") or p.get("registered")}
    failing = _top_problem({n: p for n, p in processes.items() if n not in senders}, errors_only=True)
    if not failing:
        return False
    errors = int(processes[failing[0]].get("errors") or 0)
    if errors < FAILING_MIN_ERRORS or errors <= delivered:
        return False
    name, problem = failing
    share = round(100 * errors / (errors + delivered))
    verdict.update(
        {
            "state": "failing",
            "process": name,
            "reason": (
                f"running, {name} fails on {share}% of its items: logged {problem['count']:,} × "
                f"{_quote(problem['message'])} against {delivered:,} scored group(s) delivered"
            ),
            "tip": problem_tip(problem["message"], process=name, run_id=run_id),
        }
    )
    return True


def _why_no_progress(verdict: HealthVerdict, run: dict, processes: dict, status: dict, what: str, run_id: str) -> None:
    """The verdict's reason and tip (and the process, when one logged a problem) for `what` (no trained step
    in so long): the problem logged most, else groups dropped, else a slow policy, else the logs."""
    delivered = verdict["groups_delivered"] or 0
    top = _top_problem(processes)
    served = _policy_count(status, "completions")
    if top:
        name, problem = top
        verdict.update(
            {
                "process": name,
                "reason": (f"running, {what}: {name} logged {problem['count']:,} × " + _quote(problem["message"])),
                "tip": problem_tip(problem["message"], process=name, run_id=run_id),
            }
        )
    elif delivered == 0 and served and served >= DROPPED_GROUPS * _group_size(run):
        environment = run.get("environment") or "ENV"
        verdict.update(
            {
                "reason": (
                    f"running, {what}: the environment got {served:,} completions from the policy "
                    "and sent run-api no scored group: it drops the groups it scores (a group whose answers all "
                    "score the same carries no learning signal, and most environments drop it)"
                ),
                "tip": (
                    f"see its answers and their scores: hermes-rl test-inference --env {environment}; a larger "
                    "group_size gives a group more chances to differ, and a model too weak for the task scores "
                    "every answer alike (an environment that plays many turns an episode may still be in its first)"
                ),
            }
        )
    elif in_flight := _policy_count(status, "in_flight"):
        verdict.update(
            {
                "reason": (
                    f"running, {what}: the policy is still answering {in_flight:,} request(s) of the "
                    f"environment ({served:,} completions served so far); no process logged a problem"
                ),
                "tip": slow_policy_tip(status, run_id, load=os.getloadavg()[0], cores=os.cpu_count() or 1),
            }
        )
    else:
        verdict.update(
            {
                "reason": f"running, {what}; no process logged a problem ({_api_words(status)})",
                "tip": f"read the logs (hermes-rl logs {run_id}): the environment may be waiting on something",
            }
        )
