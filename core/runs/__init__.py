"""The client run API (docs/CORE_API.md): launch, list, inspect, stop and read the results of runs.

Every client (dashboard, agent tools, CLI) uses this module; none holds a run's only copy of
anything. A run's truth is its folder ($HERMES_HOME/rl/runs/<id>/) written by its supervisor;
clients read it and signal the supervisor. A run whose supervisor is gone without a final state
is reported `lost`, with whatever of its processes survived, and can still be stopped.
"""

from __future__ import annotations

import os
import secrets as _secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hermes_rl.core.daemons import procscan
from hermes_rl.core.base.errors import BadInput, Conflict, HermesError, NotFound
from hermes_rl.core.base.fsutil import (append_jsonl, atomic_write_json, atomic_write_text, epoch_seconds, last_jsonl_row, read_json,
                     read_jsonl)
from hermes_rl.core.base.paths import RUN_ID_RE, ensure_private_dir, process_log_path, run_dir, runs_dir, validate_run_id
from hermes_rl.core.daemons.pipeline import ProcessSpec, free_ports, process_record, port_names, spec_from_json, specs_to_json, substitute, validate_specs
from hermes_rl.core.base.secrets import SECRET_NAMES, secret_env

FINAL_STATUSES = ("completed", "failed", "stopped")
ACTIVE_STATUSES = ("starting", "running", "stopping")
SUPERVISOR_START_TIMEOUT_S = 30.0
HISTORY_SAMPLE = 50
RUN_PORTS = ("api", "inference", "tinker")   # DESIGN §3: every real run gets these
STALL_ENV = "HERMES_RL_STALL_S"
DEFAULT_STALL_S = 900.0


# ---------------------------------------------------------------- reading run folders


def _read_run(run_id: str) -> dict:
    validate_run_id(run_id)
    path = run_dir(run_id) / "run.json"
    try:
        run = read_json(path)
    except FileNotFoundError:
        raise NotFound(f"no run {run_id}", hint="see `hermes-rl runs` for the run ids") from None
    except (OSError, ValueError) as exc:
        raise HermesError(f"run {run_id}: run.json is unreadable ({exc})",
                          hint=f"inspect {path}") from None
    if not isinstance(run, dict):
        raise HermesError(f"run {run_id}: run.json is not an object", hint=f"inspect {path}")
    return run


def _supervisor_alive(run: dict) -> bool:
    sup = run.get("supervisor") or {}
    return procscan.is_same_process(sup.get("pid"), sup.get("create_time"), sup.get("start_ticks"))


def _lost_reason(run: dict) -> str | None:
    """Why a non-final run is lost, or None when its supervisor is alive (or is still starting)."""
    if run.get("status") in FINAL_STATUSES:
        return None
    sup = run.get("supervisor") or {}
    if not sup.get("pid"):
        created = run.get("created_at") or 0
        if time.time() - created < SUPERVISOR_START_TIMEOUT_S:
            return None
        return "its supervisor never started (see supervisor.log in the run folder)"
    if _supervisor_alive(run):
        return None
    return f"its supervisor (pid {sup.get('pid')}) is gone and the run never reached a final state"


# ---------------------------------------------------------------- list_runs

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


# ---------------------------------------------------------------- stall detection (one rule for every client)


def stall_threshold(seconds: float | None = None) -> float:
    """Seconds without a metric row or trainer log line (see _progress_logs) after which a running
    run is `stalled` (0: never).
    `seconds` overrides $HERMES_RL_STALL_S (default 900 s); a bad value falls back to the default."""
    if seconds is None:
        try:
            seconds = float(os.environ.get(STALL_ENV) or DEFAULT_STALL_S)
        except ValueError:
            seconds = DEFAULT_STALL_S
    return max(0.0, float(seconds))


def _progress_logs(processes) -> tuple:
    """The logs whose lines count as progress: those of the processes whose work completes the run
    (the trainer), else, when no process completes it, every process's. A helper's log is no sign of
    progress: run-api writes an access-log line for every poll of an environment that waits on a
    frozen trainer, and would keep such a run from ever being seen as stalled."""
    procs = [p for p in processes or [] if isinstance(p, dict)]
    chosen = [p for p in procs if p.get("completes_run")] or procs
    return tuple(p.get("log") for p in chosen)


