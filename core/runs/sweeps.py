"""Sweeps: a grid of runs created as one (`hermes-rl sweep --set learning_rate=1e-4,3e-4 --seeds 2`).

A sweep is $HERMES_HOME/rl/sweeps/<id>/sweep.json: the environment and profile, the grid and one
member per (configuration, seed), each `queued`, `started` (with its run id) or `failed` (with why it
could not start). Every configuration is validated when the sweep is created (the profile values it
changes as a derived profile, the rest as run values), so a sweep is refused whole or queued whole.

Members wait for a place under the local-run limit (HERMES_RL_MAX_LOCAL_RUNS) instead of being
refused. Whoever frees or may free a place starts the next ones through `start_queued`: the sweep's
creation, and every run's supervisor as it ends (it starts `python -m hermes_rl.core.runs.sweeps
start-queued` when the queue flag exists), so no client needs to be open.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets as _secrets
import shutil
import statistics
import sys
import time
from pathlib import Path

import psutil

from ..base.errors import BadInput, Conflict, HermesError
from ..base.fsutil import atomic_write_json, file_lock
from ..base.names import is_name
from ..base.paths import RUN_ID_RE, ensure_private_dir, run_dir, runs_dir, sweep_queue_flag, sweeps_dir
from ..base.records import StartedRun
from ..base.states import ACTIVE, Metric
from ..daemons.spawn import start_sweep_queue
from ..envs.drafts import current_selection, resolve_run_values, selected_or_default
from ..envs.profile_derive import derive_profile
from ..envs.profiles import LOCKED_FIELDS, check_fit, check_keys, get_profile, resolve_profile
from ..readers.metrics import REWARD_WINDOW, RunMetrics, headline_reward, metric_summary
from .control import stop_run
from .cost import add_costs, budget_stop_warning
from .start import check_local_capacity, local_start_lock, start_run
from .store import list_runs
from .sweep_budget import check_sweep_budget, member_budget
from .sweep_files import (
    CANCELLED,
    FAILED,
    QUEUED,
    STARTED,
    STARTING,
    SWEEP_FILE,
    _sweep_path,
    list_sweeps,
    read_sweep,
)

MAX_SWEEP_RUNS = 256
MAX_SEEDS = 64
# A member reserved (`starting`) by a process that died before it recorded the run goes back to the queue
# once no run names it and its reserver is gone; a folder a killed start left without a run.json is
# removed once it is this old (a start writes run.json within seconds).
ABANDONED_FOLDER_S = 600.0
KICK_INTERVAL_S = 30.0  # clients that see a waiting queue start it at most this often


def parse_grid(items: list[str] | None) -> dict[str, list[str]]:
    """`--set field=v1,v2` (repeatable) as {field: [raw values]}; values stay text for typed coercion."""
    grid: dict[str, list[str]] = {}
    for item in items or []:
        field, sep, values = item.partition("=")
        field = field.strip()
        if not sep or not field:
            raise BadInput(
                f"--set expects field=value[,value...], got {item!r}", hint="e.g. --set learning_rate=1e-4,3e-4"
            )
        if field in grid:
            raise BadInput(f"--set {field} is given twice", hint=f"list every value once: --set {field}=a,b")
        parts = [part.strip() for part in values.split(",")]
        if not parts or any(not part for part in parts):
            raise BadInput(f"--set {field}: an empty value in {values!r}")
        grid[field] = parts
    return grid


def configurations(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, in the order given (the first field varies slowest)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _seed(raw: str) -> int:
    try:
        seed = int(raw)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**31:
        raise BadInput(f"seed must be a whole number from 0 to {2**31 - 1}, got {raw!r}")
    return seed


def _split(config: dict) -> tuple[dict, dict]:
    """(profile changes, run values) of one configuration: a locked (backend) field changes a derived
    profile; a training field (learning_rate, ...) is the run's own value."""
    changes = {k: v for k, v in config.items() if k in LOCKED_FIELDS}
    return changes, {k: v for k, v in config.items() if k not in LOCKED_FIELDS}


def _validate(env, profile_name: str, config: dict, label: str) -> tuple[str | None, str | None]:
    """Refuse (BadInput naming the configuration) what start_run would refuse; (a fit warning, the model
    it trains) are returned."""
    changes, overrides = _split(config)
    try:
        profile = derive_profile(profile_name, changes) if changes else get_profile(profile_name)
        values = resolve_run_values(env, profile, overrides or None)
        base = profile.locked.get("base_model")
        return check_fit(profile, values), str(base.value) if base is not None else None
    except BadInput as exc:
        raise BadInput(f"sweep configuration {label}: {exc.message}", hint=exc.hint) from None


