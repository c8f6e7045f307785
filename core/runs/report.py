"""What a client tells a person or an agent about one run: its status report and its results summary.

The agent tools (rl_check_status, rl_get_results) and the CLI (`hermes-rl status`, `hermes-rl results`)
answer from these functions, so they show the same fields, the same tips and the same log paths. A
client only names its own commands in the tips (NextSteps): the agent says rl_stop_training, the CLI
says `hermes-rl stop`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, TypedDict

from .. import runs
from ..base.errors import HermesError
from ..base.formatting import human_duration
from ..base.fsutil import epoch_seconds
from ..base.names import is_ascii_digits
from ..base.paths import run_dir
from ..base.records import (
    EnvironmentSummary,
    MetricsSummary,
    ProcessSummary,
    ResultsSummary,
    RunView,
    SampleCompletions,
    StartedRun,
    StatusReport,
)
from ..base.secrets import ENDPOINT_KEY_FILE
from ..base.states import FINAL, HEADLINE_METRICS, Metric, RunStatus
from ..daemons.run_audit import cached_audit
from ..readers import metrics, rollouts
from ..readers.metrics import headline_reward
from .cost import run_cost
from .progress import eval_plateau, step_time

# A full report reads the latest value of each metric from the metric files' last few MB only, so a
# report on a days-long run costs what one on a short run does.
METRICS_TAIL_BYTES = 4 << 20

# Where a metric summary looks for each value, first key first (older trainers wrote the later names).
_SUMMARY_KEYS = {
    "reward_mean": (Metric.REWARD_MEAN, "train/reward_mean"),
    "percent_correct": (Metric.PERCENT_CORRECT, "percent_correct"),
    "eval_percent_correct": (Metric.EVAL_PERCENT_CORRECT,),
    "loss": (Metric.LOSS, "loss"),
}


@dataclass(frozen=True)
class NextSteps:
    """How a client names the actions its tips suggest; `{run_id}` is filled in."""

    stop: str = "stop the run"
    results: str = "read its results"
    start: str = "start a new run"

    def fill(self, run_id: str) -> NextSteps:
        return NextSteps(*(text.format(run_id=run_id) for text in (self.stop, self.results, self.start)))


# -- pieces of a report (also used on a run just started) --------------------------------------------


def log_paths(run: RunView | StartedRun) -> dict[str, str]:
    """{process name: log file path} of the processes that have a readable log (the run library derives
    each path from the run id and the process name, and leaves out one leading outside $HERMES_HOME)."""
    return {proc["name"]: str(proc["log"]) for proc in run.get("processes") or [] if proc.get("log")}


def endpoint(run: RunView) -> str | None:
    """The live run's OpenAI-compatible endpoint (the trainer's inference server, on loopback): vf-eval,
    test-inference and any OpenAI client sample the current policy there."""
    port = (run.get("ports") or {}).get("inference")
    if run.get("status") not in (RunStatus.STARTING, RunStatus.RUNNING) or not isinstance(port, int):
        return None
    return f"http://127.0.0.1:{port}/v1"


def endpoint_key_file(run: RunView) -> str | None:
    """The file holding the key the live run's endpoint requires (a bearer token), or None."""
    path = run_dir(run["run_id"]) / ENDPOINT_KEY_FILE
    return str(path) if endpoint(run) is not None and path.is_file() else None


def wandb_url(run: RunView) -> str | None:
    """The W&B run's URL when it logs online, else None."""
    wandb = run.get("wandb") or {}
    if isinstance(wandb, dict) and wandb.get("mode") == "online" and wandb.get("url"):
        return str(wandb["url"])
    return None


def running_time_s(run: RunView, now: float | None = None) -> float | None:
    """Seconds since the run started (or was created), to its end for a finished run."""
    start = epoch_seconds(run.get("started_at")) or epoch_seconds(run.get("created_at"))
    if start is None:
        return None
    end = epoch_seconds(run.get("ended_at")) if run.get("status") in FINAL else None
    return round(max(0.0, (end or (time.time() if now is None else now)) - start), 1)