def _last_activity(started_at, last_metric: dict | None, log_paths) -> float | None:
    """The newest sign of life: the last metric row's time, the mtime of a log in `log_paths`
    (see _progress_logs), else the start."""
    times = [epoch_seconds(started_at), epoch_seconds((last_metric or {}).get("time"))]
    for path in log_paths:
        if path:
            try:
                times.append(os.stat(path).st_mtime)
            except OSError:
                pass
    times = [t for t in times if t is not None]
    return max(times) if times else None


def _stall_fields(status, started_at, last_metric, log_paths, stall_after_s: float | None) -> dict:
    """{last_activity_at, stalled, stalled_for_s} of a run; only a `running` run can be stalled."""
    if status not in ACTIVE_STATUSES:
        return {"last_activity_at": None, "stalled": False, "stalled_for_s": None}
    last = _last_activity(started_at, last_metric, log_paths)
    threshold = stall_threshold(stall_after_s)
    idle = None if last is None else round(max(0.0, time.time() - last), 1)
    stalled = status == "running" and threshold > 0 and idle is not None and idle > threshold
    return {"last_activity_at": last, "stalled": stalled, "stalled_for_s": idle if stalled else None}


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
    }


def list_runs(*, stall_after_s: float | None = None) -> list[dict]:
    """Summaries of every run, newest first. Unreadable run folders are skipped, never fatal.
    Active runs also carry last_activity_at / stalled / stalled_for_s (see stall_threshold)."""
    root = runs_dir()
    try:
        entries = [e for e in os.scandir(root) if RUN_ID_RE.match(e.name)]
    except FileNotFoundError:
        return []
    except OSError as exc:  # $HERMES_HOME is a file, or not readable: say so rather than list nothing
        raise HermesError(f"cannot read the runs folder {root}: {exc.strerror}",
                          hint="check that $HERMES_HOME is a readable folder") from None
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
            summary["_activity"] = (run.get("started_at"), last, _progress_logs(run.get("processes")))
            with _LIST_LOCK:
                _LIST_CACHE[key] = (sig, summary)
        summary = dict(summary)
        supervisor = summary.pop("_supervisor")
        started_at, last, log_paths = summary.pop("_activity")
        if summary["status"] not in FINAL_STATUSES:
            reason = _lost_reason({"status": summary["status"], "supervisor": supervisor,
                                   "created_at": summary["created_at"]})
            if reason:
                summary["status"], summary["reason"] = "lost", reason
        summary.update(_stall_fields(summary["status"], started_at, last, log_paths, stall_after_s))
        out.append(summary)
    prefix = str(root) + os.sep
    with _LIST_LOCK:
        for key in [k for k in _LIST_CACHE if k not in seen and k.startswith(prefix)]:
            del _LIST_CACHE[key]
    out.sort(key=lambda s: (s.get("created_at") or 0, s["run_id"]), reverse=True)
    return out


# ---------------------------------------------------------------- get_run

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
    if state in ("starting", "ready"):
        return state if alive else "gone"
    return state or "unknown"


def get_run(run_id: str, *, sample: bool = True, stall_after_s: float | None = None) -> dict:
    """run.json plus, per process, alive/health (and with `sample` CPU %, RSS, threads, uptime),
    the last metric row, log paths; `lost` status with surviving processes when the supervisor is gone;
    last_activity_at / stalled / stalled_for_s (see stall_threshold)."""
    run = _read_run(run_id)
    folder = run_dir(run_id)
    view = dict(run)
    lost = _lost_reason(run)
    view["supervisor_alive"] = lost is None and run.get("status") not in FINAL_STATUSES
    processes = []
    for proc in run.get("processes") or []:
        proc = dict(proc)
        pid, created = proc.get("pid"), proc.get("create_time")
        alive = (proc.get("state") in ("starting", "ready", "pending")
                 and procscan.is_same_process(pid, created, proc.get("start_ticks")))
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
        view["status"] = "lost"
        view["recorded_status"] = run.get("status")
        survivors = _survivors(run)
        view["survivors"] = [s.to_dict() for s in survivors]
        view["reason"] = lost + (f"; {len(survivors)} of its processes still running (stop the run to end them)"
                                 if survivors else "; none of its processes is still running")
    view.update(_stall_fields(view["status"], run.get("started_at"), view["last_metric"], _progress_logs(processes),
                              stall_after_s))
    return view


