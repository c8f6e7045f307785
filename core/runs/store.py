"""Reading run folders: a run's record (run.json), the listing of every run, one run's live view
and its events. A run whose supervisor is gone without a final state is reported `lost`.
"""

from __future__ import annotations

import os
import threading
import time

from hermes_rl.core.base.errors import HermesError, NotFound
from hermes_rl.core.base.fsutil import last_jsonl_row, read_json, read_jsonl
from hermes_rl.core.base.paths import RUN_ID_RE, run_dir, runs_dir, validate_run_id
from hermes_rl.core.base.records import RunSummary, RunView
from hermes_rl.core.base.states import PROC_ALIVE, PROC_NOT_ENDED, RECORDED_FINAL, RunStatus
from hermes_rl.core.daemons import procscan
from hermes_rl.core.runs.stall import progress_logs, stall_fields

SUPERVISOR_START_TIMEOUT_S = 30.0  # a run without a supervisor pid after this long never got one


def read_run(run_id: str) -> dict:
    """run.json as recorded; NotFound for an unknown run, HermesError for an unreadable record."""
    validate_run_id(run_id)
    path = run_dir(run_id) / "run.json"
    try:
        run = read_json(path)
    except FileNotFoundError:
        raise NotFound(f"no run {run_id}", hint="see `hermes-rl runs` for the run ids") from None
    except (OSError, ValueError) as exc:
        raise HermesError(f"run {run_id}: run.json is unreadable ({exc})", hint=f"inspect {path}") from None
    if not isinstance(run, dict):
        raise HermesError(f"run {run_id}: run.json is not an object", hint=f"inspect {path}")
    return run


def supervisor_alive(run: dict) -> bool:
    sup = run.get("supervisor") or {}
    return procscan.is_same_process(sup.get("pid"), sup.get("create_time"), sup.get("start_ticks"))


def lost_reason(run: dict) -> str | None:
    """Why a non-final run is lost, or None when its supervisor is alive (or is still starting)."""
    if run.get("status") in RECORDED_FINAL:
        return None
    sup = run.get("supervisor") or {}
    if not sup.get("pid"):
        created = run.get("created_at") or 0
        if time.time() - created < SUPERVISOR_START_TIMEOUT_S:
            return None
        return "its supervisor never started (see supervisor.log in the run folder)"
    if supervisor_alive(run):
        return None
    return f"its supervisor (pid {sup.get('pid')}) is gone and the run never reached a final state"


# run folder -> (signature of its files, summary); a summary is rebuilt only when run.json or
# metrics.jsonl changed (mtime/size), so a warm listing of 1,000 runs costs two stats per run.
_LIST_CACHE: dict[str, tuple[tuple, dict]] = {}
_LIST_LOCK = threading.Lock()


def _stat_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _summary(run_id: str, run: dict, last: dict | None) -> dict:
    last = last or {}
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
        "reason": run.get("reason"),
        "parent_run_id": run.get("parent_run_id"),
    }


def list_runs(*, stall_after_s: float | None = None) -> list[RunSummary]:
    """Summaries of every run, newest first. Unreadable run folders are skipped, never fatal.
    Active runs also carry last_activity_at / stalled / stalled_for_s (see stall_threshold)."""
    root = runs_dir()
    try:
        entries = [e for e in os.scandir(root) if RUN_ID_RE.match(e.name)]
    except FileNotFoundError:
        return []
    except OSError as exc:  # $HERMES_HOME is a file, or not readable: say so rather than list nothing
        raise HermesError(
            f"cannot read the runs folder {root}: {exc.strerror}", hint="check that $HERMES_HOME is a readable folder"
        ) from None
    out = []
    seen = set()
    for entry in entries:
        key = entry.path  # plain strings here: pathlib joins cost more than the stats on a warm listing
        seen.add(key)
        run_json = key + "/run.json"
        metrics = key + "/metrics.jsonl"
        sig = (_stat_sig(run_json), _stat_sig(metrics))
        if sig[0] is None:
            continue
        with _LIST_LOCK:
            cached = _LIST_CACHE.get(key)
        if cached and cached[0] == sig:
            summary = cached[1]
        else:
            try:
                run = read_json(run_json)
            except (OSError, ValueError):
                continue
            if not isinstance(run, dict):
                continue
            last = last_jsonl_row(metrics)
            summary = _summary(entry.name, run, last)
            summary["_supervisor"] = run.get("supervisor") or {}
            summary["_activity"] = (run.get("started_at"), last, progress_logs(run.get("processes")))
            with _LIST_LOCK:
                _LIST_CACHE[key] = (sig, summary)
        summary = dict(summary)
        supervisor = summary.pop("_supervisor")
        started_at, last, log_paths = summary.pop("_activity")
        if summary["status"] not in RECORDED_FINAL:
            reason = lost_reason(
                {"status": summary["status"], "supervisor": supervisor, "created_at": summary["created_at"]}
            )
            if reason:
                summary["status"], summary["reason"] = RunStatus.LOST.value, reason
        summary.update(stall_fields(summary["status"], started_at, last, log_paths, stall_after_s))
        out.append(summary)
    prefix = str(root) + os.sep
    with _LIST_LOCK:
        for key in [k for k in _LIST_CACHE if k not in seen and k.startswith(prefix)]:
            del _LIST_CACHE[key]
    out.sort(key=lambda s: (s.get("created_at") or 0, s["run_id"]), reverse=True)
    return out


# psutil.Process objects per (pid, create_time): cpu_percent(None) then measures the CPU used since
# the previous call, without blocking the caller.
_PSUTIL_CACHE: dict[tuple[int, float | None], object] = {}
_PSUTIL_LOCK = threading.Lock()


def _sample_process(pid: int, create_time: float | None) -> dict | None:
    import psutil

    key = (pid, create_time)
    with _PSUTIL_LOCK:
        proc = _PSUTIL_CACHE.get(key)
        first = proc is None
        if first:
            try:
                proc = psutil.Process(pid)
            except psutil.Error:
                return None
            _PSUTIL_CACHE[key] = proc
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
    uptime = max(0.0, time.time() - created)
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
        alive = proc.get("state") in PROC_NOT_ENDED and procscan.is_same_process(pid, created, proc.get("start_ticks"))
        proc["alive"] = alive
        proc["health"] = _health(proc, alive)
        proc.update(cpu_percent=None, rss=None, threads=None, uptime_s=None)
        if alive and sample:
            stats = _sample_process(pid, created)
            if stats:
                proc.update(stats)
        elif alive and proc.get("started_at"):
            proc["uptime_s"] = round(max(0.0, time.time() - proc["started_at"]), 1)
        processes.append(proc)
    view["processes"] = processes
    if sample:
        _prune_psutil_cache()
    view["last_metric"] = last_jsonl_row(folder / "metrics.jsonl") or {}
    view["logs"] = {p["name"]: p.get("log") for p in processes}
    view["supervisor_log"] = str(folder / "supervisor.log")
    view["run_dir"] = str(folder)
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
    return view


def survivors(run: dict) -> list[procscan.Survivor]:
    """The run's processes still alive (found by their run-folder marker and process groups)."""
    folder = run_dir(run["run_id"])
    pgids = [p.get("pgid") for p in run.get("processes") or [] if p.get("pgid")]
    exclude = tuple(x for x in ((run.get("watchdog") or {}).get("pid"),) if x)
    return procscan.find_run_processes(folder, pgids, exclude=exclude, since=run.get("created_at"))


def run_events(run_id: str) -> list[dict]:
    read_run(run_id)
    return read_jsonl(run_dir(run_id) / "events.jsonl")