def process_summaries(run: RunView) -> list[ProcessSummary]:
    return [
        {
            "name": proc["name"],
            "state": proc.get("state"),
            "health": proc.get("health") or proc.get("state"),
            "pid": proc.get("pid"),
            "exit_code": proc.get("exit_code"),
            "uptime_s": proc.get("uptime_s"),
            "restarts": proc.get("restarts", 0),
            "cpu_percent": proc.get("cpu_percent"),
            "rss": proc.get("rss"),
            "cwd": proc.get("cwd"),
            "import_path": proc.get("import_path"),
            "launcher": proc.get("launcher") or "local",
            "job_id": proc.get("job_id"),
            "node": proc.get("node"),
            "where": proc.get("where"),  # where it runs, in the same words for every launcher
            "slurm_state": proc.get("slurm_state"),  # a Slurm job's state, as earlier versions named it
        }
        for proc in run.get("processes") or []
    ]


def environment_summaries(run: RunView, latest: dict[str, Any]) -> list[EnvironmentSummary]:
    """Each environment of the run with its workers and, when the run trains several, its own latest
    metrics (the readers' KEY@ENVIRONMENT keys)."""
    procs = {p.get("name"): p for p in run.get("processes") or []}
    rows = ((run.get("workers") or {}).get("environments")) or [
        {
            "environment": run.get("environment"),
            "weight": 1.0,
            "min_batch_allocation": None,
            "processes": [n for n in procs if n == "env" or is_ascii_digits((n or "").removeprefix("env-"))],
        }
    ]
    several = len(rows) > 1
    out: list[EnvironmentSummary] = []
    for row in rows:
        name = str(row.get("environment"))
        suffix = f"@{name}"
        own = {k[: -len(suffix)]: v for k, v in latest.items() if k.endswith(suffix)} if several else {}
        workers = [n for n in row.get("processes") or [] if n in procs]
        out.append(
            {
                "environment": name,
                "weight": row.get("weight", 1.0),
                "min_batch_allocation": row.get("min_batch_allocation"),
                "processes": workers,
                "ready": sum(1 for n in workers if procs[n].get("state") == "ready"),
                "metrics": own,
            }
        )
    return out


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def metrics_summary(run: RunView, latest: dict[str, Any]) -> MetricsSummary:
    """The headline numbers of `latest` (the newest value of each metric)."""
    # The step is the trainer's: environment rows carry the step they saw, which can run one past the end.
    trained = (run.get("last_metric") or {}).get(Metric.STEP)
    summary: dict[str, Any] = {
        "step": trained if trained is not None else latest.get(Metric.STEP),
        "total_steps": run.get("total_steps"),
    }
    for name, keys in _SUMMARY_KEYS.items():
        summary[name] = next((v for v in (_finite(latest.get(k)) for k in keys) if v is not None), None)
    return summary  # type: ignore[return-value]


def latest_metrics(run: RunView) -> dict[str, Any]:
    """The newest value of each metric, environment rows merged; the run's last trainer row if unreadable."""
    last = dict(run.get("last_metric") or {})
    try:
        return metrics.last_metrics(run["run_id"], tail_bytes=METRICS_TAIL_BYTES) or last
    except (OSError, HermesError):
        return last


def sample_completions(run_id: str) -> SampleCompletions | None:
    """A few short completions of the latest recorded step (its best and worst), so a reader can see
    what the policy writes (reward hacking shows here first); None without rollouts.jsonl."""
    try:
        return rollouts.sample_completions(run_id)  # type: ignore[return-value]
    except (OSError, HermesError):
        return None


def tips(run: RunView, steps: NextSteps = NextSteps()) -> list[str]:
    """What to do next about the run, in the client's own command names."""
    steps = steps.fill(run["run_id"])
    status = run.get("status")
    health = run.get("health") or {}
    tip = health.get("tip")
    out: list[str] = [tip] if tip else []
    if run.get("stalled") is True:
        idle = human_duration(run.get("stalled_for_s") or 0)
        out.append(
            f"no training step or trainer log line for {idle}: read the trainer and env logs; "
            f"{steps.stop} if it is stuck"
        )
    if status == RunStatus.FAILED:
        out.append(f"read the log of the process that failed (log_paths); fix and {steps.start} again")
    elif status == RunStatus.COMPLETED:
        out.append(f"{steps.results} for final metrics and the checkpoint")
    elif status == RunStatus.LOST:
        out.append(f"the supervisor is gone; {steps.stop} cleans up any processes left")
    return out


