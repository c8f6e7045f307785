"""The SkyPilot launcher: a run's process as a SkyPilot task on a cluster of its own (Kubernetes, a cloud,
another Slurm site: whatever the user's SkyPilot reaches), launched and followed by a local driver.

Settings come from $HERMES_HOME/rl/skypilot.yaml under a start's `skypilot:` section: the resources a
start may give (infra, cpus, memory, accelerators, use_spot, disk_size) and, from the site file only
(command_field), the setup lines, the nodes' interpreter, the image, extra environment and the
interpreter that has SkyPilot installed (`sky_python`). SkyPilot pins versions of uvicorn and click that
hermes-rl's `local` extra cannot share, so it lives in an environment of its own: hermes-rl never imports
it. Each worker's task is written as a SkyPilot task YAML in the run folder (no key in it: keys are named
under `secrets:` without a value) and handed to `skypilot_driver.py`, run by path under `sky_python`: it
loads the task with SkyPilot's own loader, fills the secrets' values from its environment (as `sky launch
--secret NAME` does), launches the cluster (`down=True`: it is torn down once the job ends), follows the
job's log into the run's process log, and on SIGTERM cancels the job and tears the cluster down. The
driver writes the job's state to a small file the tracker reads: a worker's `where` is the infra the
optimizer chose and the job's state.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ...base.errors import BadInput
from ...base.fsutil import atomic_write_json, read_regular_text
from ...base.paths import rl_dir
from ...base.paths import run_dir as run_folder
from ...base.secrets import LOCAL_TINKER_KEY_ENV, SECRET_NAMES
from ..spawn import run_bounded
from .base import LauncherError, command_field, job_record, read_site_file

SITE_FILE = "skypilot.yaml"
DRIVER = Path(__file__).with_name("skypilot_driver.py")
LIVE_STATES = frozenset({"LAUNCHING", "PENDING", "SETTING_UP", "RUNNING", "CANCELLING"})
STOP_WAIT_S = 300.0  # a cluster's teardown on a cloud takes minutes
PREFLIGHT_TIMEOUT_S = 120.0
SECRET_PATTERN = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)


@dataclass
class SkyPilotSettings:
    """The `skypilot:` section of a run: what each worker's task asks for."""

    infra: str | None = None  # "k8s", "k8s/CONTEXT", "aws", "aws/us-east-1"…; None: the optimizer's choice
    cpus: str | int | None = None  # "4", "4+"
    memory: str | int | None = None  # GB: "16", "16+"
    accelerators: str | None = None  # "A10G:1"
    use_spot: bool = False
    disk_size: int | None = None  # GB
    # from the user's own files only (command_field)
    setup: str | list[str] | None = command_field()  # lines run once on the node before the worker
    python: str = command_field("python3")  # the nodes' interpreter, which has hermes-rl installed
    image_id: str | None = command_field()  # the image (docker:…, an AMI) the nodes run
    envs: dict[str, str] | None = command_field()  # more environment for the workers
    sky_python: str | None = command_field()  # the interpreter with SkyPilot; default: `sky`'s on PATH

    def to_json(self) -> dict:
        return dict(vars(self))


