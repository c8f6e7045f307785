"""The Ray launcher: a run's process as a Ray job on an existing Ray cluster, submitted through the
cluster's dashboard address (what `ray job submit --address` takes; `RAY_ADDRESS` as with Ray's CLI).

Settings come from $HERMES_HOME/rl/ray.yaml under a start's `ray:` section. The address and the nodes'
interpreter are site-file-only (command_field): the address decides where the workers' keys go. A job's
entrypoint names only a file in the run folder (`ray_entry`): its argv, environment (keys included),
working folder and log are read from there on the node, so no key appears in the entrypoint, metadata or
runtime_env a cluster shows; the worker's output is appended to the run's process log as it is written.
The run folder must therefore be on a filesystem the cluster's nodes mount at the same path (as Slurm).
Jobs carry {"hermes_run": RUN_ID} as metadata, so a lost run's jobs are found and stopped.
`ray` (the `ray` extra) is imported only when a Ray run needs it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...base.errors import BadInput
from ...base.paths import rl_dir
from .base import LauncherError, TrackedJob, command_field, job_record, read_site_file

SITE_FILE = "ray.yaml"
RAY_LIVE_STATES = frozenset({"PENDING", "RUNNING"})
RAY_POLL_S = 1.0
RAY_STOP_WAIT_S = 30.0
PROBE_TIMEOUT_S = 120.0


@dataclass
class RaySettings:
    """The `ray:` section of a run: what each worker's job asks for."""

    cpus_per_worker: float = 1.0  # the job's entrypoint_num_cpus
    gpus_per_worker: float = 0.0  # its entrypoint_num_gpus
    # from the user's own files only (command_field)
    address: str | None = command_field()  # the dashboard URL; default RAY_ADDRESS
    python: str | None = command_field()  # the nodes' interpreter instead of this host's sys.executable

    def to_json(self) -> dict:
        return dict(vars(self))


