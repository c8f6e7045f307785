"""Reading run folders: a run's record (run.json), the listing of every run, one run's live view
and its events. A run whose supervisor is gone without a final state is reported `lost`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import cast

import psutil

from ..base.clock import age_s, in_future, remaining_s
from ..base.errors import HermesError, NotFound
from ..base.fsutil import last_jsonl_row, read_jsonl, read_regular_bytes
from ..base.names import is_name
from ..base.paths import (
    PROCESS_NAME_RE,
    RUN_ID_RE,
    hermes_home,
    process_log_path,
    rl_dir,
    run_dir,
    runs_dir,
    validate_run_id,
)
from ..base.records import RunSummary, RunView
from ..base.stall import progress_logs, stall_fields
from ..base.states import PROC_ALIVE, PROC_NOT_ENDED, RECORDED_FINAL, RunStatus
from ..daemons import procscan
from ..daemons.launchers import job_view, recorded_job_running
from ..daemons.run_audit import brief as audit_brief
from ..daemons.run_audit import cached_audit
from ..readers.metrics import REWARD_WINDOW, eval_endpoints, headline_reward
from .flow import flow_verdict, startup_seconds
from .index import INDEX_FILE, SummaryIndex
from .pricing import priced, run_model, tokens_of

SUPERVISOR_START_TIMEOUT_S = 30.0  # a run without a supervisor pid after this long never got one


RUN_JSON_MAX_BYTES = 4 * 1024 * 1024
MAX_PROCESSES = 64


class UnreadableRun(HermesError):
    """run.json exists but is not a valid run record; `reason` says what is wrong."""

    def __init__(self, run_id: str, reason: str, path: Path):
        super().__init__(f"run {run_id}: run.json is unreadable ({reason})", hint=f"inspect or remove {path}")
        self.reason = reason


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _kind(check, label: str, optional: bool = True):
    def accepts(value: object) -> bool:
        return (optional and value is None) or check(value)

    accepts.label = label + (" or null" if optional else "")  # type: ignore[attr-defined]  # read by _validate
    return accepts


_RECORDABLE = {s.value for s in RunStatus} - {RunStatus.LOST.value, RunStatus.UNREADABLE.value}
_NUMBER, _INT = _kind(_number, "a number"), _kind(_integer, "an integer")
_BOOL = _kind(lambda v: isinstance(v, bool), "true/false")
_TEXT = _kind(lambda v: isinstance(v, str) and len(v) <= 10_000, "a string")
_OBJECT = _kind(lambda v: isinstance(v, dict), "an object")
_LIST = _kind(lambda v: isinstance(v, list), "a list")
_RUN_FIELDS = {
    "environment": _TEXT,
    "profile": _TEXT,
    "status": _kind(
        lambda v: isinstance(v, str) and v in _RECORDABLE,
        "a recorded status (" + ", ".join(sorted(_RECORDABLE)) + ")",
        False,
    ),
    "created_at": _NUMBER,
    "started_at": _NUMBER,
    "ended_at": _NUMBER,
    "reason": _TEXT,
    "total_steps": _INT,
    "supervisor": _OBJECT,
    "watchdog": _OBJECT,
    "wandb": _OBJECT,
    "ports": _OBJECT,
    "processes": _LIST,
    "backend": _TEXT,
    "config_path": _TEXT,
}
_IDENTITY_FIELDS = {"pid": _INT, "pgid": _INT, "start_ticks": _INT, "create_time": _NUMBER}
_PROCESS_FIELDS = {
    **_IDENTITY_FIELDS,
    "state": _TEXT,
    "started_at": _NUMBER,
    "ready_at": _NUMBER,
    "ended_at": _NUMBER,
    "exit_code": _INT,
    "restarts": _INT,
    "port": _kind(lambda v: _integer(v) or (isinstance(v, str) and len(v) <= 64), "a port or a port name"),
    "required": _BOOL,
    "completes_run": _BOOL,
    "depends_on": _LIST,
    "argv_redacted": _LIST,
    "log": _TEXT,
}


def _check_fields(record: dict, fields: dict, where: str) -> None:
    for key, accepts in fields.items():
        if key in record and not accepts(record[key]):
            raise ValueError(f"{where}{key} must be {accepts.label}, got {json.dumps(record[key])[:40]}")


def validate_run_record(run_id: str, raw: object) -> dict:
    """run.json checked against the run record's schema (raises ValueError naming the first bad field).
    Paths are never taken from it: each process's log path is derived from the run id and its name
    (None when that path resolves outside $HERMES_HOME)."""
    if not isinstance(raw, dict):
        raise ValueError(f"not a JSON object but {type(raw).__name__}")
    if raw.get("run_id", run_id) != run_id:
        raise ValueError(f"it records run id {str(raw.get('run_id'))[:20]!r}, not {run_id}")
    if "status" not in raw:
        raise ValueError("it has no status")
    _check_fields(raw, _RUN_FIELDS, "")
    run = dict(raw, run_id=run_id)
    for key in ("supervisor", "watchdog"):
        if run.get(key):
            _check_fields(run[key], _IDENTITY_FIELDS, f"{key}.")
    processes = run.get("processes") or []
    if len(processes) > MAX_PROCESSES:
        raise ValueError(f"{len(processes)} processes (at most {MAX_PROCESSES})")
    checked: list[dict] = []
    for index, proc in enumerate(processes):
        if not isinstance(proc, dict):
            raise ValueError(f"processes[{index}] is not an object")
        name = proc.get("name")
        if not (isinstance(name, str) and is_name(PROCESS_NAME_RE, name)):
            raise ValueError(f"processes[{index}].name is not a process name: {json.dumps(name)[:40]}")
        _check_fields(proc, _PROCESS_FIELDS, f"processes[{index}].")
        log = process_log_path(name, run_id)
        # A log planted as a symlink out of $HERMES_HOME is not read: the process is shown without a log.
        checked.append(dict(proc, log=str(log) if _inside_home(log) else None))
    if "processes" in run:
        run["processes"] = checked
    return run


def _inside_home(path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(hermes_home().resolve())
    except (OSError, RuntimeError):
        return False


def _load_record(run_id: str, folder: Path) -> dict:
    """Read and validate <folder>/run.json: FileNotFoundError when absent, UnreadableRun otherwise."""
    path = folder / "run.json"
    if folder.is_symlink() or path.is_symlink() or not _inside_home(path):
        raise UnreadableRun(run_id, "the run folder or its run.json leads outside $HERMES_HOME", path)
    try:
        data = read_regular_bytes(path, RUN_JSON_MAX_BYTES + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableRun(run_id, exc.strerror or str(exc), path) from None
    if len(data) > RUN_JSON_MAX_BYTES:
        raise UnreadableRun(run_id, f"larger than {RUN_JSON_MAX_BYTES // (1024 * 1024)} MB", path)
    try:
        return validate_run_record(run_id, json.loads(data))
    except RecursionError:
        raise UnreadableRun(run_id, "nested too deeply", path) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise UnreadableRun(run_id, str(exc)[:200], path) from None


def read_run(run_id: str) -> dict:
    """run.json as recorded and validated; NotFound for an unknown run, UnreadableRun for a bad record."""
    validate_run_id(run_id)
    try:
        return _load_record(run_id, run_dir(run_id))
    except FileNotFoundError:
        raise NotFound(f"no run {run_id}", hint="see `hermes-rl runs` for the run ids") from None


def supervisor_alive(run: dict) -> bool:
    """Whether the recorded supervisor is alive and proven ours (start time and its run-folder marker)."""
    sup = run.get("supervisor") or {}
    if not isinstance(sup, dict) or not is_name(RUN_ID_RE, run.get("run_id")):
        return False
    marker = (procscan.SUPERVISOR_MARKER, run_dir(run["run_id"]))
    return procscan.is_same_process(sup.get("pid"), sup.get("create_time"), sup.get("start_ticks"), marker=marker)


def lost_reason(run: dict) -> str | None:
    """Why a non-final run is lost, or None when its supervisor is alive (or is still starting)."""
    if run.get("status") in RECORDED_FINAL:
        return None
    sup = run.get("supervisor") or {}
    if not sup.get("pid"):
        if in_future(run.get("created_at")):
            return (
                "its creation time lies in the future (a clock set back, or a folder copied from another "
                "machine) and no supervisor registered"
            )
        if remaining_s(run.get("created_at"), SUPERVISOR_START_TIMEOUT_S):
            return None
        return "its supervisor never started (see supervisor.log in the run folder)"
    if supervisor_alive(run):
        return None
    return f"its supervisor (pid {sup.get('pid')}) is gone and the run never reached a final state"


# run folder -> (signature of its files, summary); a summary is rebuilt only when run.json, a metrics
# file or health.json changed (mtime/size), so a warm listing of 10,000 runs costs four stats per run.
# A fresh process starts from the summary index (index.py), which keeps finished runs' summaries.
_LIST_CACHE: dict[str, tuple[str, dict]] = {}
_LIST_LOCK = threading.Lock()
_PERSISTED: dict[str, set[str]] = {}  # runs folder -> the run ids its index holds (as this process knows)
# A long-lived client (the dashboard lists every second) checks a finished run's files at most this
# often: its idle CPU does not grow with the runs that are not live. A fresh process always checks.
FINAL_RECHECK_S = 10.0
_CHECKED: dict[str, float] = {}  # run folder -> time.monotonic() its finished summary was last checked
_SIG_FILES = ("/run.json", "/metrics.jsonl", "/env_metrics.jsonl")


def _signature(folder: str, live: bool = True) -> str | None:
    """The (mtime, size) of the files a summary is computed from, as one string; None without run.json.
    health.json (the dropped groups an audit counts) and rollouts.jsonl (why groups scored alike) only for a
    live run: only its supervisor and its trainer write them."""
    parts = []
    for name in (*_SIG_FILES, "/health.json", "/rollouts.jsonl") if live else _SIG_FILES:
        try:
            st = os.stat(folder + name)
        except OSError:
            if name == "/run.json":
                return None
            parts.append("-")
            continue
        parts.append(f"{st.st_mtime_ns}:{st.st_size}")
    return "|".join(parts)


def summary_index() -> SummaryIndex:
    return SummaryIndex(rl_dir() / INDEX_FILE, _ROW_KEYS, _valid_row)


def _seed_from_index(root: str) -> set[str]:
    """Once per process and runs folder, the index's rows become the in-memory cache; the run ids it holds."""
    with _LIST_LOCK:
        known = _PERSISTED.get(root)
    if known is not None:
        return known
    rows = summary_index().load()
    with _LIST_LOCK:
        for run_id, entry in rows.items():
            _LIST_CACHE.setdefault(root + os.sep + run_id, entry)
        return _PERSISTED.setdefault(root, set(rows))


