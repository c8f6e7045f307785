"""The ten rl_* agent tools: thin JSON wrappers over core, shared by the Hermes plugin and MCP server.

Each tool is a plain function returning a JSON-serialisable dict. Failures come back as
{"error": ..., "hint": ...}: a HermesError through its to_dict(), anything unexpected caught here
and reduced to one line (no traceback, secrets redacted). TOOL_SCHEMAS (OpenAI function format) is
generated from one table, TOOLS, kept next to the functions; each description lists exactly the keys
the tool returns, and the tests hold every tool to its list. `call_tool(name, args)` checks the
arguments against the table and dispatches; both integrations call only that.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from ..base.errors import BadInput, HermesError, NotFound
from ..base.formatting import human_duration, shown_value
from ..base.paths import validate_run_id
from ..base.records import EnvironmentSummary, MetricsSummary, ProcessSummary, ResultsSummary, RunSummary
from ..base.secrets import redact
from ..base.states import FINAL, RunStatus
from ..readers.logs import data_text
from ..runs import report
from ..runs.report import NextSteps

log = logging.getLogger(__name__)

_MAX_DEPTH = 12
# The tools' names for the actions a report's tips suggest.
AGENT_STEPS = NextSteps(
    stop="rl_stop_training('{run_id}')", results="rl_get_results('{run_id}')", start="rl_start_training"
)


# -- JSON safety ------------------------------------------------------------------------------


def jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-serialisable copy: NaN/inf -> None, Path -> str, tuples/sets -> lists, keys -> str."""
    if _depth > _MAX_DEPTH:
        return str(value)[:200]
    if isinstance(value, str):
        return data_text(value)  # text from environments, models and logs: no escapes, bounded
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value), _depth + 1)
    if isinstance(value, dict):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, _depth + 1) for v in value]
    return str(value)[:500]


# Core's messages name the CLI's commands (what a person types); an agent is told the tool instead.
_CLI_TO_TOOL = (
    (re.compile(r"`?hermes-rl envs`?"), "rl_list_environments"),
    (re.compile(r"`?hermes-rl runs`?"), "rl_list_runs"),
    (re.compile(r"`?hermes-rl select ENV`?"), "rl_select_environment(name)"),
    (re.compile(r"`?hermes-rl stop RUN_ID`?"), "rl_stop_training(run_id)"),
    (re.compile(r"`?hermes-rl stop ([0-9a-f]{8})`?"), r"rl_stop_training('\1')"),
    (re.compile(r"`?hermes-rl stop`?"), "rl_stop_training"),  # bare, after the forms naming a run
    (re.compile(r"`?hermes-rl config --set FIELD=VALUE`?"), "rl_edit_config(field, value)"),
)


def agent_wording(text: str) -> str:
    """`text` with each CLI command it names replaced by the tool that does the same."""
    for pattern, tool in _CLI_TO_TOOL:
        text = pattern.sub(tool, text)
    return text


def _error_dict(exc: BaseException, tool: str) -> dict:
    if isinstance(exc, HermesError):
        out = exc.to_dict()
        if exc.tool_extra:
            out.update(exc.tool_extra)
        return jsonable({k: agent_wording(redact(v)) if isinstance(v, str) else v for k, v in out.items()})
    log.debug("%s failed", tool, exc_info=True)
    message = redact(str(exc).splitlines()[0] if str(exc) else "")[:300]
    return {
        "error": f"{tool} failed: {type(exc).__name__}" + (f": {message}" if message else ""),
        "hint": "this is unexpected; check the logs under $HERMES_HOME/logs/rl_training and report it if it persists",
    }