def _survivors(run: dict) -> list[procscan.Survivor]:
    folder = run_dir(run["run_id"])
    pgids = [p.get("pgid") for p in run.get("processes") or [] if p.get("pgid")]
    exclude = tuple(x for x in ((run.get("watchdog") or {}).get("pid"),) if x)
    return procscan.find_run_processes(folder, pgids, exclude=exclude, since=run.get("created_at"))


def run_events(run_id: str) -> list[dict]:
    _read_run(run_id)
    return read_jsonl(run_dir(run_id) / "events.jsonl")


# ---------------------------------------------------------------- stop_run


def _wait_final(run_id: str, wait: float) -> dict:
    deadline = time.monotonic() + wait
    interval = 0.02
    while True:
        run = _read_run(run_id)
        if run.get("status") in FINAL_STATUSES or time.monotonic() >= deadline:
            return run
        if not _supervisor_alive(run) and (run.get("supervisor") or {}).get("pid"):
            return run  # it died while stopping: the caller turns that into a lost-run stop
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.25)


def _wait_registered(run_id: str, wait: float) -> dict:
    """A run launched a moment ago may not have its supervisor's pid in run.json yet."""
    deadline = time.monotonic() + wait
    interval = 0.02
    while True:
        run = _read_run(run_id)
        if (run.get("supervisor") or {}).get("pid") or time.monotonic() >= deadline:
            return run
        time.sleep(interval)
        interval = min(interval * 1.5, 0.25)


def stop_run(run_id: str, *, wait: float = 15.0, force: bool = False) -> dict:
    """Stop a starting, running or lost run; returns get_run() after it (status stopping if `wait` ran out).

    A running supervisor gets SIGTERM and stops its processes in reverse order. A lost run's surviving
    processes are ended here (SIGTERM, SIGKILL after 5 s) and the run recorded as stopped.
    `force`: stop now: the supervisor SIGKILLs the process groups instead of waiting out their stop timeouts.
    """
    run = _read_run(run_id)
    status = run.get("status")
    if status in FINAL_STATUSES:
        raise Conflict(f"run {run_id} already {status}" + (f" ({run['reason']})" if run.get("reason") else ""),
                       hint="only starting, running or lost runs can be stopped")
    if not (run.get("supervisor") or {}).get("pid"):
        run = _wait_registered(run_id, max(0.0, SUPERVISOR_START_TIMEOUT_S - (time.time() - (run.get("created_at") or 0))))
    sup = run.get("supervisor") or {}
    if run.get("status") not in FINAL_STATUSES and _supervisor_alive(run):
        if run.get("status") != "stopping" or force:
            procscan.signal_process(sup["pid"], signal.SIGUSR2 if force else signal.SIGTERM)
        run = _wait_final(run_id, wait)
    if run.get("status") not in FINAL_STATUSES and not _supervisor_alive(run):
        _stop_lost(run)
    return get_run(run_id, sample=False)


def _stop_lost(run: dict) -> None:
    run_id = run["run_id"]
    folder = run_dir(run_id)
    survivors = _survivors(run)
    result = procscan.terminate(survivors, timeout=5.0) if survivors else {"terminated": 0, "killed": 0}
    current = _read_run(run_id)
    if current.get("status") in FINAL_STATUSES:
        return  # the watchdog (or another client) finished it meanwhile
    now = time.time()
    for proc in current.get("processes") or []:
        if proc.get("state") in ("pending", "starting", "ready"):
            proc["state"] = "stopped"
            proc["ended_at"] = proc.get("ended_at") or now
    reason = "stopped by user (its supervisor was gone)"
    current.update(status="stopped", reason=reason, ended_at=now)
    atomic_write_json(folder / "run.json", current)
    append_jsonl(folder / "events.jsonl", {
        "time": now, "event": "run_status", "status": "stopped", "reason": reason,
        "message": f"run stopped: {reason}; ended {len(survivors)} surviving process(es) "
                   f"({result['killed']} needed SIGKILL)",
        "pids": [s.pid for s in survivors],
    })