def forget_listing_cache() -> None:
    """Drop what this process holds of run summaries (the next listing reads the index again)."""
    with _LIST_LOCK:
        _LIST_CACHE.clear()
        _PERSISTED.clear()
        _CHECKED.clear()


def _summary(
    run_id: str,
    run: dict,
    last: dict | None,
    evals: tuple[float | None, float | None] = (None, None),
    reward: dict | None = None,
) -> dict:
    last = last or {}
    sweep = run.get("sweep")
    if not isinstance(sweep, dict):
        sweep = {}
    return {
        "run_id": run_id,
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "status": run.get("status"),
        "created_at": run.get("created_at"),
        "started_at": run.get("started_at"),
        "ended_at": run.get("ended_at"),
        "step": last.get("step"),
        "total_steps": run.get("total_steps"),
        "reward_mean": last.get("reward/mean"),
        # the headline reward: reward/mean averaged over the last reward_window steps (one batch is noise)
        "reward": reward["value"] if reward else None,
        "reward_window": REWARD_WINDOW,
        "eval_first": evals[0],
        "eval_last": evals[1],
        "reason": run.get("reason"),
        "parent_run_id": run.get("parent_run_id"),
        "sweep_id": sweep.get("id"),
        "sweep_index": sweep.get("index") if isinstance(sweep.get("index"), int) else None,
        "profile_changes": run.get("profile_changes") or {},
        "tokens": tokens_of(last),
        "cost_usd": None,  # priced when listed (list_runs): a price set later applies to old runs too
    }