def _tool(func: Callable[..., Mapping[str, Any]]) -> Callable[..., dict]:
    """Tool boundary: never raise, always a JSON-serialisable dict."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs) -> dict:
        try:
            result = func(*args, **kwargs)
        except Exception as exc:  # the boundary: every failure becomes a JSON error
            return _error_dict(exc, func.__name__)
        return jsonable(result)

    return wrapper


# -- helpers -----------------------------------------------------------------------------------


def _selection(in_use: bool = True) -> dict:
    """The selected environment and the profile a run started now would use: the chosen one, else the
    default (`tinker` with a Tinker key, `local` without), never null (`in_use=False`: as chosen, None
    when none was, so that a start says which default it took)."""
    from ..envs import drafts

    selection = drafts.current_selection() or {}
    chosen = selection.get("profile")
    return {"environment": selection.get("environment"), "profile": _profile_in_use(chosen) if in_use else chosen}


def _profile_in_use(chosen: str | None) -> str | None:
    from ..envs.profiles import resolve_profile

    try:
        return resolve_profile(chosen)[0].name
    except HermesError:  # a chosen profile whose file went bad: named as chosen, start says what is wrong
        return chosen


# -- the ten tools -----------------------------------------------------------------------------


@_tool
def rl_list_environments() -> dict:
    from ..envs import discovery

    envs = discovery.discover_environments()
    usable = [e for e in envs if not e.error]
    broken = [e for e in envs if e.error]
    shared = {e.name for e in usable if e.duplicate_of}
    selection = _selection()
    tips = []
    if not usable:
        tips.append("no environments found: add a BaseEnv subclass file to $HERMES_HOME/rl/environments/")
    elif not selection["environment"]:
        tips.append("select one by its id with rl_select_environment(name), then review it with rl_get_current_config")
    else:
        tips.append(
            f"{selection['environment']!r} is selected: rl_get_current_config to review, rl_test_inference "
            "to try it against models, rl_start_training to train"
        )
    if shared:
        tips.append("several environments share a name: each has its own id; the bare name means the one marked")
    if broken:
        tips.append("files under 'errors' failed to load; fix them to make them selectable")
    rows = []
    for e in usable:
        row: dict[str, Any] = {
            "id": e.id,
            "name": e.name,
            "class_name": e.class_name,
            "file": e.file,
            "description": e.description,
            "source": e.source,
            "kind": e.kind,
        }
        if e.kind != "atropos":
            row["python"] = e.python
        if e.refused:
            row["runnable"] = False
            row["why_not"] = e.refused
        if e.name in shared:
            row["bare_name_selects_this"] = e.id == e.name
        if e.abstract:
            row["runnable"] = False
            row["why_not"] = e.abstract
        rows.append(row)
    return {
        "environments": rows,
        "errors": [
            {"id": e.id, "name": e.name, "kind": e.kind, "file": e.file, "error": agent_wording(e.error or "")}
            for e in broken
        ],
        "selected": selection["environment"],
        "profile": selection["profile"],
        "tips": tips,
    }


@_tool
def rl_select_environment(name: str) -> dict:
    from ..envs import discovery, drafts

    if not isinstance(name, str) or not name.strip():
        raise BadInput("name must be an environment name", hint="see rl_list_environments")
    try:
        info = discovery.find_environment(name)
    except NotFound as exc:
        available = sorted(e.id for e in discovery.discover_environments() if not e.error)
        exc.tool_extra = {"available": available}
        raise
    if info.error:
        raise BadInput(f"environment {shown_value(name, 100)} cannot be loaded: {info.error}", hint=f"fix {info.file}")
    selected = drafts.select_environment(info.id)  # core keeps the chosen profile
    return {
        "selected": info.id,
        "profile": _profile_in_use(selected.get("profile")),
        "class_name": info.class_name,
        "file": info.file,
        "description": info.description,
        "tips": [
            "review and change its settings with rl_get_current_config / rl_edit_config, "
            "try it with rl_test_inference, then rl_start_training"
        ]
        + ([selected["notice"]] if selected.get("notice") else []),
    }


@_tool
def rl_get_current_config() -> dict:
    from ..envs import drafts

    view = drafts.get_config()  # the selection; core falls back to the profile's default environment
    editable = [
        {
            "name": f.get("name"),
            "type": f.get("type"),
            "default": f.get("default"),
            "description": f.get("description"),
            "value": f.get("value"),
            "modified": bool(f.get("modified")),
            "choices": f.get("choices"),
        }
        for f in view.editable
    ]
    locked = [{"name": f.get("name"), "value": f.get("value"), "reason": f.get("reason")} for f in view.locked]
    return {
        "environment": view.environment,
        "profile": view.profile,
        "editable": editable,
        "locked": locked,
        "notices": [view.notice] if view.notice else [],
        "warnings": list(view.warnings or []),
        "tips": [
            "change an editable field with rl_edit_config(field, value); "
            "training fields (learning_rate, total_steps, lora_rank, group_size, batch_size) included; "
            "locked fields are the profile's backend (pick or derive another profile)"
        ],
    }


@_tool
def rl_edit_config(field: str, value: Any) -> dict:
    from ..envs import drafts

    if not isinstance(field, str) or not field.strip():
        raise BadInput("field must be a field name", hint="see rl_get_current_config for the editable fields")
    change = drafts.set_field(field, value)  # the selection, resolved as rl_get_current_config does
    return {
        "environment": change["environment"],
        "profile": change["profile"],
        "field": change["field"],
        "value": change["value"],
        "previous": change["previous"],
        "default": change["default"],
        "modified": change["modified"],
        "notices": list(change.get("notices") or []),
    }


_long_lived = False


def keep_warm() -> None:
    """For a client that lives as long as an agent's session (the MCP server, the Hermes plugin), as the
    dashboard does: its config probes fork from one warm server (core.envs.probe.keep_warm), and from its
    first training run or inference test on it keeps a warm base that the processes of the runs and tests
    it starts fork from (core.runs.keep_runs_warm). A one-off call (the CLI) keeps neither."""
    global _long_lived
    from ..envs.probe import keep_warm as keep_probes_warm

    keep_probes_warm()
    _long_lived = True


def _keep_runs_warm() -> None:
    if _long_lived:
        from .. import runs

        runs.keep_runs_warm()


@_tool
def rl_start_training(resume_run_id: str | None = None, workers: dict | None = None, estimate: bool = False) -> dict:
    from .. import runs

    if estimate:  # what the run would cost; nothing starts
        from ..runs.cost import estimate_start

        selection = _selection()
        return estimate_start(selection["environment"], selection["profile"])
    _keep_runs_warm()
    if resume_run_id is not None:
        if workers:
            raise BadInput("a resumed run keeps its parent's workers", hint="leave out workers")
        validate_run_id(resume_run_id)
        run = runs.resume_run(resume_run_id)
    else:
        if workers is not None and not isinstance(workers, dict):
            raise BadInput("workers must be an object", hint="see docs/slurm.md for its keys")
        selection = _selection(in_use=False)
        run = runs.start_run(selection["environment"], selection["profile"], workers=workers or None)
    run_id = run["run_id"]
    wandb = run.get("wandb") or {}
    return {
        "run_id": run_id,
        "status": run.get("status"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "total_steps": run.get("total_steps"),
        "config_path": run.get("config_path"),
        "parent_run_id": run.get("parent_run_id"),
        "log_paths": report.log_paths(run),
        "wandb": {"mode": wandb.get("mode"), "project": wandb.get("project"), "run_name": wandb.get("run_name")},
        "notices": list(run.get("notices") or []),
        "tips": [
            f"check progress with rl_check_status('{run_id}') (full reports at most every "
            f"{human_duration(_interval_or_default())}, state changes at once); stop with rl_stop_training"
        ],
    }


def _interval_or_default() -> float:
    from .status_limits import DEFAULT_INTERVAL_S, resolve_interval

    try:
        return resolve_interval(None)
    except HermesError:
        return float(DEFAULT_INTERVAL_S)


@_tool
def rl_check_status(run_id: str, min_interval_s: float | None = None) -> dict:
    validate_run_id(run_id)
    from .. import runs
    from . import status_limits

    interval = status_limits.resolve_interval(min_interval_s)
    run = runs.get_run(run_id)  # NotFound for an unknown id: errors are never rate-limited
    now = time.time()
    status = run.get("status")
    state = f"{status}+stalled" if run.get("stalled") is True else str(status)
    flow = run.get("health") or {}
    if flow.get("state") not in (None, "ok"):  # work stopped flowing, or most items fail: at once, as a failure is
        state += f"+{flow['state']}"
    elif flow.get("reason"):  # no state but a reason: a starting run's unready process logged a problem
        state += "+waiting"
    verdict = (run.get("audit") or {}).get("verdict")
    if verdict in ("no_signal", "suspect"):  # the audit turned (docs/audit.md): reported at once too
        state += f"+{verdict}"
    final = status in FINAL
    decision = status_limits.decide(run_id, state, interval_s=interval, final=final, now=now)
    if not decision.full:
        step = (run.get("last_metric") or {}).get("step")  # the newest trainer row: enough for a step
        progress = f", step {step}/{run.get('total_steps')}" if step is not None else ""
        return {
            "run_id": run_id,
            "status": status,
            "rate_limited": True,
            "message": (
                f"no change: still {status}{progress}; last full report "
                f"{human_duration(now - (decision.last_reported_at or now))} ago, next check in "
                f"{decision.next_check_in_s} s (a failure or stall is reported at once)"
            ),
            "next_check_in_s": decision.next_check_in_s,
        }
    full = report.status_report_of(run, steps=AGENT_STEPS, now=now)
    if status in (RunStatus.STARTING, RunStatus.RUNNING):
        full["tips"].append(f"next full report in {human_duration(interval)} unless the state changes")
    return {
        "run_id": run_id,
        "status": status,
        "rate_limited": False,
        "report_reason": decision.reason,
        "previous_state": decision.previous_state,
        **full,
        "next_check_in_s": 0 if final else int(interval),
    }


@_tool
def rl_stop_training(run_id: str) -> dict:
    validate_run_id(run_id)
    from .. import runs
    from ..runs.control import stop_wait_s

    before = runs.get_run(run_id, sample=False)
    wait = stop_wait_s(run_id)  # as long as the run's stop sequence can take: never "failed" while it stops
    run = runs.stop_run(run_id, wait=wait)
    problem = runs.stop_not_done(run, wait)
    if problem is not None:
        raise problem  # the agent is told what still runs, never that it stopped
    return {
        "run_id": run_id,
        "status": run.get("status"),
        "previous_status": before.get("status"),
        "reason": run.get("reason"),
        "processes": [
            {"name": p.get("name"), "state": p.get("state"), "exit_code": p.get("exit_code")}
            for p in run.get("processes") or []
        ],
    }


@_tool
def rl_get_results(run_id: str) -> ResultsSummary:
    validate_run_id(run_id)
    return report.results_summary(run_id)


@_tool
def rl_list_runs(
    status: str | None = None,
    environment: str | None = None,
    sweep: str | None = None,
    text: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> dict:
    from .. import runs

    statuses = [s.strip() for s in status.split(",") if s.strip()] if status else None
    summaries = runs.list_runs(status=statuses, environment=environment, sweep=sweep, text=text)
    page = summaries[offset : offset + limit]
    return {"runs": page, "count": len(page), "total": len(summaries)}


# Set by a client that can give up on a call (the MCP server on a cancelled request): a tool that
# runs a long child (rl_test_inference) ends it as soon as the event is set.
CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("hermes_rl_tool_cancel", default=None)


@_tool
def rl_test_inference(
    num_steps: int = 3, group_size: int = 16, models: list[str] | None = None, base_url: str | None = None
) -> dict:
    from ..runs.trial import InferenceTrial

    _keep_runs_warm()
    trial = InferenceTrial.prepare(num_steps, group_size, models, base_url, cancel_event=CANCEL.get())
    return trial.run()


# -- the table ----------------------------------------------------------------------------------


def _fields(record: type) -> str:
    """A record's keys as a schema lists them: {a, b, c}."""
    return "{" + ", ".join(record.__annotations__) + "}"