# ---------------------------------------------------------------- restart_process


def restart_process(run_id: str, name: str, *, wait: float = 30.0) -> dict:
    """Ask the supervisor to restart one process (stop its group, start it again); its dependants keep
    running. Returns get_run() once it has started again (or when `wait` runs out)."""
    run = _read_run(run_id)
    names = [p.get("name") for p in run.get("processes") or []]
    if name not in names:
        raise NotFound(f"run {run_id} has no process {name!r}", hint=f"processes: {', '.join(map(str, names))}")
    status = run.get("status")
    if status in FINAL_STATUSES or status == "stopping" or _lost_reason(run):
        raise Conflict(f"run {run_id} is {'lost' if _lost_reason(run) else status}: cannot restart {name}",
                       hint="start a new run")
    before = next(p for p in run["processes"] if p.get("name") == name)
    if before.get("pid") is None:
        raise Conflict(f"{name} has not started yet", hint="it starts once its dependencies are ready")
    folder = run_dir(run_id) / "control"
    ensure_private_dir(folder)
    atomic_write_json(folder / f"{time.time_ns()}-{_secrets.token_hex(2)}.json", {"action": "restart", "process": name})
    sup = run.get("supervisor") or {}
    try:
        os.kill(sup["pid"], signal.SIGUSR1)
    except (ProcessLookupError, KeyError, TypeError):
        pass
    deadline = time.monotonic() + wait
    interval = 0.02
    while time.monotonic() < deadline:
        current = _read_run(run_id)
        proc = next((p for p in current.get("processes") or [] if p.get("name") == name), {})
        if proc.get("started_at") != before.get("started_at") or current.get("status") in FINAL_STATUSES:
            break
        time.sleep(interval)
        interval = min(interval * 1.5, 0.25)
    return get_run(run_id, sample=False)


# ---------------------------------------------------------------- get_results


def _history_sample(rows: list[dict], limit: int = HISTORY_SAMPLE) -> list[dict]:
    if len(rows) <= limit:
        return list(rows)
    step = (len(rows) - 1) / (limit - 1)
    return [rows[round(i * step)] for i in range(limit)]


def _checkpoint(folder: Path) -> tuple[str | None, str | None, dict]:
    """(checkpoint path, tinker:// path, results.json) — results.json first, else the newest checkpoint folder."""
    results: dict = {}
    try:
        data = read_json(folder / "results.json")
        if isinstance(data, dict):
            results = data
    except (OSError, ValueError):
        pass
    checkpoint = results.get("final_checkpoint") or results.get("checkpoint")
    tinker_path = results.get("tinker_path")
    if not checkpoint:
        try:
            candidates = [p for p in (folder / "checkpoints").iterdir() if p.is_dir()]
        except OSError:
            candidates = []
        if candidates:
            checkpoint = str(max(candidates, key=lambda p: p.stat().st_mtime))
    return (str(checkpoint) if checkpoint else None), tinker_path, results