def _unreadable_summary(run_id: str, reason: str) -> dict:
    record = {"status": RunStatus.UNREADABLE.value, "reason": f"run.json is unreadable: {reason}"}
    summary = _summary(run_id, record, None)
    summary.update(stall_fields(summary["status"], None, None, (), None))
    summary["health"] = flow_verdict(summary, None)
    summary["audit"] = {"verdict": "unknown", "reason": None}
    return summary


# What an index row holds: a summary's keys and the private ones _finish reads.
_ROW_KEYS = (
    *_summary("00000000", {}, None),
    "_supervisor",
    "_activity",
    "_startup",
    "_process_states",
    "_model",
    "_audit",
)
_IDLE = {"last_activity_at": None, "stalled": False, "stalled_for_s": None}
_DICT = _kind(lambda v: isinstance(v, dict), "an object", False)
# What each field of an index row must be, as strictly as run.json's (validate_run_record): a row of the
# right shape and the wrong types (a hand edit, another version's index) is a miss, summarised again.
_ROW_FIELDS = {
    "environment": _TEXT,
    "profile": _TEXT,
    "status": _kind(lambda v: v in RECORDED_FINAL, "a final status", False),
    **{k: _NUMBER for k in ("created_at", "started_at", "ended_at", "reward_mean", "reward", "eval_first")},
    **{k: _NUMBER for k in ("eval_last", "_startup", "cost_usd")},
    **{k: _INT for k in ("step", "total_steps", "sweep_index")},
    "reward_window": _kind(_integer, "an integer", False),
    "reason": _TEXT,
    "parent_run_id": _TEXT,
    "sweep_id": _TEXT,
    "_model": _TEXT,
    "profile_changes": _DICT,
    "_supervisor": _DICT,
    "tokens": _kind(lambda v: isinstance(v, dict) and all(_integer(n) for n in v.values()), "token counts"),
    "_activity": _kind(lambda v: isinstance(v, list) and len(v) == 3, "[started, last row, logs]", False),
    "_process_states": _kind(lambda v: isinstance(v, list) and all(isinstance(p, dict) for p in v), "a list", False),
    "_audit": _kind(lambda v: isinstance(v, dict) and isinstance(v.get("verdict"), str), "an audit brief", False),
}