_RUN_ID = {"type": "string", "description": "run id, 8 hex characters (rl_list_runs)"}


@dataclass(frozen=True)
class Tool:
    """One tool: what the model is told (summary and parameters, sent with every request, so short) and
    what it returns (`returns`: key -> meaning, the contract the tests hold every answer to and
    docs/agent_tools.md lists; the answers' keys explain themselves, the skill teaches the workflow)."""

    name: str
    func: Callable[..., dict]
    summary: str
    properties: dict = field(default_factory=dict)
    required: tuple[str, ...] = ()
    returns: dict = field(default_factory=dict)  # key -> what it holds (always present on success)
    returns_alt: dict | None = None  # a second success shape (rl_check_status rate-limited)

    @property
    def description(self) -> str:
        return self.summary

    @property
    def schema(self) -> dict:
        parameters: dict = {"type": "object", "properties": dict(self.properties)}
        if self.required:
            parameters["required"] = list(self.required)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


_SAMPLES = (
    "the latest recorded step's completions, to see what the policy writes (reward hacking shows here): "
    "{step, completions (how many that step), zero_reward (how many scored 0), best and worst: up to 2 each of "
    "{group, prompt, text (cut at 160 characters), reward, advantage, finish}}, or null before any is recorded"
)

_COST = (
    "{usd (null: price unknown), text, tokens: {prefill, sample, train}, prices_as_of, price, cpu_s, "
    "projected: {usd, steps, text} at the measured rate} (docs/cost.md)"
)
_ESTIMATE = {  # rl_start_training(estimate=true)
    "usd": "expected USD, null when the model has no price",
    "text": "str",
    "tokens": "{prefill, sample, train} for the whole run",
    "per_step": "{prefill, sample, train}",
    "steps": "int",
    "assumptions": "list of what the estimate assumes",
    "model": "str",
    "price": "{prefill, sample, train (USD per million tokens), as_of, source} or null",
    "prices_as_of": "date or null",
    "price_source": "str or null",
    "cpu_s": "null",
    "environment": "str",
    "profile": "str",
    "backend": "str",
    "budget_usd": "the run's budget_usd or null",
}
_AUDIT = (
    "{verdict: learning|flat|no_signal|suspect|unknown, reasons (one line each, with the numbers and what to do), "
    "signals {zero_variance_share, truncated_share, mean_completion_tokens, length_drift, entropy, staleness, "
    "advantage_spread, kl_start, reward_components, reward_first/last, eval_first/last, ...}}: is it learning, "
    "and if not why (docs/audit.md)"
)