def ray_settings(data: Mapping | None) -> RaySettings:
    """A `ray:` section checked: BadInput naming the field."""
    data = dict(data or {})
    known = set(RaySettings.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadInput(f"unknown ray setting(s): {', '.join(unknown)}", hint=f"known: {', '.join(sorted(known))}")
    settings = RaySettings(**data)
    for name in ("cpus_per_worker", "gpus_per_worker"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 4096:
            raise BadInput(f"ray.{name} must be a number from 0, got {value!r}")
    for name in ("address", "python"):
        value = getattr(settings, name)
        if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
            raise BadInput(f"ray.{name} must be one line, got {str(value)[:60]!r}")
    return settings


def site_file() -> Path:
    return rl_dir() / SITE_FILE


def site_settings() -> dict:
    """The site's `ray:` defaults ({} without the file); BadInput naming the file when it is wrong."""
    return read_site_file(site_file(), "Ray", "address: …", ray_settings)


def address_of(settings: RaySettings) -> str:
    address = settings.address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise BadInput(
            f"no Ray cluster address: set address in {site_file()} or RAY_ADDRESS",
            hint="the cluster's dashboard URL, as `ray job submit --address` takes it (http://head:8265)",
        )
    return address


def _ray(module: str):
    """One of Ray's modules, imported without the mark its import leaves in this process's environment
    (RAY_CLIENT_MODE=0): it would go to every process started after it, and a run whose environment
    differs from the warm base's (the dashboard's, the tests') forks nothing from it."""
    before = os.environ.get("RAY_CLIENT_MODE")
    try:
        return importlib.import_module(module)  # the optional `ray` extra, heavy: only when a Ray run needs it
    finally:
        if before is None:
            os.environ.pop("RAY_CLIENT_MODE", None)


def client(address: str):
    """A job submission client of the cluster; LauncherError when it cannot be reached."""
    try:
        JobSubmissionClient = _ray("ray.job_submission").JobSubmissionClient  # noqa: N806 - Ray's class
    except ImportError:
        raise LauncherError("Ray is not installed: pip install 'hermes-rl[ray]'", retry=False) from None
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, ValueError, RuntimeError…
        raise LauncherError(f"cannot reach the Ray cluster at {address}: {str(exc).splitlines()[0][:200]}") from None


def _field(item: Any, name: str) -> Any:
    """A field of a state-API row (a dataclass in some Ray versions, a dict in others)."""
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def cluster_nodes(address: str) -> list[Any]:
    """The cluster's live nodes, by Ray's state API ([] when it does not answer)."""
    try:
        list_nodes = _ray("ray.util.state").list_nodes
        return [n for n in list_nodes(address=address) if "DEAD" not in str(_field(n, "state"))]
    except Exception:  # noqa: BLE001 - an older dashboard or a busy one: callers go on without it
        return []


def _state(status: Any) -> str:
    return str(getattr(status, "value", status))


def _exit_code(details: Any) -> int:
    state = _state(details.status)
    code = getattr(details, "driver_exit_code", None)
    if state == "STOPPED":
        return -signal.SIGTERM
    if isinstance(code, int):
        return code
    return 0 if state == "SUCCEEDED" else 1


class RayJob(TrackedJob):
    """A process running as a Ray job; its state comes from the tracker's one list_jobs per poll."""

    LABEL, LIVE_STATES = "Ray", RAY_LIVE_STATES

    launcher = "ray"
    pid = pgid = create_time = start_ticks = None
    kill_grace_s = RAY_STOP_WAIT_S

    def __init__(self, tracker: RayTracker, job_id: str):
        self.tracker = tracker
        self.job_id = job_id
        self.state = "PENDING"
        self.node: str | None = None
        self.message: str | None = None
        self.returncode: int | None = None

    def terminate(self) -> None:
        if self.state in RAY_LIVE_STATES:
            with contextlib.suppress(Exception):  # a cluster that went away: the next poll says so
                self.tracker.client().stop_job(self.job_id)  # SIGTERM, then Ray's SIGKILL after its wait

    def kill(self) -> None:
        self.terminate()

    def watchdog_line(self) -> str:
        return f"job ray {self.job_id}"

    def record(self) -> dict:
        return {"launcher": "ray", "job": job_record("ray", self.job_id, self.node, self.state)}

    def stop_words(self, code: int) -> str:
        if self.state == "STOPPED":
            return f"Ray job {self.job_id} stopped"
        return f"Ray job {self.job_id} {self.state}" + (f": {self.message[:120]}" if self.message else "")

    def change_words(self) -> str:
        return f"Ray job {self.job_id} {self.state}" + (f" on {self.node}" if self.node else "")

    def update(self, details: Any, node: str | None) -> None:
        self.state = _state(details.status)
        self.node = node or self.node
        self.message = details.message
        if self.state not in RAY_LIVE_STATES and self.returncode is None:
            self.returncode = _exit_code(details)


class RayTracker:
    """The run's Ray jobs: submits them and keeps their state fresh (one list_jobs per RAY_POLL_S)."""

    def __init__(self, run_id: str, run_dir: Path):
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.jobs: dict[str, RayJob] = {}
        self.address: str | None = None
        self._client: Any = None
        self.nodes: dict[str, str] = {}  # node id -> its address
        self.last_refresh = 0.0
        self.on_change: Callable[[Any], None] | None = None

    def client(self):
        if self._client is None:
            assert self.address is not None
            self._client = client(self.address)
        return self._client

    def submit(self, name: str, argv: list[str], *, cwd: str, env: dict[str, str], log: Path, settings: RaySettings):
        self.address = address_of(settings)
        folder = self.run_dir / "ray"
        folder.mkdir(mode=0o700, exist_ok=True)
        if settings.python and argv and argv[0] == sys.executable:
            argv = [settings.python, *argv[1:]]
        # the worker's whole start, keys included, in a private file of the run folder: never in the job
        spec = folder / f"{name}-{uuid.uuid4().hex[:8]}.json"
        fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"argv": argv, "env": env, "cwd": cwd, "log": str(log)}, handle)
        python = settings.python or sys.executable
        entrypoint = f"{python} -m hermes_rl.core.daemons.launchers.ray_entry {spec}"
        submission = f"hermes-{self.run_id}-{name}-{uuid.uuid4().hex[:6]}"
        try:
            job_id = self.client().submit_job(
                entrypoint=entrypoint,
                submission_id=submission,
                metadata={"hermes_run": self.run_id, "hermes_process": name},
                entrypoint_num_cpus=settings.cpus_per_worker,
                entrypoint_num_gpus=settings.gpus_per_worker or None,
            )
        except LauncherError:
            raise
        except Exception as exc:  # noqa: BLE001 - the cluster refused it, in Ray's words
            spec.unlink(missing_ok=True)
            raise LauncherError(f"Ray refused the job: {str(exc).splitlines()[0][:200]}") from None
        job = RayJob(self, job_id)
        self.jobs[job_id] = job
        self.last_refresh = 0.0
        return job

    def _node(self, node_id: str | None) -> str | None:
        if not node_id:
            return None
        if node_id not in self.nodes and self.address:
            for node in cluster_nodes(self.address):
                self.nodes[str(_field(node, "node_id"))] = str(_field(node, "node_ip"))
        return self.nodes.get(node_id, node_id[:12])

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        watched = [j for j in self.jobs.values() if j.state in RAY_LIVE_STATES]
        if not watched or (not force and now - self.last_refresh < RAY_POLL_S):
            return
        self.last_refresh = now
        try:
            listed = {d.submission_id: d for d in self.client().list_jobs()}
        except Exception:  # noqa: BLE001 - the dashboard is busy or restarting: jobs keep their last state
            return
        for job in watched:
            details = listed.get(job.job_id)
            if details is None:
                continue
            before = (job.state, job.node)
            job.update(details, self._node(details.driver_node_id))
            if (job.state, job.node) != before and self.on_change:
                self.on_change(job)


def run_jobs(address: str, run_id: str) -> list[str]:
    """The ids of the run's jobs the cluster lists as live."""
    listed = client(address).list_jobs()
    return [
        d.submission_id
        for d in listed
        if (d.metadata or {}).get("hermes_run") == run_id and _state(d.status) in RAY_LIVE_STATES
    ]