def _valid_row(run_id: str, row: dict) -> bool:
    """Whether an index row may stand for a run's summary: its own run id, every field of its type."""
    return (
        row.get("run_id") == run_id
        and is_name(RUN_ID_RE, run_id)
        and all(f(row.get(k)) for k, f in _ROW_FIELDS.items())
    )


def _build_summary(run_id: str, key: str, previous: dict | None) -> dict:
    """A run's summary from its files, with the private fields _finish turns into the per-call ones.
    Raises FileNotFoundError (run.json went away) or UnreadableRun."""
    run = _load_record(run_id, Path(key))
    last = last_jsonl_row(key + "/metrics.jsonl")
    # a live run's env_metrics.jsonl grows every step: its first eval, once seen, is not looked for again
    evals = eval_endpoints(key, known_first=previous.get("eval_first") if previous else None)
    summary = _summary(run_id, run, last, evals, headline_reward(key))
    summary["_supervisor"] = run.get("supervisor") or {}
    summary["_activity"] = (run.get("started_at"), last, progress_logs(run.get("processes")))
    summary["_startup"] = startup_seconds(run.get("processes"))
    # which processes a starting run still waits on: their logged problems are its health reason (flow_verdict)
    summary["_process_states"] = [{"name": p.get("name"), "state": p.get("state")} for p in run.get("processes") or []]
    summary["_model"] = run_model(run_id) if summary["tokens"] else None
    summary["_audit"] = audit_brief(cached_audit(key))  # is it learning (core.base.audit_rule)
    return summary