_STATUS_FULL = {
    "run_id": "str",
    "status": "starting|running|stopping|stopped|completed|failed|lost",
    "rate_limited": "false",
    "report_reason": "why this is a full report: first check|state changed|interval passed|final state",
    "previous_state": "the state last reported (null on the first check)",
    "reason": "why the run ended, in words; while it runs, why work does not flow (see health), else null",
    "environment": "str",
    "profile": "str",
    "processes": f"list of {_fields(ProcessSummary)}",
    "environments": f"list of {_fields(EnvironmentSummary)}: each environment's workers and own metrics",
    "running_time_s": "seconds since start (to the end for finished runs)",
    "metrics": f"{_fields(MetricsSummary)} (each null until reported)",
    "reward": "{value, window, steps}: reward/mean averaged over the last `window` steps (the headline reward), "
    "or null",
    "step_time": "{step_s, phases (time/... seconds), dominant: {key, label, share}, steps, text} over the last "
    "steps, e.g. 'step 0.11 s: 64% waiting for rollouts'; null before the first step",
    "plateau": "{flat_evals, since_step, best, text} once eval accuracy has been flat for 3 evals, else null",
    "cost": _COST,
    "stalled": "true when a running run wrote no metric row and no line in its trainer's log for "
    "HERMES_RL_STALL_S seconds (default 900)",
    "stalled_for_s": "seconds without progress when stalled, else null",
    "health": "{state: ok|no_progress|failing (null unless running), reason (a starting run: the problem its "
    "unready process logged), tip, process, no_step_for_s, "
    "threshold_s, groups_delivered, api (run-api's /status), problems (per process: error and warning counts, "
    "most frequent messages)}; a change of state, or a starting run's new reason, is reported at once",
    "endpoint": "the live run's OpenAI-compatible endpoint over its current policy (loopback; vf-eval and any "
    "OpenAI client sample it there), else null",
    "endpoint_key_file": "the file holding the key the endpoint requires as a bearer token (a path; the key is "
    "never in a report), else null",
    "wandb_url": "the W&B run URL when W&B is online, else null",
    "log_paths": "{process name: log file path}",
    "sample_completions": _SAMPLES,
    "next_check_in_s": "seconds until the next full report unless the state changes (0 for finished runs)",
    "tips": "list of next steps",
    "audit": _AUDIT + "; a turn to no_signal or suspect is reported at once",
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "rl_list_environments",
        rl_list_environments,
        "List the trainable RL environments (Atropos BaseEnvs, verifiers tasksets) and the current selection. "
        "Start here; the workflow is in the skill rl:training.",
        returns={
            "environments": "list of {id, name, class_name, file, description, source}; when several share a "
            "name, each has its own id (name@qualifier) and bare_name_selects_this; a base class has runnable: "
            "false and why_not",
            "errors": "list of {id, name, file, error} for files that failed to load",
            "selected": "the selected environment id or null",
            "profile": "the selected profile or null",
            "tips": "list of next steps",
        },
    ),
    Tool(
        "rl_select_environment",
        rl_select_environment,
        "Select the environment the config, test and start tools work on (saved, shared with the dashboard).",
        {"name": {"type": "string", "description": "environment id from rl_list_environments (or a unique name)"}},
        ("name",),
        returns={
            "selected": "the environment id",
            "profile": "the profile in use or null",
            "class_name": "str",
            "file": "str",
            "description": "str",
            "tips": "list of next steps",
        },
    ),
    Tool(
        "rl_get_current_config",
        rl_get_current_config,
        "Show the selected environment's training config: editable fields (type, default, value) and locked "
        "fields, which the profile sets (with the reason).",
        returns={
            "environment": "str",
            "profile": "str",
            "editable": "list of {name, type, default, description, value, modified, choices}",
            "locked": "list of {name, value, reason}",
            "notices": "list of notes on the profile choice (e.g. no TINKER_API_KEY: local)",
            "warnings": "list of problems found and ignored (e.g. a corrupt draft)",
            "tips": "list of next steps",
        },
    ),
    Tool(
        "rl_edit_config",
        rl_edit_config,
        "Set one editable config field of the selected environment, validated and coerced to its type; "
        "locked and unknown fields are refused with the reason.",
        {
            "field": {"type": "string", "description": "editable field name from rl_get_current_config"},
            "value": {"description": "new value, of the field's type"},
        },
        ("field", "value"),
        returns={
            "environment": "str",
            "profile": "str",
            "field": "str",
            "value": "the value now stored",
            "previous": "the value before the change",
            "default": "the field's default",
            "modified": "true when the value differs from the default",
            "notices": "list of notes (e.g. a corrupt draft moved aside)",
        },
    ),
    Tool(
        "rl_start_training",
        rl_start_training,
        "Start training the selected environment in the background (Atropos API, trainer and environment, "
        "supervised; the run outlives this conversation). Without TINKER_API_KEY it runs on the local CPU "
        "backend. resume_run_id instead continues an ended run from its last saved state.",
        {
            "resume_run_id": {**_RUN_ID, "description": "optional: ended run to continue"},
            "estimate": {"type": "boolean", "description": "true: only the expected tokens and USD; starts nothing"},
            "workers": {
                "type": "object",
                "description": "optional: {replicas, launcher: local|slurm|ray, "
                "slurm: {partition, time, account, qos, gres...}, "
                "environments: [{environment, weight, min_batch_allocation, replicas}]}",
            },
        },
        returns={
            "run_id": "str",
            "parent_run_id": "the run this one continues, or null",
            "status": "starting|running",
            "environment": "str",
            "profile": "str",
            "total_steps": "int",
            "config_path": "path of the run's config.yaml",
            "log_paths": "{process name: log file path}",
            "wandb": "{mode, project, run_name}",
            "notices": "list of notes on the backend choice (e.g. no TINKER_API_KEY: local)",
            "tips": "list of next steps",
        },
        returns_alt=_ESTIMATE,
    ),
    Tool(
        "rl_check_status",
        rl_check_status,
        "A run's state, processes, latest metrics and sample completions. Full reports at most every "
        "min_interval_s; a repeat sooner gets a short 'no change' answer, but a state change (completed, "
        "failed, stopped, stalled, lost) is reported at once and a finished run always in full.",
        {
            "run_id": _RUN_ID,
            "min_interval_s": {
                "type": "number",
                "minimum": 0,
                "description": "seconds between full reports (default 1800, env HERMES_RL_STATUS_INTERVAL_S); "
                "lower it only to look closer now",
            },
        },
        ("run_id",),
        returns=_STATUS_FULL,
        returns_alt={
            "run_id": "str",
            "status": "str",
            "rate_limited": "true",
            "message": "'no change ... next check in N s'",
            "next_check_in_s": "int",
        },
    ),
    Tool(
        "rl_stop_training",
        rl_stop_training,
        "Stop a starting, running or lost run (its processes in reverse start order).",
        {"run_id": _RUN_ID},
        ("run_id",),
        returns={
            "run_id": "str",
            "status": "the status after stopping",
            "previous_status": "str",
            "reason": "why it ended, in words",
            "processes": "list of {name, state, exit_code}",
        },
    ),
    Tool(
        "rl_get_results",
        rl_get_results,
        "A run's results: final metrics, eval accuracy (first, best, last), a sampled metric history, sample "
        "completions and where the trained weights are.",
        {"run_id": _RUN_ID},
        ("run_id",),
        returns={
            "run_id": "str",
            "status": "str",
            "environment": "str",
            "profile": "str",
            "reason": "why it ended or null",
            "total_steps": "int",
            "final_metrics": "{metric: last value}",
            "history": "up to 50 evenly sampled rows of {step, reward/mean, train/loss, train/percent_correct, "
            "eval/percent_correct, logprobs/diff, advantages/std} (keys present only)",
            "eval_accuracy": "greedy eval accuracy over the run {first, best, best_step, last, last_step}, "
            "or null when the environment never evaluated",
            "checkpoint": "local checkpoint/weights path or null",
            "tinker_path": "tinker:// path of the weights on Tinker cloud or null",
            "cost": _COST,
            "wandb_url": "W&B run URL when online, else null",
            "log_paths": "{process name: log file path}",
            "sample_completions": _SAMPLES,
            "audit": _AUDIT,
        },
    ),
    Tool(
        "rl_list_runs",
        rl_list_runs,
        "List runs on disk, newest first (from the dashboard or CLI too), a page at a time.",
        {
            "status": {"type": "string", "description": "e.g. running,failed"},
            "environment": {"type": "string"},
            "sweep": {"type": "string"},
            "text": {"type": "string", "description": "found in id, reason..."},
            "limit": {"type": "integer", "minimum": 1, "default": 50},
            "offset": {"type": "integer", "minimum": 0},
        },
        returns={
            "runs": f"list of {_fields(RunSummary)}",
            "count": "int: runs in this page",
            "total": "int: runs matching",
        },
    ),
    Tool(
        "rl_test_inference",
        rl_test_inference,
        "Try the selected environment against models before training: its Atropos 'process' mode scores "
        "num_steps prompts x group_size completions per model (no training). Models: base_url if given, else "
        "OpenRouter when OPENROUTER_API_KEY is set (default qwen/qwen3-8b, z-ai/glm-4.7-flash, "
        "minimax/minimax-m2.7), else a running local run's model. Blocks until done.",
        {
            "num_steps": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3},
            "group_size": {"type": "integer", "minimum": 1, "maximum": 256, "default": 16},
            "models": {"type": "array", "items": {"type": "string"}, "description": "model ids"},
            "base_url": {"type": "string", "description": "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1"},
        },
        returns={
            "test_id": "str",
            "folder": "the test's output folder",
            "environment": "str",
            "profile": "str",
            "target": "{kind: openrouter|base_url|local, base_url, models, note}",
            "num_steps": "int",
            "group_size": "int",
            "correct_means": "the score that counts as correct",
            "models": "list of {model, folder, steps, completions, correct, accuracy, mean_score, alike_groups "
            "(groups whose answers all scored the same: a run drops them), errors, exit_code, "
            "duration_s, rollouts_path, log_path}",
            "best_model": "the model with the best accuracy or null",
            "best_accuracy": "float or null",
            "environment_working": "true when at least one model produced scored completions",
            "verdict": "one sentence",
            "duration_s": "float",
        },
    ),
)