def _one_line(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value


def skypilot_settings(data: Mapping | None) -> SkyPilotSettings:
    """A `skypilot:` section checked: BadInput naming the field."""
    data = dict(data or {})
    known = set(SkyPilotSettings.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadInput(f"unknown skypilot setting(s): {', '.join(unknown)}", hint=f"known: {', '.join(sorted(known))}")
    settings = SkyPilotSettings(**data)
    for name in ("infra", "accelerators", "image_id", "sky_python", "python"):
        value = getattr(settings, name)
        if value is not None and not _one_line(value):
            raise BadInput(f"skypilot.{name} must be one line, got {str(value)[:60]!r}")
    for name in ("cpus", "memory"):
        value = getattr(settings, name)
        if value is not None and (isinstance(value, bool) or not re.fullmatch(r"\d+(\.\d+)?\+?", str(value))):
            raise BadInput(f"skypilot.{name} must be a number, or a number and + (at least), got {value!r}")
    if not isinstance(settings.use_spot, bool):
        raise BadInput(f"skypilot.use_spot must be true or false, got {settings.use_spot!r}")
    size = settings.disk_size
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 65536):
        raise BadInput(f"skypilot.disk_size must be a whole number of GB, got {size!r}")
    setup = settings.setup
    if setup is not None and not isinstance(setup, str):
        if not isinstance(setup, list) or not all(isinstance(line, str) for line in setup):
            raise BadInput("skypilot.setup must be a command or a list of command lines")
    envs = settings.envs
    if envs is not None and (
        not isinstance(envs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in envs.items())
    ):
        raise BadInput("skypilot.envs must be a mapping of names to text")
    return settings


def site_file() -> Path:
    return rl_dir() / SITE_FILE


def site_settings() -> dict:
    """The site's `skypilot:` defaults ({} without the file); BadInput naming the file when it is wrong."""
    return read_site_file(site_file(), "SkyPilot", "infra: k8s", skypilot_settings)


def sky_python(settings: SkyPilotSettings) -> str:
    """The interpreter that has SkyPilot: the site's `sky_python`, else the one `sky` on PATH runs with."""
    if settings.sky_python:
        return settings.sky_python
    sky = shutil.which("sky")
    if sky:
        with contextlib.suppress(OSError, IndexError):
            first = read_regular_text(sky, limit=4096, errors="replace").splitlines()[0]
            if first.startswith("#!") and "/" in first:
                return first[2:].strip().split()[0]
    raise BadInput(
        f"SkyPilot is not installed: no `sky` on PATH and no sky_python in {site_file()}",
        hint="install it in an environment of its own (python -m venv ~/.sky && ~/.sky/bin/pip install "
        "'skypilot[kubernetes]'), then set sky_python: ~/.sky/bin/python",
    )


def is_secret(name: str) -> bool:
    return name in SECRET_NAMES or name == LOCAL_TINKER_KEY_ENV or bool(SECRET_PATTERN.search(name))


def task_config(
    cluster: str, argv: list[str], *, cwd: str, env: Mapping[str, str], settings: SkyPilotSettings
) -> tuple[dict, list[str]]:
    """A worker's SkyPilot task (as its YAML holds it) and the names of the keys it needs. The task runs
    the worker in a folder of the same path as here, with the run's environment for it (what differs from
    the supervisor's own); keys are named under `secrets:` without a value (the driver gives them at
    launch); files the worker's command names (the run's config, the environment's file) are uploaded to
    the same paths."""
    if settings.python and argv and argv[0] == sys.executable:
        argv = [settings.python, *argv[1:]]
    secrets = sorted(k for k in env if is_secret(k))
    envs = {k: v for k, v in env.items() if k not in secrets and os.environ.get(k) != v}
    envs.update(settings.envs or {})
    resources = {
        key: value
        for key, value in (
            ("infra", settings.infra),
            ("cpus", None if settings.cpus is None else str(settings.cpus)),
            ("memory", None if settings.memory is None else str(settings.memory)),
            ("accelerators", settings.accelerators),
            ("use_spot", settings.use_spot or None),
            ("disk_size", settings.disk_size),
            ("image_id", settings.image_id),
        )
        if value is not None
    }
    setup = settings.setup if isinstance(settings.setup, str) else "\n".join(settings.setup or [])
    config: dict[str, Any] = {
        "name": cluster,
        "resources": resources,
        "envs": envs,
        "run": f"mkdir -p {shlex.quote(cwd)} && cd {shlex.quote(cwd)} && exec {shlex.join(argv)}",
    }
    if setup:
        config["setup"] = setup
    if secrets:
        config["secrets"] = dict.fromkeys(secrets)  # names only: the values never reach a file
    mounts = {arg: arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)}
    if mounts:
        config["file_mounts"] = mounts
    return config, secrets