def _finish(run_id: str, key: str, cached: dict, stall_after_s: float | None) -> dict:
    """The listed summary: the cached one plus what changes with time (lost, stalled, health, price).
    A finished run's is made once and kept (only its price is taken again): a long-lived client lists
    thousands every few seconds. Its first caller gets the kept dict itself (listings are read, not
    changed), so a fresh process pays one copy per run, not two."""
    listed = cached.get("_listed")
    if listed is not None:
        summary = dict(listed)
        summary["cost_usd"] = priced(cached["_model"], summary["tokens"])  # a price set later applies
        return summary
    summary = dict(cached)
    supervisor = summary.pop("_supervisor")
    started_at, last, log_paths = summary.pop("_activity")
    startup = summary.pop("_startup")
    process_states = summary.pop("_process_states")
    summary["audit"] = summary.pop("_audit")
    summary["cost_usd"] = priced(summary.pop("_model"), summary["tokens"])
    if summary["status"] in RECORDED_FINAL:  # nothing here changes with time: thousands of these per listing
        summary.update(_IDLE)
        summary["health"] = flow_verdict(summary, None)
        summary.pop("_listed", None)
        cached["_listed"] = summary
        return summary
    reason = lost_reason(
        {"run_id": run_id, "status": summary["status"], "supervisor": supervisor, "created_at": summary["created_at"]}
    )
    if reason:
        summary["status"], summary["reason"] = RunStatus.LOST.value, reason
    summary.update(stall_fields(summary["status"], started_at, last, log_paths, stall_after_s))
    summary["health"] = flow_verdict({**summary, "run_dir": key, "processes": process_states}, last, startup_s=startup)
    return summary


def _matches(summary: dict, status, environment, sweep, text) -> bool:
    if status and summary["status"] not in status:
        return False
    if environment and summary.get("environment") != environment:
        return False
    if sweep and summary.get("sweep_id") != sweep:
        return False
    if text:
        fields = ("run_id", "environment", "profile", "status", "reason", "sweep_id")
        return any(text in str(summary.get(f) or "").lower() for f in fields)
    return True


def list_runs(
    *,
    stall_after_s: float | None = None,
    status: str | list[str] | None = None,
    environment: str | None = None,
    sweep: str | None = None,
    text: str | None = None,
) -> list[RunSummary]:
    """Summaries of every run, newest first; with filters, those of the runs with that status (or one of
    those), environment, sweep id, or `text` in their id, environment, profile, status, reason or sweep
    (case-insensitive). A run whose run.json fails validation (or leads outside $HERMES_HOME) is listed
    with status `unreadable` and the reason; it never hides the others. Active runs also carry
    last_activity_at / stalled / stalled_for_s (see stall_threshold). Finished runs' summaries come from
    the summary index while their files are unchanged (index.py)."""
    root = runs_dir()
    try:
        entries = [e for e in os.scandir(root) if is_name(RUN_ID_RE, e.name)]
    except FileNotFoundError:
        return []
    except OSError as exc:  # $HERMES_HOME is a file, or not readable: say so rather than list nothing
        raise HermesError(
            f"cannot read the runs folder {root}: {exc.strerror}", hint="check that $HERMES_HOME is a readable folder"
        ) from None
    root_text = str(root)
    persisted = _seed_from_index(root_text)
    statuses = {status} if isinstance(status, str) else set(status or ())
    needle = text.lower() if text else None
    out: list[dict] = []
    changed: dict[str, tuple[str, dict]] = {}
    stale: set[str] = set()
    seen: set[str] = set()
    now = time.monotonic()
    for entry in entries:
        seen.add(entry.name)
        # plain strings here: pathlib joins cost more than the stats on a warm listing
        summary = _listed(entry.name, entry.path, now, stall_after_s, changed, stale)
        if summary is not None and _matches(summary, statuses, environment, sweep, needle):
            out.append(summary)
    _forget(root_text, seen, persisted, changed, stale)
    out.sort(key=lambda s: (s.get("created_at") or 0, s["run_id"]), reverse=True)
    return cast(list[RunSummary], out)  # _summary's keys plus the stall fields and health added above