def create_sweep(
    grid: dict[str, list[str]],
    *,
    seeds: int | None = None,
    env_name: str | None = None,
    profile: str | None = None,
    budget_usd: float | None = None,
) -> dict:
    """A sweep over `grid` (× `seeds` seeds 0..K-1), every configuration validated, its members queued,
    and as many started as the local-run limit allows now; `budget_usd` covers all its runs together
    (core.runs.sweep_budget). Returns the sweep record (with `notices`)."""
    if not grid:
        raise BadInput("a sweep needs at least one --set field=v1,v2", hint="e.g. --set learning_rate=1e-4,3e-4")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS):
        raise BadInput(f"--seeds must be a whole number from 1 to {MAX_SEEDS}, got {seeds!r}")
    seed_list: list[int | None] = list(range(seeds)) if seeds else [None]
    if "seed" in grid:
        if seeds:
            raise BadInput("give seeds either as --seeds K or as --set seed=..., not both")
        grid = dict(grid)
        seed_list = [_seed(raw) for raw in grid.pop("seed")]
    selection = current_selection()
    chosen, notice = resolve_profile(profile or selection.get("profile"))
    check_keys(chosen)
    env, fallback = selected_or_default(env_name, selection, chosen)
    if env.error or env.abstract:
        raise BadInput(f"environment {env.id} cannot be run: {env.error or env.abstract}", hint=f"fix {env.file}")
    configs = configurations(grid) if grid else [{}]
    if len(configs) * len(seed_list) > MAX_SWEEP_RUNS:
        raise BadInput(
            f"the sweep has {len(configs) * len(seed_list)} runs (at most {MAX_SWEEP_RUNS})", hint="fewer values"
        )
    notices = [n for n in (fallback, notice) if n]
    for index, config in enumerate(configs):
        label = " ".join(f"{k}={v}" for k, v in config.items())
        warning, model = _validate(env, chosen.name, config, label or f"#{index}")
        # a sweep's budget on a model with no price stops nothing: said as a start says it (cost.py)
        for text in (warning, budget_stop_warning(model, budget_usd)):
            if text and text not in notices:
                notices.append(text)
    sweep_id = _new_sweep_id()
    members: list[dict] = []
    for config_index, config in enumerate(configs):
        for seed in seed_list:
            members.append(
                {
                    "index": len(members),
                    "config_index": config_index,
                    "config": config,
                    "seed": seed,
                    "state": QUEUED,
                    "run_id": None,
                    "error": None,
                    "started_at": None,
                }
            )
    record = {
        "sweep_id": sweep_id,
        "created_at": time.time(),
        "environment": env.id,
        "profile": chosen.name,
        "backend": chosen.backend,
        "grid": grid,
        "seeds": [s for s in seed_list if s is not None] or None,
        "members": members,
    }
    if budget_usd is not None:
        record["budget_usd"] = check_sweep_budget(budget_usd, grid)
    folder = sweeps_dir() / sweep_id
    atomic_write_json(folder / SWEEP_FILE, record)
    _set_queue_flag(True)
    start_queued()
    record = read_sweep(sweep_id)
    record["notices"] = notices
    return record


def _new_sweep_id() -> str:
    ensure_private_dir(sweeps_dir())
    for _ in range(100):
        sweep_id = _secrets.token_hex(4)
        try:
            (sweeps_dir() / sweep_id).mkdir(mode=0o700)
        except FileExistsError:
            continue
        return sweep_id
    raise HermesError("could not find a free sweep id", hint=f"check {sweeps_dir()}")