def _state_of(path: Path) -> dict:
    try:
        data = json.loads(read_regular_text(path, follow=False))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class SkyTask:
    """A process running as a SkyPilot task, as its driver (a local process) reports it."""

    launcher = "skypilot"
    pid = pgid = create_time = start_ticks = None
    kill_grace_s = 10.0  # after kill() only the local driver must vanish; its teardown goes on on its own

    def __init__(self, tracker: SkyTracker, cluster: str, driver: subprocess.Popen, state_file: Path, python: str):
        self.tracker = tracker
        self.cluster = cluster  # the job's id: what `sky logs`, `sky down` take
        self.driver = driver
        self.state_file = state_file
        self.python = python
        self.state = "LAUNCHING"
        self.node: str | None = None
        self.message: str | None = None
        self.stopped = False
        self.returncode: int | None = None

    def refresh(self) -> bool:
        """Read the driver's state file; whether the state or node changed."""
        data = _state_of(self.state_file)
        before = (self.state, self.node)
        self.state = str(data.get("state") or self.state)
        self.node = data.get("infra") or self.node
        self.message = data.get("message") or self.message
        code = self.driver.poll()
        if code is not None and self.returncode is None:
            if self.state in LIVE_STATES:
                self.state = "CANCELLED" if self.stopped else "FAILED"
            self.returncode = -signal.SIGTERM if self.stopped and code != 0 else code
        return (self.state, self.node) != before

    def poll(self) -> int | None:
        if self.returncode is None:
            self.tracker.refresh()
        return self.returncode

    def leftovers(self) -> bool:
        return self.driver.poll() is None

    def what(self) -> str:
        return f"SkyPilot cluster {self.cluster}" + (f" on {self.node}" if self.node else "")

    def terminate(self) -> None:
        """The driver cancels the job and tears the cluster down, then exits."""
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.driver.pid, signal.SIGTERM)

    def kill(self) -> None:
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.driver.pid, signal.SIGKILL)
        down_clusters(self.python, self.tracker.run_id, [self.cluster], wait=False)

    def watchdog_line(self) -> str:
        return f"job skypilot {self.cluster}"

    def record(self) -> dict:
        return {"launcher": "skypilot", "job": job_record("skypilot", self.cluster, self.node, self.state)}

    def stop_words(self, code: int) -> str:
        if self.stopped:
            return f"SkyPilot cluster {self.cluster} cancelled and torn down"
        return f"SkyPilot job on {self.cluster} {self.state}" + (f": {self.message[:120]}" if self.message else "")

    def change_words(self) -> str:
        return f"SkyPilot job on {self.cluster} {self.state}" + (f" on {self.node}" if self.node else "")


class SkyTracker:
    """The run's SkyPilot tasks: launches their drivers and reads their state files (once a second)."""

    def __init__(self, run_id: str, run_dir: Path):
        self.run_id = run_id
        self.folder = Path(run_dir) / "skypilot"
        self.tasks: dict[str, SkyTask] = {}
        self.last_refresh = 0.0
        self.on_change: Callable[[Any], None] | None = None

    def launch(self, name: str, argv: list[str], *, cwd: str, env: dict[str, str], log_fd: int, settings):
        python = sky_python(settings)
        cluster = f"hermes-{self.run_id}-{name}-{os.urandom(2).hex()}".lower()
        config, secrets = task_config(cluster, argv, cwd=cwd, env=env, settings=settings)
        self.folder.mkdir(mode=0o700, exist_ok=True)
        task_file = self.folder / f"{cluster}.yaml"
        state_file = self.folder / f"{cluster}.state"
        atomic_write_json(task_file, config)  # JSON is YAML: SkyPilot's loader reads it as its task YAML
        atomic_write_json(state_file, {"state": "LAUNCHING"})
        driver_env = {**{k: v for k, v in os.environ.items() if not is_secret(k)}, **{k: env[k] for k in secrets}}
        try:
            driver = subprocess.Popen(
                [python, str(DRIVER), "run", str(task_file), cluster, str(state_file), *secrets],
                env=driver_env,  # the keys' values: in the driver's environment only
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise LauncherError(f"cannot run SkyPilot's interpreter {python}: {exc.strerror}", retry=False) from None
        task = SkyTask(self, cluster, driver, state_file, python)
        self.tasks[cluster] = task
        self.last_refresh = 0.0
        return task

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_refresh < 1.0:
            return
        self.last_refresh = now
        for task in self.tasks.values():
            if task.returncode is None and task.refresh() and self.on_change:
                self.on_change(task)


def down_clusters(python: str, run_id: str, clusters: list[str], wait: bool = True) -> tuple[list, list]:
    """Tear down the clusters named and every cluster of the run SkyPilot lists ((down, still there));
    without `wait`, in a process of its own that outlives the caller."""
    argv = [python, str(DRIVER), "down", run_id, *clusters]
    if not wait:
        with contextlib.suppress(OSError):
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        return [], list(clusters)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STOP_WAIT_S, stdin=subprocess.DEVNULL)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return list(answer["down"]), list(answer["left"])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError, TypeError):
        return [], list(clusters)