def get_results(run_id: str) -> dict:
    """Final metrics, an evenly spaced history sample (<= 50 rows, first and last included), checkpoint."""
    from hermes_rl.core.readers.metrics import last_values, read_metrics

    run = _read_run(run_id)
    folder = run_dir(run_id)
    rows = read_metrics(run_id)
    checkpoint, tinker_path, results = _checkpoint(folder)
    status = run.get("status")
    lost = _lost_reason(run)
    return {
        "run_id": run_id,
        "status": "lost" if lost else status,
        "reason": lost or run.get("reason"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "total_steps": run.get("total_steps"),
        "steps_done": rows[-1]["step"] if rows else 0,
        "final_metrics": last_values(rows),
        "history": _history_sample(rows),
        "checkpoint": checkpoint,
        "tinker_path": tinker_path,
        "results": results,
        "wandb": run.get("wandb"),
    }


# ---------------------------------------------------------------- launch


def _create_run_folder() -> tuple[str, Path]:
    ensure_private_dir(runs_dir())
    for _ in range(100):
        run_id = _secrets.token_hex(4)
        folder = runs_dir() / run_id
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(folder, 0o700)
        return run_id, folder
    raise HermesError("could not find a free run id", hint=f"check {runs_dir()}")


def _supervisor_env() -> dict[str, str]:
    from hermes_rl.core.base.paths import hermes_home

    env = {k: v for k, v in os.environ.items() if k not in (procscan.MARKER, procscan.PROCESS_MARKER)}
    env["HERMES_HOME"] = str(hermes_home())
    env.update(secret_env(SECRET_NAMES))
    return env


def _start_supervisor(run_id: str, folder: Path) -> None:
    """Start `python -m hermes_rl.core.daemons.supervisor RUN_ID` detached; return once it has recorded itself in run.json."""
    read_end, write_end = os.pipe()
    log = open(folder / "supervisor.log", "ab")
    try:
        os.chmod(folder / "supervisor.log", 0o600)
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_rl.core.daemons.supervisor", run_id, "--notify-fd", str(write_end)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(folder),
            env=_supervisor_env(), start_new_session=True, close_fds=True, pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
        log.close()
    answer = b""
    deadline = time.monotonic() + SUPERVISOR_START_TIMEOUT_S
    try:
        while b"\n" not in answer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select([read_end], [], [], remaining)
            if not ready:
                break
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            answer += chunk
    finally:
        os.close(read_end)
    try:
        proc.wait(timeout=5)  # the first process forks the real supervisor off and exits at once
    except subprocess.TimeoutExpired:
        pass
    text = answer.decode(errors="replace").strip()
    if text == "ok":
        return
    detail = text.removeprefix("error: ") if text else _tail(folder / "supervisor.log") or "no answer"
    reason = f"supervisor could not start: {detail}"
    try:
        run = read_json(folder / "run.json")
        if run.get("status") not in FINAL_STATUSES and not (run.get("supervisor") or {}).get("pid"):
            run.update(status="failed", reason=reason, ended_at=time.time())
            atomic_write_json(folder / "run.json", run)
    except (OSError, ValueError):
        pass
    raise HermesError(f"run {run_id}: {reason}", hint=f"see {folder / 'supervisor.log'}")


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join([ln for ln in text.splitlines() if ln.strip()][-lines:])[:500]


def _coerce_specs(specs) -> list[ProcessSpec]:
    out = [spec_from_json(s) if isinstance(s, dict) else s for s in specs or []]
    if not all(isinstance(s, ProcessSpec) for s in out):
        raise BadInput("specs must be ProcessSpec objects or their JSON form")
    validate_specs(out)
    return out


def _refuse_secret_values(specs: list[ProcessSpec]) -> None:
    """Secrets travel only by name (secret_env); a value in argv or env would land in files and `ps`."""
    from hermes_rl.core.base.secrets import secret_values

    values = secret_values()
    for spec in specs:
        texts = [*spec.argv, *spec.env.values(), spec.readiness.url or "", spec.cwd or ""]
        if any(value in text for value in values for text in texts):
            raise BadInput(f"process {spec.name!r} carries a secret value in its argv or env",
                           hint="name the variable in the spec's secret_env; the supervisor passes its value")


def _launch_prepared(run_id: str, folder: Path, specs, *, environment: str, profile: str,
                     total_steps: int | None, config: dict | None, ports: dict | None,
                     wandb: dict | None, extra: dict | None = None) -> dict:
    specs = _coerce_specs(specs)
    all_ports = {k: int(v) for k, v in (ports or {}).items()}
    missing = [name for name in port_names(specs) if name not in all_ports]
    if missing:
        all_ports.update(free_ports(missing))
    specs = substitute(specs, ports=all_ports, run_dir=str(folder), run_id=run_id)
    _refuse_secret_values(specs)
    atomic_write_json(folder / "pipeline.json", specs_to_json(specs))
    if config is not None and not (folder / "config.yaml").exists():
        import yaml

        atomic_write_text(folder / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    now = time.time()
    run = {
        "run_id": run_id,
        "environment": environment,
        "profile": profile,
        "status": "starting",
        "created_at": now,
        "started_at": None,
        "ended_at": None,
        "reason": None,
        "supervisor": None,
        "ports": all_ports,
        "processes": [process_record(s, log=str(process_log_path(s.name, run_id)),
                                     port=all_ports.get(s.port) if s.port else None) for s in specs],
        "total_steps": total_steps,
        "wandb": wandb,
        **(extra or {}),
    }
    atomic_write_json(folder / "run.json", run)
    append_jsonl(folder / "events.jsonl", {"time": now, "event": "run_created", "status": "starting",
                                           "message": f"run {run_id} created ({environment}, profile {profile})"})
    _start_supervisor(run_id, folder)
    return _read_run(run_id)


def launch(specs, *, environment: str, profile: str, total_steps: int | None = None,
           config: dict | None = None, ports: dict | None = None, wandb: dict | None = None) -> dict:
    """Create a run folder and start its detached supervisor over `specs`; returns run.json.

    Specs may use `{port:NAME}`, `{run_dir}` and `{run_id}`; ports not given are picked free on 127.0.0.1.
    """
    specs = _coerce_specs(specs)
    run_id, folder = _create_run_folder()
    try:
        return _launch_prepared(run_id, folder, specs, environment=environment, profile=profile,
                                total_steps=total_steps, config=config, ports=ports, wandb=wandb)
    except BaseException:
        _discard_unstarted(folder)
        raise


def _discard_unstarted(folder: Path) -> None:
    """A run whose supervisor was never asked to start leaves no half-made folder behind.
    (Once it was, the folder stays: its run.json says why it failed, supervisor.log shows the rest.)"""
    if not (folder / "supervisor.log").exists():
        shutil.rmtree(folder, ignore_errors=True)


def start_run(env_name: str | None = None, profile: str | None = None, overrides: dict | None = None) -> dict:
    """The real pipeline: the selected (or named) environment under a profile, with its draft values
    and `overrides` (validated, not saved). Returns run.json plus `notices`."""
    from hermes_rl.core.envs import config as config_mod
    from hermes_rl.core.envs.discovery import find_environment
    from hermes_rl.core.envs.profiles import check_keys, resolve_profile
    from hermes_rl.core.runs.training import training_pipeline

    selection = config_mod.current_selection()
    env_name = env_name or selection.get("environment")
    chosen, notice = resolve_profile(profile or selection.get("profile"))
    env_name = env_name or chosen.default_environment
    if not env_name:
        raise NotFound("no environment selected", hint="pick one with `hermes-rl select ENV`; see `hermes-rl envs`")
    env = find_environment(env_name)
    if env.error:
        raise BadInput(f"environment {env.name} cannot be used: {env.error}", hint=f"fix {env.file}")
    check_keys(chosen)
    values = config_mod.resolve_run_values(env, chosen, overrides)
    run_id, folder = _create_run_folder()
    try:
        ports = free_ports(RUN_PORTS)
        run_config = config_mod.build_run_config(env, chosen, values, ports, run_id)
        config_path = folder / "config.yaml"
        atomic_write_text(config_path, config_mod.run_config_yaml(run_config))
        specs = training_pipeline(run_id, chosen, env, config_path, ports)
        tinker = run_config.get("tinker") or {}
        env_section = run_config.get("env") or {}
        wandb = {
            "mode": "online" if secret_env(["WANDB_API_KEY"]) else "offline",
            "project": tinker.get("wandb_project"),
            "run_name": tinker.get("wandb_run_name") or env_section.get("wandb_name"),
            "url": None,
            "enabled": bool(env_section.get("use_wandb", True)),
        }
        notices = [n for n in (notice,) if n]
        run = _launch_prepared(run_id, folder, specs, environment=env.name, profile=chosen.name,
                               total_steps=env_section.get("total_steps"), config=None, ports=ports,
                               wandb=wandb, extra={"backend": chosen.backend, "config_path": str(config_path)})
    except BaseException:
        _discard_unstarted(folder)
        raise
    run["notices"] = notices
    run["notice"] = notice
    return run