def run_audit(run: RunView) -> dict[str, Any]:
    """{verdict, reasons, signals} of the run's learning signals (core.base.audit_rule; docs/audit.md)."""
    return run.get("audit") or cached_audit(run.get("run_dir") or "/nonexistent")


# -- the two reports ----------------------------------------------------------------------------------


class ProgressFields(TypedDict):
    reward: dict[str, Any] | None
    step_time: dict[str, Any] | None
    plateau: dict[str, Any] | None


def progress_fields(run: RunView) -> ProgressFields:
    """The status report's `reward` (trailing mean over reward_window steps), `step_time` (where a
    step's time goes) and `plateau` ("eval flat for N evals since step S", or None)."""
    folder = run.get("run_dir") or ""
    try:
        return {
            "reward": headline_reward(folder),
            "step_time": step_time(folder),
            "plateau": eval_plateau(folder),
        }
    except (OSError, HermesError):
        return {"reward": None, "step_time": None, "plateau": None}


def _cost(run: RunView) -> dict[str, Any] | None:
    """The run's cost (core.runs.cost.run_cost); None with the reason logged when prices.yaml is unusable
    (a bad price file must not hide a run's status)."""
    try:
        return run_cost(run)
    except HermesError as exc:
        return {"usd": None, "text": f"price unknown: {exc.message}", "tokens": None, "prices_as_of": None}


def status_report_of(run: RunView, *, steps: NextSteps = NextSteps(), now: float | None = None) -> StatusReport:
    """The status report of a run view already read (runs.get_run)."""
    stalled = run.get("stalled") is True
    health = run.get("health") or {}
    latest = latest_metrics(run)
    return {
        "run_id": run["run_id"],
        "status": run.get("status"),
        # a running run has no recorded reason: whether work flows through it is its reason then
        "reason": health.get("reason") or run.get("reason"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "processes": process_summaries(run),
        "environments": environment_summaries(run, latest),
        "running_time_s": running_time_s(run, now),
        "metrics": metrics_summary(run, latest),
        **progress_fields(run),
        "cost": _cost(run),
        "stalled": stalled,
        "stalled_for_s": _finite(run.get("stalled_for_s")) if stalled else None,
        "health": health,
        "endpoint": endpoint(run),
        "endpoint_key_file": endpoint_key_file(run),
        "wandb_url": wandb_url(run),
        "log_paths": log_paths(run),
        "sample_completions": sample_completions(run["run_id"]),
        "tips": tips(run, steps),
        "audit": run_audit(run),
    }


def status_report(run_id: str, *, steps: NextSteps = NextSteps(), now: float | None = None) -> StatusReport:
    """A run's state, processes (with CPU and memory), headline metrics, stall verdict, running time,
    W&B URL, log paths and next steps. NotFound for an unknown run."""
    return status_report_of(runs.get_run(run_id), steps=steps, now=now)


def results_summary(run_id: str) -> ResultsSummary:
    """A run's final metrics, a sampled history of its headline metrics (small enough for an agent;
    final_metrics has them all), where its weights are, its W&B URL and log paths."""
    results = runs.get_results(run_id)
    run = runs.get_run(run_id, sample=False)
    keys = [str(key) for key in (Metric.STEP, *HEADLINE_METRICS)]
    history = [{k: row[k] for k in keys if k in row} for row in results.get("history") or [] if isinstance(row, dict)]
    return {
        "run_id": run_id,
        "status": results.get("status", run.get("status")),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "reason": run.get("reason"),
        "total_steps": run.get("total_steps"),
        "final_metrics": results.get("final_metrics") or {},
        "history": history,
        "eval_accuracy": results.get("eval_accuracy"),
        "checkpoint": results.get("checkpoint"),
        "tinker_path": results.get("tinker_path"),
        "cost": _cost(run),
        "wandb_url": wandb_url(run),
        "log_paths": log_paths(run),
        "sample_completions": sample_completions(run_id),
        "audit": run_audit(run),
    }