def preflight(data: Mapping | None, replicas: int = 1) -> None:
    """BadInput, with the reason, when SkyPilot cannot take the workers: no SkyPilot interpreter, or no
    enabled infra where the settings ask (SkyPilot's own check, through the driver)."""
    settings = skypilot_settings(data)
    python = sky_python(settings)
    argv = [python, str(DRIVER), "check", settings.infra or ""]
    try:
        done = run_bounded(argv, PREFLIGHT_TIMEOUT_S, env=dict(os.environ))
    except OSError as exc:
        raise BadInput(f"SkyPilot's check did not answer with {python}: {exc}") from None
    if done.timed_out:
        raise BadInput(f"SkyPilot's check did not answer with {python} in {PREFLIGHT_TIMEOUT_S:g} s")
    out, err = (done.stdout.decode("utf-8", "replace").strip(), done.stderr.decode("utf-8", "replace").strip())
    lines = (out or err or "no output").splitlines()
    if done.returncode != 0:
        raise BadInput(f"SkyPilot cannot launch the workers: {lines[-1][:300]}", hint=f"run `sky check` with {python}")


def _is_driver(pid: int, cluster: str) -> bool:
    """Whether `pid` is still the driver of `cluster` (a finished driver's pid may be another process's now)."""
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return False
    return any(a.endswith(DRIVER.name) for a in argv) and cluster in argv


class SkyPilotLauncher:
    """Tasks on whatever SkyPilot reaches (`env_launcher: skypilot`)."""

    name = "skypilot"
    settings_class = SkyPilotSettings
    site_file = SITE_FILE
    remote = True
    cancelled_state = "CANCELLED"

    def settings(self, data: Mapping | None) -> SkyPilotSettings:
        return skypilot_settings(data)

    def site_settings(self) -> dict:
        return site_settings()

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        preflight(settings, replicas)

    def tracker(self, run_id: str, run_dir: Path) -> SkyTracker:
        return SkyTracker(run_id, run_dir)

    def start(self, name, argv, *, cwd, env, log_fd, log, settings, tracker, warm=None) -> SkyTask:
        assert isinstance(tracker, SkyTracker)
        try:
            resolved = skypilot_settings({**site_settings(), **settings})  # a spec's own over the site's
            return tracker.launch(name, argv, cwd=cwd, env=env, log_fd=log_fd, settings=resolved)
        except BadInput as exc:
            raise LauncherError(exc.message, retry=False) from None

    def cleanup(self, run_id: str, job_ids: list[str]) -> tuple[list[str], list[str]]:
        """The run's drivers ended, then its clusters torn down (those recorded and any SkyPilot lists)."""
        folder = run_folder(run_id) / "skypilot"
        for state in folder.glob("*.state") if folder.is_dir() else []:
            pid = _state_of(state).get("driver_pid")
            if isinstance(pid, int) and pid > 1 and _is_driver(pid, state.stem):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        try:
            python = sky_python(skypilot_settings(site_settings()))
        except BadInput:
            return [], list(job_ids)
        return down_clusters(python, run_id, job_ids)

    def where(self, job: Mapping) -> str:
        return " ".join(str(p) for p in (job.get("node"), job.get("state")) if p)

    def job_running(self, job: Mapping) -> bool:
        return bool(job.get("id")) and job.get("state") in LIVE_STATES

    def view_fields(self, job: Mapping) -> dict:
        return {}


LAUNCHER = SkyPilotLauncher()