def stop_jobs(address: str, run_id: str, job_ids: list[str], wait: float = RAY_STOP_WAIT_S) -> tuple[list, list]:
    """Stop the jobs named and every live job of the run; (stopped, still live after `wait`)."""
    try:
        every = list(dict.fromkeys([*job_ids, *run_jobs(address, run_id)]))
        jobs = client(address)
    except LauncherError:
        return [], list(job_ids)
    for job_id in every:
        with contextlib.suppress(Exception):
            jobs.stop_job(job_id)
    deadline = time.monotonic() + wait
    live = every
    while True:
        with contextlib.suppress(Exception):
            listed = {d.submission_id: _state(d.status) for d in jobs.list_jobs()}
            live = [j for j in every if listed.get(j) in RAY_LIVE_STATES]
        if not live or time.monotonic() >= deadline:
            return [j for j in every if j not in live], live
        time.sleep(0.5)


def preflight(data: Mapping | None, replicas: int = 1) -> None:
    """BadInput, with the reason, when the cluster cannot take the workers: Ray missing here, the cluster
    unreachable, too few CPUs for the replicas, or a different Python or hermes-rl on its nodes (asked of
    the cluster by a short job)."""
    settings = ray_settings(data)
    address = address_of(settings)
    try:
        jobs = client(address)
    except LauncherError as exc:
        raise BadInput(str(exc), hint=f"start the cluster, or fix address in {site_file()}") from None
    # the state API unavailable (total 0): the probe job below still runs
    total = sum(float((_field(n, "resources_total") or {}).get("CPU", 0)) for n in cluster_nodes(address))
    if total and total < settings.cpus_per_worker * replicas:
        raise BadInput(
            f"the Ray cluster at {address} has {total:g} CPUs; {replicas} worker(s) need "
            f"{settings.cpus_per_worker * replicas:g}",
            hint="fewer replicas, or ray.cpus_per_worker lower",
        )
    mine = f"{sys.version_info.major}.{sys.version_info.minor} {importlib.metadata.version('hermes-rl')}"
    probe = (
        "import sys, importlib.metadata as m; "
        "print('hermes-probe', f'{sys.version_info.major}.{sys.version_info.minor}', m.version('hermes-rl'))"
    )
    python = settings.python or sys.executable
    job_id = jobs.submit_job(entrypoint=f'{python} -c "{probe}"', metadata={"hermes_preflight": "1"})
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while _state(jobs.get_job_status(job_id)) in RAY_LIVE_STATES:
        if time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                jobs.stop_job(job_id)
            raise BadInput(f"the Ray cluster at {address} did not run a probe job within {PROBE_TIMEOUT_S:g}s")
        time.sleep(0.3)
    logs = jobs.get_job_logs(job_id)
    found = [line.split(" ", 1)[1] for line in logs.splitlines() if line.startswith("hermes-probe ")]
    if not found:
        last = (logs.strip().splitlines() or ["no output"])[-1][:200]
        raise BadInput(f"the Ray cluster at {address} cannot run hermes-rl with {python}: {last}")
    if found[-1].strip() != mine:
        raise BadInput(
            f"the Ray cluster's nodes run Python and hermes-rl {found[-1].strip()}, this host {mine}",
            hint=f"install the version this host has on the nodes, or set python in {site_file()}",
        )


class RayLauncher:
    """Jobs on an existing Ray cluster (`env_launcher: ray`)."""

    name = "ray"
    settings_class = RaySettings
    site_file = SITE_FILE
    remote = True
    cancelled_state = "STOPPED"

    def settings(self, data: Mapping | None) -> RaySettings:
        return ray_settings(data)

    def site_settings(self) -> dict:
        return site_settings()

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        preflight(settings, replicas)

    def tracker(self, run_id: str, run_dir: Path) -> RayTracker:
        return RayTracker(run_id, run_dir)

    def start(self, name, argv, *, cwd, env, log_fd, log, settings, tracker, warm=None) -> RayJob:
        assert isinstance(tracker, RayTracker)
        if not os.path.isdir(cwd):
            raise FileNotFoundError(2, "No such file or directory", cwd)
        try:
            resolved = ray_settings({**site_settings(), **settings})  # a spec's own over the site's
            return tracker.submit(name, argv, cwd=cwd, env=env, log=log, settings=resolved)
        except BadInput as exc:
            raise LauncherError(exc.message, retry=False) from None

    def cleanup(self, run_id: str, job_ids: list[str]) -> tuple[list[str], list[str]]:
        try:
            address = address_of(ray_settings(site_settings()))
        except BadInput:
            return [], list(job_ids)
        return stop_jobs(address, run_id, job_ids)

    def where(self, job: Mapping) -> str:
        return " ".join(str(p) for p in (job.get("node"), job.get("state")) if p)

    def job_running(self, job: Mapping) -> bool:
        return bool(job.get("id")) and job.get("state") in RAY_LIVE_STATES

    def view_fields(self, job: Mapping) -> dict:
        return {}


LAUNCHER = RayLauncher()