def _set_queue_flag(queued: bool) -> None:
    flag = sweep_queue_flag()
    if queued:
        ensure_private_dir(flag.parent)
        flag.touch(mode=0o600, exist_ok=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            flag.unlink()


def _start_member(sweep: dict, member: dict) -> StartedRun:

    changes, overrides = _split(member["config"])
    if sweep.get("budget_usd"):
        overrides = {**overrides, "budget_usd": member_budget(sweep, member)}
    return start_run(
        sweep["environment"],
        sweep["profile"],
        overrides or None,
        profile_changes=changes or None,
        seed=member["seed"],
        sweep={
            "id": sweep["sweep_id"],
            "index": member["index"],
            "config": member["config"],
            "seed": member["seed"],
        },
    )


def start_queued() -> list[str]:
    """Start queued sweep members, oldest sweep first, while the local-run limit has room (members of a
    cloud profile's sweep all start). A member is reserved (`starting`, with this process's pid) and
    written down before its run starts, so a start is never made twice; a run whose run.json names its
    member is adopted even when recording it failed. A member that cannot start is marked failed with
    why; the others go on. Returns the run ids started."""
    started: list[str] = []
    with file_lock(sweeps_dir() / ".queue"):
        remove_abandoned_run_folders()
        named = _runs_by_member()
        waiting = False
        full = False
        for sweep in list_sweeps():
            if _reconcile(sweep, named):
                _write(sweep)
            for member in sweep["members"]:
                if member.get("state") != QUEUED:
                    continue
                if full and sweep.get("backend") == "local":
                    waiting = True
                    continue
                try:
                    reserved = _reserve(sweep, member)
                except (OSError, HermesError):
                    member.update(state=QUEUED, reserved_by=None, reserved_at=None)  # nothing started: next pass
                    waiting = True
                    continue
                if not reserved:  # no local place: it waits, never shown `starting` meanwhile
                    full = waiting = True
                    continue
                try:
                    run = _start_member(sweep, member)
                except Conflict:  # the local-run limit: it waits for the next run to end
                    member.update(state=QUEUED)
                    full = True
                    waiting = True
                except HermesError as exc:
                    member.update(state=FAILED, error=exc.message + (f" ({exc.hint})" if exc.hint else ""))
                else:
                    member.update(state=STARTED, run_id=run["run_id"], started_at=time.time())
                    started.append(run["run_id"])
                with contextlib.suppress(OSError, HermesError):  # its run.json names the member: adopted later
                    _write(sweep)
        _set_queue_flag(waiting)
    return started


def _reserve(sweep: dict, member: dict) -> bool:
    """Reserve `member` (`starting`, with this process's pid, written down) when it has a place: a local
    sweep's member only while the local-run limit has room, counted and taken under the lock every local
    start takes, and the reservation itself holds that place (start.active_local_runs counts it) until
    its run is recorded. False: no place now."""

    def take() -> None:
        member.update(state=STARTING, reserved_by=os.getpid(), reserved_at=time.time())
        _write(sweep)

    if sweep.get("backend") != "local":
        take()
        return True
    with local_start_lock():
        try:
            check_local_capacity()
        except Conflict:
            return False
        take()
    return True


def _write(sweep: dict) -> None:
    atomic_write_json(_sweep_path(sweep["sweep_id"]), {k: v for k, v in sweep.items() if k != "notices"})


def _runs_by_member() -> dict[tuple[str, int], str]:
    """(sweep id, member index) -> run id, from every run.json that names its sweep member."""
    named: dict[tuple[str, int], str] = {}
    for run in sorted(list_runs(), key=lambda r: r.get("created_at") or 0):
        sweep_id, index = run.get("sweep_id"), run.get("sweep_index")
        if isinstance(sweep_id, str) and isinstance(index, int):
            named.setdefault((sweep_id, index), run["run_id"])
    return named


def _reconcile(sweep: dict, named: dict[tuple[str, int], str]) -> bool:
    """Members whose run exists are `started` with it; a reservation whose process died with no run goes
    back to the queue. Whether anything changed."""
    changed = False
    for member in sweep["members"]:
        state = member.get("state")
        run_id = named.get((sweep["sweep_id"], member.get("index")))
        if state in (QUEUED, STARTING) and run_id:
            member.update(state=STARTED, run_id=run_id, started_at=member.get("started_at") or time.time())
            changed = True
        elif state == STARTING and not run_id:
            pid = member.get("reserved_by")
            alive = isinstance(pid, int) and pid != os.getpid() and psutil.pid_exists(pid)
            if not alive:
                member.update(state=QUEUED, reserved_by=None, reserved_at=None)
                changed = True
    return changed


def remove_abandoned_run_folders(older_than_s: float = ABANDONED_FOLDER_S) -> list[str]:
    """Run folders a killed start left without a run.json (invisible to every listing): removed once
    older than `older_than_s`. Returns the run ids removed."""
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(runs_dir()))
    except OSError:
        return removed
    for entry in entries:
        if not is_name(RUN_ID_RE, entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        if os.path.lexists(folder / "run.json"):
            continue
        try:
            newest = max([entry.stat(follow_symlinks=False).st_mtime] + [p.lstat().st_mtime for p in folder.iterdir()])
        except OSError:
            continue
        if now - newest >= older_than_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(entry.name)
    return removed


def kick_queue() -> None:
    """Any client that looks at runs or sweeps advances a waiting queue: when some sweep has members
    waiting, start the queue runner (detached), at most every KICK_INTERVAL_S across all clients. A
    sweep whose creating command was killed then goes on without waiting for a run to end."""
    flag = sweep_queue_flag()
    if not flag.exists():
        return
    stamp = flag.parent / ".kicked"
    try:
        if time.time() - stamp.stat().st_mtime < KICK_INTERVAL_S:
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    with contextlib.suppress(OSError):
        stamp.touch(mode=0o600)
        os.utime(stamp)
        start_sweep_queue()


def queued_count() -> int:
    """Members of every sweep still waiting to start."""
    return sum(m.get("state") == QUEUED for sweep in list_sweeps() for m in sweep["members"])


def cancel_sweep(sweep_id: str, *, stop_runs: bool = False) -> dict:
    """No more of the sweep's runs start: its queued members become `cancelled`; with `stop_runs`, its
    runs still active are stopped too. Returns the sweep record."""
    with file_lock(sweeps_dir() / ".queue"):
        sweep = read_sweep(sweep_id)
        for member in sweep["members"]:
            if member.get("state") == QUEUED:
                member["state"] = CANCELLED
        atomic_write_json(_sweep_path(sweep_id), sweep)
        if not any(m.get("state") == QUEUED for other in list_sweeps() for m in other["members"]):
            _set_queue_flag(False)
    if stop_runs:
        status = {r["run_id"]: r["status"] for r in list_runs()}
        for member in sweep["members"]:
            run_id = member.get("run_id")
            if run_id and status.get(run_id) in ACTIVE:
                with contextlib.suppress(Conflict):  # it ended meanwhile
                    stop_run(run_id)
    return read_sweep(sweep_id)


# ---------------------------------------------------------------- reading a sweep's results


def _spread(values: list[float]) -> dict | None:
    """{mean, std, n} over seeds (std 0 for one seed); None when no run has the value."""
    if not values:
        return None
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def sweep_status(sweep_id: str) -> dict:
    """The sweep with each member's run status, and per configuration first/best/last eval accuracy
    and the final reward (trailing mean over REWARD_WINDOW steps), as mean ± std over its seeds."""
    kick_queue()
    sweep = read_sweep(sweep_id)
    by_id = {r["run_id"]: r for r in list_runs()}
    costs = {rid: {"usd": r.get("cost_usd"), "tokens": r.get("tokens")} for rid, r in by_id.items()}
    eval_key = str(Metric.EVAL_PERCENT_CORRECT)
    per_config: dict[int, dict[str, list[float]]] = {}
    for member in sweep["members"]:
        run = by_id.get(member.get("run_id") or "")
        member["status"] = run["status"] if run else member.get("state")
        member["step"] = run.get("step") if run else None
        member["total_steps"] = run.get("total_steps") if run else None
        if not run:
            continue
        reader = RunMetrics(run_dir(run["run_id"]))
        reader.poll()
        evals = metric_summary(reader.series(eval_key), eval_key)
        reward = headline_reward(run_dir(run["run_id"]))
        member["eval"] = evals
        member["reward"] = reward
        bucket = per_config.setdefault(member["config_index"], {"first": [], "best": [], "last": [], "reward": []})
        if evals:
            for key in ("first", "best", "last"):
                if evals[key] is not None and math.isfinite(evals[key]):
                    bucket[key].append(evals[key])
        if reward:
            bucket["reward"].append(reward["value"])
    summary = []
    seen: set[int] = set()
    for member in sweep["members"]:
        index = member["config_index"]
        if index in seen:
            continue
        seen.add(index)
        group = [m for m in sweep["members"] if m["config_index"] == index]
        bucket = per_config.get(index, {})
        summary.append(
            {
                "config_index": index,
                "config": member["config"],
                "runs": [m.get("run_id") for m in group],
                "states": [m.get("status") for m in group],
                "eval_first": _spread(bucket.get("first", [])),
                "eval_best": _spread(bucket.get("best", [])),
                "eval_last": _spread(bucket.get("last", [])),
                "final_reward": _spread(bucket.get("reward", [])),
                "cost": add_costs([costs[m["run_id"]] for m in group if m.get("run_id") in costs]),
            }
        )
    sweep["summary"] = summary
    sweep["reward_window"] = REWARD_WINDOW
    sweep["run_ids"] = [m["run_id"] for m in sweep["members"] if m.get("run_id")]
    sweep["cost"] = add_costs([costs[r] for r in sweep["run_ids"] if r in costs])
    return sweep


def main(argv: list[str] | None = None) -> int:
    """`python -m hermes_rl.core.runs.sweeps start-queued`: what a run's supervisor starts as it ends."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["start-queued"]:
        print("usage: python -m hermes_rl.core.runs.sweeps start-queued", file=sys.stderr)
        return 2
    os.umask(0o077)
    try:
        started = start_queued()
    except HermesError as exc:
        print(f"start-queued: {exc.message}", file=sys.stderr)
        return 1
    if started:
        print(f"start-queued: started {', '.join(started)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