# The workflow guide for agents: a Hermes skill (the plugin registers it), the MCP server's instructions.
SKILL_FILE = Path(__file__).parent / "skills" / "training" / "SKILL.md"


def skill_text() -> str:
    """The skill's body, without its front matter."""
    text = SKILL_FILE.read_text(encoding="utf-8")
    return text.split("---", 2)[2].strip() if text.startswith("---") else text.strip()


TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}
TOOL_SCHEMAS: list[dict] = [tool.schema for tool in TOOLS]
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS_BY_NAME)


# -- dispatch -----------------------------------------------------------------------------------


def _finite_number(_checker: object, value: object) -> bool:
    """JSON Schema's "number" as the tools take it: a finite float (not NaN or an infinity), never a
    bool; an int only where a float holds it (the tools compute with floats)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False


def _whole_number(_checker: object, value: object) -> bool:
    """JSON Schema's "integer": an int (not a bool), or a float with no fractional part (3.0)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())


_VALIDATORS: dict[str, Any] = {}
_VALIDATORS_LOCK = threading.Lock()


def _validator(tool: Tool):
    """A validator of the tool's own parameter schema (the one TOOL_SCHEMAS publishes), strict about
    unknown arguments. Built on first use: jsonschema takes ~0.4 s to import, and only a tool call
    needs it (the Hermes plugin imports this module when Hermes starts)."""
    with _VALIDATORS_LOCK:
        if tool.name not in _VALIDATORS:
            from jsonschema import Draft202012Validator, validators

            checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
                {"number": _finite_number, "integer": _whole_number}
            )
            kind = validators.extend(Draft202012Validator, type_checker=checker)
            schema = {**tool.schema["function"]["parameters"], "additionalProperties": False}
            _VALIDATORS[tool.name] = kind(schema)
        return _VALIDATORS[tool.name]


