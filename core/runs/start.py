"""Starting runs: a run folder, its pipeline (process specs) and the detached supervisor that runs it.

`launch` starts any pipeline; `start_run` the real training pipeline of an environment under a profile,
its configuration built once (core.runs.runconfig) and handed to the pipeline as data.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets as _secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from ..base.envvar_limits import env_number
from ..base.errors import BadInput, Conflict, HermesError
from ..base.extras import install_command, missing_for_backend
from ..base.fsutil import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    file_lock,
    open_append_fd,
    read_json,
    read_regular_text,
)
from ..base.paths import (
    ensure_private_dir,
    hermes_home,
    process_log_path,
    run_dir,
    runs_dir,
    saved_checkpoint_folder,
)
from ..base.records import RunRecord, StartedRun
from ..base.secrets import ENDPOINT_KEY_PLACEHOLDER, SECRET_NAMES, refuse_secret_values, secret_env
from ..base.states import ACTIVE, FINAL, RunStatus
from ..daemons import launchers, procscan
from ..daemons.launchers import without_commands
from ..daemons.pipeline import (
    ProcessSpec,
    free_ports,
    port_names,
    process_record,
    spec_from_json,
    specs_to_json,
    substitute,
    validate_specs,
)
from ..daemons.run_record import is_recorded_final, read_run_file, record_final
from ..envs.discovery import find_environment
from ..envs.drafts import current_selection, resolve_run_values, selected_or_default
from ..envs.profile_derive import derive_profile
from ..envs.profiles import EDITABLE_DEFAULT_FIELDS, check_fit, check_keys, resolve_profile
from ..envs.verifiers_envs import check_required, check_trainable
from .control import stop_run
from .cost import no_price_budget_text
from .runconfig import CONFIG_FILE, RunConfig, build_run_config, read_run_config, run_config_yaml
from .store import SUPERVISOR_START_TIMEOUT_S, get_run, list_runs, read_run
from .sweep_files import live_reservations
from .training import training_pipeline
from .workers import exposure_warning, mix_prefix, replica_names, resolve_workers, site_and_given

RUN_PORTS = ("api", "inference", "tinker")  # DESIGN §3: every real run gets these
TRAINER_STATE_FILE = "trainer_state.json"  # written by the trainer at each save_state: {"state_path", "step", ...}


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


def _supervisor_env(folder: Path) -> dict[str, str]:
    markers = (procscan.MARKER, procscan.PROCESS_MARKER, procscan.SUPERVISOR_MARKER)
    env = {k: v for k, v in os.environ.items() if k not in markers}
    env["HERMES_HOME"] = str(hermes_home())
    env[procscan.SUPERVISOR_MARKER] = str(folder)  # with its start time, proves a pid is this run's supervisor
    env.update(secret_env(SECRET_NAMES))
    return env


def _start_supervisor(run_id: str, folder: Path) -> None:
    """Start `python -m hermes_rl.core.daemons.supervisor RUN_ID` detached; return once it has recorded
    itself in run.json. A supervisor that cannot start leaves the run failed, with the reason."""
    read_end, write_end = os.pipe()
    log = os.fdopen(open_append_fd(folder / "supervisor.log"), "ab")
    try:
        os.chmod(folder / "supervisor.log", 0o600)
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_rl.core.daemons.supervisor", run_id, "--notify-fd", str(write_end)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(folder),
            env=_supervisor_env(folder),
            start_new_session=True,
            close_fds=True,
            pass_fds=(write_end,),
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
    run = read_run_file(folder)
    if run is not None and not is_recorded_final(run) and not (run.get("supervisor") or {}).get("pid"):
        record_final(folder, run, RunStatus.FAILED, reason)
    raise HermesError(f"run {run_id}: {reason}", hint=f"see {folder / 'supervisor.log'}")


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = read_regular_text(path, errors="replace")
    except OSError:
        return ""
    return " | ".join([ln for ln in text.splitlines() if ln.strip()][-lines:])[:500]


def _coerce_specs(specs) -> list[ProcessSpec]:
    out = [spec_from_json(s) if isinstance(s, dict) else s for s in specs or []]
    if not all(isinstance(s, ProcessSpec) for s in out):
        raise BadInput("specs must be ProcessSpec objects or their JSON form")
    validate_specs(out)
    return out


def _refuse_secrets_in_specs(specs: list[ProcessSpec]) -> None:
    """Secrets travel only by name (secret_env); a value in argv or env would land in files and `ps`."""
    for spec in specs:
        texts = [*spec.argv, *spec.env.values(), spec.readiness.url or "", spec.cwd or ""]
        refuse_secret_values(
            {f"the argv or env of process {spec.name!r}": "\n".join(texts)},
            hint="name the variable in the spec's secret_env; the supervisor passes its value",
        )


def _launch_prepared(
    run_id: str,
    folder: Path,
    specs,
    *,
    environment: str,
    profile: str,
    total_steps: int | None,
    config: dict | None,
    ports: dict | None,
    wandb: dict | None,
    extra: dict | None = None,
) -> RunRecord:
    specs = _coerce_specs(specs)
    all_ports = {k: int(v) for k, v in (ports or {}).items()}
    missing = [name for name in port_names(specs) if name not in all_ports]
    if missing:
        all_ports.update(free_ports(missing))
    specs = substitute(specs, ports=all_ports, run_dir=str(folder), run_id=run_id)
    _refuse_secrets_in_specs(specs)
    atomic_write_json(folder / "pipeline.json", specs_to_json(specs))
    if config is not None and not (folder / CONFIG_FILE).exists():
        import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

        atomic_write_text(folder / CONFIG_FILE, yaml.safe_dump(config, sort_keys=False))
    now = time.time()
    run = {
        "run_id": run_id,
        "environment": environment,
        "profile": profile,
        "status": RunStatus.STARTING,
        "created_at": now,
        "started_at": None,
        "ended_at": None,
        "reason": None,
        "supervisor": None,
        "ports": all_ports,
        "processes": [
            process_record(s, log=str(process_log_path(s.name, run_id)), port=all_ports.get(s.port) if s.port else None)
            for s in specs
        ],
        "total_steps": total_steps,
        "wandb": wandb,
        **(extra or {}),
    }
    # Every start path (start_run, resume_run, launch) records its run here: counting the active local
    # runs and writing this one's run.json under one lock means a run counts whatever started it, and
    # two starts at once cannot both take the last place.
    with _local_start_slot(run.get("backend"), _member_of(run.get("sweep"))):
        atomic_write_json(folder / "run.json", run)
    append_jsonl(
        folder / "events.jsonl",
        {
            "time": now,
            "event": "run_created",
            "status": RunStatus.STARTING,
            "message": f"run {run_id} created ({environment}, profile {profile})",
        },
    )
    _start_supervisor(run_id, folder)
    return cast(RunRecord, read_run(run_id))  # the record written above, as read back


def launch(
    specs,
    *,
    environment: str,
    profile: str,
    total_steps: int | None = None,
    config: dict | None = None,
    ports: dict | None = None,
    wandb: dict | None = None,
    backend: str = "local",
) -> RunRecord:
    """Create a run folder and start its detached supervisor over `specs`; returns run.json.

    Specs may use `{port:NAME}`, `{run_dir}` and `{run_id}`; ports not given are picked free on 127.0.0.1.
    Its processes run on this machine, so it counts as a local run (HERMES_RL_MAX_LOCAL_RUNS) unless
    `backend` names where the training happens instead ("tinker").
    """
    specs = _coerce_specs(specs)
    run_id, folder = _create_run_folder()
    try:
        return _launch_prepared(
            run_id,
            folder,
            specs,
            environment=environment,
            profile=profile,
            total_steps=total_steps,
            config=config,
            ports=ports,
            wandb=wandb,
            extra={"backend": backend},
        )
    except BaseException:
        _discard_unstarted(folder)
        raise


def _abandon_interrupted(run_id: str, folder: Path) -> None:
    """Ctrl-C during start: a run whose supervisor was already started is stopped and removed, so an
    interrupted start leaves nothing behind; if it cannot be stopped in time, the error names it."""
    if not (folder / "supervisor.log").exists():
        shutil.rmtree(folder, ignore_errors=True)
        return
    previous = None
    with contextlib.suppress(ValueError):  # only the main thread may set handlers (and get Ctrl-C)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not half-stop it
    run: Mapping[str, Any] | None
    try:
        run = stop_run(run_id, wait=15.0, force=True)
    except HermesError:
        run = read_run_file(folder)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if run is None or not is_recorded_final(run):
        raise HermesError(
            f"interrupted: run {run_id} was created and could not be stopped in time",
            hint=f"hermes-rl stop {run_id}",
        ) from None
    shutil.rmtree(folder, ignore_errors=True)
    for proc in run.get("processes") or []:
        with contextlib.suppress(OSError, HermesError):
            process_log_path(proc["name"], run_id).unlink()


def _discard_unstarted(folder: Path) -> None:
    """A run whose supervisor was never asked to start leaves no half-made folder behind.
    (Once it was, the folder stays: its run.json says why it failed, supervisor.log shows the rest.)"""
    if not (folder / "supervisor.log").exists():
        shutil.rmtree(folder, ignore_errors=True)


def start_run(
    env_name: str | None = None,
    profile: str | None = None,
    overrides: dict | None = None,
    workers: dict | None = None,
    *,
    profile_changes: dict | None = None,
    seed: int | None = None,
    sweep: dict | None = None,
    documented_default: bool = False,
) -> StartedRun:
    """The real pipeline: the selected (or named) environment under a profile, with its draft values
        and `overrides` (validated, not saved), its environment workers launched as `workers` says
        (core.runs.workers: launcher, replicas, address, slurm; None: one local worker). `profile_changes`:
        profile values changed for this run only (a profile derived in memory, validated like a profile
        file); `seed`: the trainer's seed (LoRA initialisation); `sweep`: the sweep the run belongs to
        ({"id", "index", "config", "seed"}), recorded in run.json; `documented_default`: the profile's default
    environment with its default values, whatever is selected and drafted (the main command's run).
    Returns run.json plus `notices`."""
    for name in launchers.names():
        if isinstance(workers, dict) and workers.get(name) is not None:
            site_and_given(name, workers[name])  # a command a start gives is refused before anything else
    selection = current_selection()
    chosen, notice = resolve_profile(profile or (None if documented_default else selection.get("profile")))
    if profile_changes:
        chosen = derive_profile(chosen.name, profile_changes)
    if documented_default:
        selection = {"environment": None}
    env, fallback = selected_or_default(env_name, selection, chosen)
    if env.error:
        raise BadInput(f"environment {env.id} cannot be used: {env.error}", hint=f"fix {env.file}")
    if env.abstract:
        raise BadInput(
            f"environment {env.id} ({env.class_name}) cannot be run: it is {env.abstract}",
            hint="start an environment that derives from it; `hermes-rl envs` marks bases",
        )
    check_trainable(env)
    check_keys(chosen)
    _check_installed(chosen.backend)
    values = resolve_run_values(env, chosen, overrides, use_draft=not documented_default)
    check_required(env, values)
    fit = check_fit(chosen, values)  # refused before any process starts when it cannot fit
    workers = resolve_workers(workers, values)
    # where the workers run would take them (Slurm: the partition, `sbatch --test-only`): before anything starts
    launchers.get(workers["launcher"]).preflight(workers.get(workers["launcher"]) or {}, replicas=workers["replicas"])
    notice = "; ".join(n for n in (fallback, notice, fit, exposure_warning(workers)) if n) or None
    if chosen.backend == "local":
        check_local_capacity(_member_of(sweep))  # refused before building anything; again as it is recorded
    # profile_values: what the run trains with, its own training values (draft, --set) over the profile's
    trained = {**chosen.values(), **{k: values[k] for k in EDITABLE_DEFAULT_FIELDS if values.get(k) is not None}}
    recorded = {"profile_values": trained, "profile_changes": dict(profile_changes or {}), "seed": seed}
    if sweep:
        recorded["sweep"] = dict(sweep)
    return _start_prepared(env, chosen, values, notice, workers, recorded)


def _check_installed(backend: str) -> None:
    """Refused before anything starts when this install lacks what the backend's processes import,
    naming the extra to install (a base install has none of the training packages)."""
    lacking = missing_for_backend(backend)
    if lacking:
        extra, modules = lacking
        raise BadInput(
            f"this install of hermes-rl lacks what a {backend}-backend run imports: {', '.join(modules)}",
            hint=f"install its {extra} extra: {install_command(extra)}",
        )


MAX_LOCAL_RUNS_ENV = "HERMES_RL_MAX_LOCAL_RUNS"
DEFAULT_MAX_LOCAL_RUNS = 2  # the local backend trains on this machine's CPUs: more runs only slow each other


def max_local_runs() -> int:
    """The most local-backend runs active at once ($HERMES_RL_MAX_LOCAL_RUNS; 0: no limit)."""
    return int(
        env_number(MAX_LOCAL_RUNS_ENV, DEFAULT_MAX_LOCAL_RUNS, integer=True, maximum=1000, meaning_of_zero="no limit")
    )


LOCAL_STARTS_LOCK = ".local-starts"  # under runs/: counting the local places and taking one, atomically


def _member_of(sweep: object) -> tuple[str, int] | None:
    """(sweep id, member index) of a start that is a sweep member's (its own reservation holds its place)."""
    if isinstance(sweep, dict) and isinstance(sweep.get("id"), str) and isinstance(sweep.get("index"), int):
        return sweep["id"], sweep["index"]
    return None


@contextlib.contextmanager
def local_start_lock():
    """Held while the local places are counted and one is taken (a run.json written, a sweep member
    reserved), so two starters can never both take the last place."""
    with file_lock(runs_dir() / LOCAL_STARTS_LOCK):
        yield


@contextlib.contextmanager
def _local_start_slot(backend: str | None, member: tuple[str, int] | None = None):
    if backend not in (None, "local"):
        yield
        return
    with local_start_lock():
        check_local_capacity(member)
        yield


def active_local_runs(member: tuple[str, int] | None = None) -> list[str]:
    """Ids of the active runs whose processes train on this machine (the local backend, or a pipeline
    whose run.json names no backend), and the sweep members reserved to start (a place each, held from
    their reservation until their run is recorded) but `member`, the caller's own."""
    active, named = [], set()
    for summary in list_runs():
        if summary.get("sweep_id") is not None:
            named.add((summary.get("sweep_id"), summary.get("sweep_index")))
        if summary["status"] in ACTIVE:
            with contextlib.suppress(HermesError):
                if read_run(summary["run_id"]).get("backend", "local") == "local":
                    active.append(summary["run_id"])
    for sweep_id, index in live_reservations():
        if (sweep_id, index) not in named and (sweep_id, index) != member:
            active.append(f"sweep {sweep_id} member {index} (starting)")
    return active


def check_local_capacity(member: tuple[str, int] | None = None) -> None:
    limit = max_local_runs()
    if not limit:
        return
    active = active_local_runs(member)
    if len(active) >= limit:
        raise Conflict(
            f"{len(active)} local run(s) already active ({', '.join(active)}); the limit is {limit}",
            hint=f"wait for one to finish or stop one (hermes-rl stop RUN_ID), or raise {MAX_LOCAL_RUNS_ENV}",
        )


def _mixed_environments(workers: dict, main_env) -> list:
    """The run's other environments (workers.environments) found and checked: [(entry, EnvInfo)]."""
    found = []
    prefixes = {"env"}
    for entry in workers["environments"]:
        other = find_environment(entry["environment"])
        if other.error or other.abstract:
            why = other.error or f"it is {other.abstract}"
            raise BadInput(f"environment {other.id} cannot be mixed in: {why}", hint=f"fix {other.file}")
        check_trainable(other)
        prefix = mix_prefix(other.name)
        if other.id == main_env.id or prefix in prefixes:
            raise BadInput(f"environment {other.id} is in the run twice", hint="give each environment once")
        prefixes.add(prefix)
        found.append((entry, other))
    return found


def _mixed_configs(mixed: list, chosen, ports: dict, run_id: str, workers: dict, folder: Path) -> list:
    """One config file per other environment (its own env section, with its weight and share; the
    trainer reads only config.yaml): [(process prefix, EnvInfo, config path, replicas)]."""
    out = []
    for entry, other in mixed:
        values = resolve_run_values(other, chosen, None)
        config = build_run_config(other, chosen, values, ports, run_id, {**workers, "environments": []})
        config["env"]["inference_weight"] = entry["weight"]
        config["env"]["min_batch_allocation"] = entry["min_batch_allocation"]
        config["env"]["wandb_name"] = other.name  # run-api's name for it
        prefix = mix_prefix(other.name)
        path = folder / f"config-{prefix.removeprefix('env-')}.yaml"
        atomic_write_text(path, run_config_yaml(config))
        out.append((prefix, other, str(path), entry["replicas"]))
    return out


def _start_prepared(env, chosen, values: dict, notice: str | None, workers: dict, recorded: dict) -> StartedRun:
    run_id, folder = _create_run_folder()
    try:
        ports = free_ports(RUN_PORTS)
        run_config = build_run_config(env, chosen, values, ports, run_id, workers, seed=recorded.get("seed"))
        config_path = folder / CONFIG_FILE
        atomic_write_text(config_path, run_config_yaml(run_config))
        mixed = _mixed_configs(_mixed_environments(workers, env), chosen, ports, run_id, workers, folder)
        specs = training_pipeline(run_id, chosen, env, run_config, mixed=mixed)
        tinker, env_section = run_config["tinker"], run_config["env"]
        wandb = {
            "mode": "online" if secret_env(["WANDB_API_KEY"]) else "offline",
            "project": tinker["wandb_project"],
            "run_name": tinker["wandb_run_name"] or env_section["wandb_name"],
            "url": None,
            "enabled": bool(env_section["use_wandb"]),
        }
        notices = [n for n in (notice, budget_notice(run_config)) if n]
        run = _launch_prepared(
            run_id,
            folder,
            specs,
            environment=env.id,
            profile=chosen.name,
            total_steps=env_section["total_steps"],
            config=None,
            ports=ports,
            wandb=wandb,
            extra={
                "backend": chosen.backend,
                "config_path": str(config_path),
                "workers": _workers_summary(workers, env.name, mixed),
                **recorded,
            },
        )
    except KeyboardInterrupt:
        _abandon_interrupted(run_id, folder)
        raise
    except BaseException:
        _discard_unstarted(folder)
        raise
    return {**run, "notices": notices}


def budget_notice(config: Mapping[str, Any]) -> str | None:
    """Said at start when a budget cannot be kept: the model has no price (docs/cost.md)."""
    if config["tinker"].get("budget_usd") and not config["hermes"].get("price"):
        return no_price_budget_text(config["tinker"]["base_model"])  # the words every client says (cost.py)
    return None


def _workers_summary(workers: Mapping[str, Any], env_name: str, mixed: list) -> dict:
    """What run.json records of the run's workers (the full settings are in config.yaml): how they are
    launched, and each environment with its weight, share and worker processes."""
    rows = [
        {
            "environment": env_name,
            "weight": workers["weight"],
            "min_batch_allocation": workers["min_batch_allocation"],
            "processes": replica_names(workers["replicas"]),
        }
    ]
    for entry, (prefix, other, _path, replicas) in zip(workers["environments"], mixed):
        rows.append(
            {
                "environment": other.name,
                "weight": entry["weight"],
                "min_batch_allocation": entry["min_batch_allocation"],
                "processes": replica_names(replicas, prefix),
            }
        )
    summary = {k: workers[k] for k in ("launcher", "replicas", "address")}
    summary["environments"] = rows
    return summary


def _resumed_config(config: dict, run_id: str, ports: dict, resume: dict) -> RunConfig:
    """The parent's config.yaml with this run's folder, ports and resume point; every training value
    (steps, batch, learning rate, loss, W&B names) stays as the parent had it."""
    folder = run_dir(run_id)
    out = copy.deepcopy(config)
    env, tinker, backend = out.get("env") or {}, out.get("tinker") or {}, out.get("backend") or {}
    hermes = out.setdefault("hermes", {})

    # Its other environments' config files are the parent's: the resumed run trains the main one.
    # The commands among its launcher's settings (Slurm's setup, wrapper, python) are the site's file's
    # now, not the parent's config.yaml's: they come from the user's own files only (settings_over_site).
    parent = dict(out.get("workers") or {})
    for name in launchers.names():
        if name in parent:
            parent[name] = without_commands(name, parent.get(name))
    out["workers"] = resolve_workers({**parent, "environments": []})
    address = out["workers"]["address"]
    env["rollout_server_url"] = f"http://{address}:{ports['api']}"
    env["env_metrics_path"] = str(folder / "env_metrics.jsonl")
    for server in out.get("openai") or []:
        server["base_url"] = f"http://{address}:{ports['inference']}/v1"
        server["api_key"] = ENDPOINT_KEY_PLACEHOLDER  # this run's key (a parent's config may predate keys)
    tinker["checkpoint_dir"] = str(folder / "checkpoints")
    if backend.get("kind") == "local":
        backend["base_url"] = f"http://127.0.0.1:{ports['tinker']}"
    hermes.update(
        run_id=run_id,
        run_dir=str(folder),
        metrics_path=str(folder / "metrics.jsonl"),
        env_metrics_path=str(folder / "env_metrics.jsonl"),
        resume=resume,
    )
    return cast(RunConfig, out)  # the parent's config.yaml, which build_run_config wrote


def _saved_state_folder(parent_id: str, parent_folder: Path, state: dict) -> str:
    """The parent's saved state, as a path relative to its run folder (checkpoints/<model>/<kind>/<name>,
    derived from the tinker:// path with the local server's layout, so a moved $HERMES_HOME changes
    nothing); BadInput as saved_checkpoint_folder says, naming the run."""
    try:
        folder = saved_checkpoint_folder(parent_folder, state.get("state_path"), state.get("local_path"))
    except BadInput as exc:
        raise BadInput(f"run {parent_id}: {exc.message}"[:300], hint=exc.hint or "nothing to resume from") from None
    return folder.relative_to(parent_folder).as_posix()


def resume_run(parent_id: str) -> StartedRun:
    """A new run continuing a stopped, failed or lost one from its newest saved state (weights and
    optimizer): same environment, profile and config, the step count going on from the saved step.
    The new run.json names its parent (`parent_run_id`)."""
    parent = get_run(parent_id, sample=False)
    if parent["status"] not in FINAL:
        raise Conflict(
            f"run {parent_id} is {parent['status']}: only an ended run can be resumed",
            hint=f"stop it first: hermes-rl stop {parent_id}",
        )
    if parent["status"] == RunStatus.COMPLETED:
        raise Conflict(f"run {parent_id} completed all its steps: there is nothing to resume")
    parent_folder = run_dir(parent_id)
    try:
        state = read_json(parent_folder / TRAINER_STATE_FILE)
    except (OSError, ValueError):
        state = None
    if not isinstance(state, dict) or not state.get("state_path"):
        raise BadInput(
            f"run {parent_id} saved no training state to resume from",
            hint="the trainer saves one every save_checkpoint_interval steps and when it is stopped",
        )
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise BadInput(
            f"run {parent_id}: {TRAINER_STATE_FILE} records step {json.dumps(step)[:40]}, not a step count",
            hint=f"the file is written by the trainer; inspect {parent_folder / TRAINER_STATE_FILE}",
        )
    config = read_run_config(parent_id)
    total_steps = (config.get("env") or {}).get("total_steps")
    if not config or not isinstance(total_steps, int):
        raise HermesError(f"run {parent_id}: config.yaml is missing or unreadable", hint=f"see {parent_folder}")
    if state["step"] >= total_steps:
        raise Conflict(f"run {parent_id} saved its state after the last step ({state['step']} of {total_steps})")
    env = find_environment(parent["environment"])
    if env.error:
        raise BadInput(f"environment {env.name} cannot be used: {env.error}", hint=f"fix {env.file}")
    profile, notice = resolve_profile(parent["profile"])
    check_keys(profile)
    workers = config.get("workers") or {}
    name = workers.get("launcher") or "local"
    # where it ran may have changed since; the commands are the site's file's (see _resumed_config)
    launchers.get(name).preflight(
        site_and_given(name, without_commands(name, workers.get(name))), replicas=workers.get("replicas") or 1
    )
    earlier = [r["run_id"] for r in list_runs() if r.get("parent_run_id") == parent_id]
    # Everything resume reads is checked before the new run exists: a refusal leaves nothing behind.
    saved = _saved_state_folder(parent_id, parent_folder, state) if profile.backend == "local" else None
    run_id, folder = _create_run_folder()
    try:
        if saved is not None:
            # The new run's local server reads checkpoints from its own folder: copy the state there,
            # at the same place under checkpoints/ (the tinker:// path maps to it).
            shutil.copytree(parent_folder / saved, folder / saved, symlinks=True)
        ports = free_ports(RUN_PORTS)
        resume = {"parent_run_id": parent_id, "state_path": state["state_path"], "step": state["step"]}
        run_config = _resumed_config(config, run_id, ports, resume)
        config_path = folder / CONFIG_FILE
        atomic_write_text(config_path, run_config_yaml(run_config))
        specs = training_pipeline(run_id, profile, env, run_config)
        run = _launch_prepared(
            run_id,
            folder,
            specs,
            environment=env.name,
            profile=profile.name,
            total_steps=total_steps,
            config=None,
            ports=ports,
            wandb=parent.get("wandb"),
            extra={
                "backend": profile.backend,
                "config_path": str(config_path),
                "parent_run_id": parent_id,
                "resumed_from": {"step": state["step"], "state_path": state["state_path"]},
                "workers": _workers_summary(run_config["workers"], env.name, []),
                # the config.yaml copied above holds these values: the record says so too
                **{k: parent[k] for k in ("profile_values", "profile_changes") if parent.get(k)},
            },
        )
    except BaseException:
        _discard_unstarted(folder)
        raise
    continues = f"continues run {parent_id} from step {state['step']}"
    if earlier:  # the same parent resumed again: a branch beside the others, not a continuation of them
        continues += (
            f"; {parent_id} was already resumed as {', '.join(earlier)}: this run is branch {len(earlier) + 1}"
            f" from the same step (resume {earlier[-1]} to continue that branch)"
        )
    dropped = [e.get("environment") for e in (config.get("workers") or {}).get("environments") or []]
    mixed = (
        f"it trains {env.name} alone: {', '.join(map(str, dropped))} of run {parent_id} are not resumed"
        if dropped
        else None
    )
    return {**run, "notices": [n for n in (notice, continues, mixed) if n]}