def _listed(
    run_id: str, key: str, now: float, stall_after_s: float | None, changed: dict, stale: set[str]
) -> dict | None:
    """One run's listed summary from the cache while its files are unchanged, else built again (None: its
    folder has no run.json). New finished summaries go into `changed` (for the index), runs the index must
    not keep into `stale`."""
    with _LIST_LOCK:
        cached = _LIST_CACHE.get(key)
    final = cached is not None and cached[1]["status"] in RECORDED_FINAL
    if final and now - _CHECKED.get(key, -FINAL_RECHECK_S) < FINAL_RECHECK_S:
        sig = cached[0]  # type: ignore[index]  # final implies cached
    else:
        sig = _signature(key, live=not final)
    if sig is None:
        return None
    if cached and cached[0] == sig:
        summary = cached[1]
        if final:
            _CHECKED[key] = now
    else:
        try:
            summary = _build_summary(run_id, key, cached[1] if cached else None)
        except FileNotFoundError:
            return None
        except UnreadableRun as exc:
            stale.add(run_id)
            return _unreadable_summary(run_id, exc.reason)
        if summary["status"] in RECORDED_FINAL:
            # taken before the build (a later write invalidates it): a finished run's keeps only the parts a
            # finished run's signature has (without the live-only health.json and rollouts.jsonl)
            sig = "|".join(sig.split("|")[: len(_SIG_FILES)])
            # what only a live run's lost/stall/flow checks read is left out: a smaller row loads faster
            changed[run_id] = (sig, dict(summary, _supervisor={}, _activity=(None, None, ())))
        else:
            stale.add(run_id)
        with _LIST_LOCK:
            _LIST_CACHE[key] = (sig, summary)
    return _finish(run_id, key, summary, stall_after_s)


def refresh_runs(run_ids: list[str], *, stall_after_s: float | None = None) -> dict[str, RunSummary | None]:
    """The listed summaries of these runs alone (None: gone), by list_runs' cache and rules. A client that
    learns of new and finished runs from file events (the dashboard) refreshes only its live runs between
    listings, so its idle CPU does not grow with the runs that are not live."""
    root = str(runs_dir())
    persisted = _seed_from_index(root)
    changed: dict = {}
    stale: set[str] = set()
    now = time.monotonic()
    out = {
        run_id: (
            cast(RunSummary, _listed(run_id, root + os.sep + run_id, now, stall_after_s, changed, stale))
            if is_name(RUN_ID_RE, run_id)
            else None
        )
        for run_id in run_ids
    }
    gone = stale & persisted
    if (changed or gone) and summary_index().save(changed, gone):
        with _LIST_LOCK:
            persisted.difference_update(gone)
            persisted.update(changed)
    return out


def _forget(root: str, seen: set[str], persisted: set[str], changed: dict, stale: set[str]) -> None:
    """Drop the summaries of runs gone from the folder, from memory and the index; write the new ones."""
    prefix = root + os.sep
    with _LIST_LOCK:
        for key in [k for k in _LIST_CACHE if k.startswith(prefix) and k[len(prefix) :] not in seen]:
            del _LIST_CACHE[key]
            _CHECKED.pop(key, None)
    gone = (persisted - seen) | (stale & persisted)
    if (changed or gone) and summary_index().save(changed, gone):
        with _LIST_LOCK:
            persisted.difference_update(gone)
            persisted.update(changed)


# psutil.Process objects per (pid, create_time): cpu_percent(None) then measures the CPU used since
# the previous call, without blocking the caller.
_PSUTIL_CACHE: dict[tuple[int, float | None], psutil.Process] = {}
_PSUTIL_LOCK = threading.Lock()


def _sample_process(pid: int, create_time: float | None) -> dict | None:

    key = (pid, create_time)
    with _PSUTIL_LOCK:
        cached = _PSUTIL_CACHE.get(key)
        first = cached is None
        if cached is None:
            try:
                proc = _PSUTIL_CACHE[key] = psutil.Process(pid)
            except psutil.Error:
                return None
        else:
            proc = cached
        try:
            with proc.oneshot():  # the caller has just checked that pid is still the recorded process
                created = proc.create_time()
                if proc.status() == psutil.STATUS_ZOMBIE:
                    return None
                cpu = proc.cpu_percent(None)
                times = proc.cpu_times()
                rss = proc.memory_info().rss
                threads = proc.num_threads()
        except psutil.Error:
            _PSUTIL_CACHE.pop(key, None)
            return None
    uptime = age_s(created) or 0.0
    if first:
        # No previous sample yet: the lifetime average is an honest number instead of a 0.0.
        cpu = 100.0 * (times.user + times.system) / uptime if uptime > 0 else 0.0
    return {"cpu_percent": round(cpu, 1), "rss": rss, "threads": threads, "uptime_s": round(uptime, 1)}