def _argument_error(tool: Tool, args: dict, error: Any) -> BadInput:
    """One schema violation as the tools' one-line error."""
    if error.validator == "additionalProperties":
        unknown = sorted(str(k) for k in args if k not in tool.properties)
        accepted = ", ".join(tool.properties) or "none"
        return BadInput(f"{tool.name}: unknown argument(s) {', '.join(unknown)[:200]}", hint=f"accepted: {accepted}")
    if error.validator == "required":
        missing = next(name for name in tool.required if name not in args)
        return BadInput(f"{tool.name}: missing required argument {missing!r}")
    path = list(error.absolute_path)
    name = str(path[0]) if path else "arguments"
    value = error.instance
    if error.validator == "type":
        got = shown_value(value) if isinstance(value, float) else type(value).__name__
        kind = error.validator_value
        if len(path) > 1:
            return BadInput(f"{tool.name}: {name} must be a list of {kind}s")
        wanted = "a finite number" if kind == "number" else kind
        return BadInput(f"{tool.name}: {name} must be {wanted}, got {got}")
    if error.validator in ("minimum", "maximum"):
        op = ">=" if error.validator == "minimum" else "<="
        return BadInput(f"{tool.name}: {name} must be {op} {error.validator_value}, got {shown_value(value)}")
    return BadInput(f"{tool.name}: {name}: {error.message}"[:300])


def _check_args(tool: Tool, args: Any) -> dict:
    """The tool's keyword arguments from what an agent sent, checked against the tool's JSON Schema."""
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise BadInput(f"{tool.name}: arguments must be a JSON object") from None
    if not isinstance(args, dict):
        raise BadInput(f"{tool.name}: arguments must be an object, got {type(args).__name__}")
    # An explicit null for an optional argument means "use the default".
    args = {k: v for k, v in args.items() if not (v is None and k in tool.properties and k not in tool.required)}
    # Unknown arguments first, then missing ones, then each argument's own in the schema's order.
    order = {"additionalProperties": -2, "required": -1, **{name: i for i, name in enumerate(tool.properties)}}
    errors = sorted(
        _validator(tool).iter_errors(args),
        key=lambda e: order.get(e.validator if not e.absolute_path else str(e.absolute_path[0]), len(order)),
    )
    if errors:
        raise _argument_error(tool, args, errors[0])
    return {
        name: int(value) if tool.properties[name].get("type") == "integer" and isinstance(value, float) else value
        for name, value in args.items()
    }


def call_tool(name: Any, args: Any = None) -> dict:
    """Run a tool by name with JSON arguments; always returns a JSON-serialisable dict."""
    try:
        tool = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
        if tool is None:
            raise NotFound(f"unknown tool {str(name)[:60]!r}", hint="tools: " + ", ".join(TOOL_NAMES))
        kwargs = _check_args(tool, args)
    except HermesError as exc:
        return _error_dict(exc, "call_tool")
    return tool.func(**kwargs)


def call_tool_json(name: Any, args: Any = None) -> str:
    """call_tool, as the JSON text both integrations hand to the agent."""
    try:
        return json.dumps(call_tool(name, args), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:  # jsonable() makes this unreachable; keep the promise anyway
        return json.dumps({"error": f"result not serialisable: {type(exc).__name__}"})