def _prune_psutil_cache() -> None:
    """Forget processes that have ended (a long-lived dashboard sees many runs come and go)."""
    with _PSUTIL_LOCK:
        if len(_PSUTIL_CACHE) > 64:
            for key in [k for k, proc in _PSUTIL_CACHE.items() if not proc.is_running()]:
                del _PSUTIL_CACHE[key]


def _health(proc: dict, alive: bool) -> str:
    state = proc.get("state")
    if state in PROC_ALIVE:
        return state if alive else "gone"
    return state or "unknown"


def get_run(run_id: str, *, sample: bool = True, stall_after_s: float | None = None) -> RunView:
    """run.json plus, per process, alive/health (and with `sample` CPU %, RSS, threads, uptime),
    the last metric row, log paths; `lost` status with surviving processes when the supervisor is gone;
    last_activity_at / stalled / stalled_for_s (see stall_threshold)."""
    run = read_run(run_id)
    folder = run_dir(run_id)
    view = dict(run)
    lost = lost_reason(run)
    view["supervisor_alive"] = lost is None and run.get("status") not in RECORDED_FINAL
    processes = []
    for proc in run.get("processes") or []:
        proc = dict(proc)
        pid, created = proc.get("pid"), proc.get("create_time")
        alive = proc.get("state") in PROC_NOT_ENDED and (
            (lost is None and recorded_job_running(proc))  # a job elsewhere: no pid here; its launcher's last word
            or procscan.is_same_process(pid, created, proc.get("start_ticks"), marker=(procscan.MARKER, folder))
        )
        proc["alive"] = alive
        proc.update(job_view(proc))  # job, job_id, node, where: in the same words for every launcher
        proc["health"] = _health(proc, alive)
        proc.update(cpu_percent=None, rss=None, threads=None, uptime_s=None)
        if alive and sample and isinstance(pid, int):  # alive: pid was proven to be the recorded process
            stats = _sample_process(pid, created)
            if stats:
                proc.update(stats)
        elif alive and proc.get("started_at"):
            uptime = age_s(proc["started_at"])
            proc["uptime_s"] = None if uptime is None else round(uptime, 1)
        processes.append(proc)
    view["processes"] = processes
    if sample:
        _prune_psutil_cache()
    view["last_metric"] = last_jsonl_row(folder / "metrics.jsonl") or {}
    view["logs"] = {p["name"]: p.get("log") for p in processes}
    view["supervisor_log"] = str(folder / "supervisor.log")
    view["run_dir"] = str(folder)
    view["audit"] = cached_audit(folder)
    if lost:
        view["status"] = RunStatus.LOST.value
        view["recorded_status"] = run.get("status")
        surviving = survivors(run)
        view["survivors"] = [s.to_dict() for s in surviving]
        view["reason"] = lost + (
            f"; {len(surviving)} of its processes still running (stop the run to end them)"
            if surviving
            else "; none of its processes is still running"
        )
    view.update(
        stall_fields(
            view["status"], run.get("started_at"), view["last_metric"], progress_logs(processes), stall_after_s
        )
    )
    view["health"] = flow_verdict(view, view["last_metric"])
    return cast(RunView, view)  # run.json (validated by read_run) plus the fields added above


def survivors(run: dict) -> list[procscan.Survivor]:
    """The run's processes still alive: those carrying its run-folder marker, started after the run was
    created. Recorded pids and pgids are not trusted here (they may be reused by anyone after a reboot)."""
    folder = run_dir(run["run_id"])
    exclude = tuple(x for x in ((run.get("watchdog") or {}).get("pid"),) if isinstance(x, int))
    return procscan.find_run_processes(folder, exclude=exclude, since=run.get("created_at"))


def run_events(run_id: str) -> list[dict]:
    read_run(run_id)
    return read_jsonl(run_dir(run_id) / "events.jsonl")
