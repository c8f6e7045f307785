"""The launcher contract: what every launcher (local, Slurm, one a package publishes) gives the supervisor.

A launcher is where a run's process runs. The supervisor and the run library only talk to it through
`Launcher` (validated settings, a preflight, an optional tracker, `start`, the cleanup of a lost run's
jobs, a one-line "where") and to what `start` returns through `Handle` (poll, leftovers, what,
terminate, kill, its watchdog line, its run.json record, its stop words). The one rule for commands
lives here too (`command_field`, `settings_over_site`): every launcher inherits it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ...base.errors import BadInput
from ...base.fsutil import read_yaml


class LauncherError(Exception):
    """A process could not be started; the message says why in words. `retry` is False where trying the
    same start again cannot help or could run the worker twice (a refusal sbatch gives every time, a
    submission whose outcome is unknown)."""

    def __init__(self, message: str, *, retry: bool = True):
        super().__init__(message)
        self.retry = retry


@runtime_checkable
class Handle(Protocol):
    """One started attempt of a process, as its launcher reports it."""

    # read-only members (properties, so a handle's own narrower types fit)
    @property
    def launcher(self) -> str: ...

    @property
    def pid(self) -> int | None:
        """A process on this machine: its pid and group (None for a job elsewhere)."""
        ...

    @property
    def pgid(self) -> int | None: ...

    @property
    def create_time(self) -> float | None: ...

    @property
    def start_ticks(self) -> int | None: ...

    @property
    def kill_grace_s(self) -> float:
        """How long it gets to vanish after kill() before the supervisor reports it."""
        ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def leftovers(self) -> bool:
        """Whether anything of it is still there after its main process ended (a group, a queued job)."""
        ...

    def what(self) -> str:
        """What it is, in words for events ("process group 42", "Slurm job 16 on node3")."""
        ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def watchdog_line(self) -> str:
        """How the watchdog ends it should the supervisor die: `pgid N`, or `job LAUNCHER ID`."""
        ...

    def record(self) -> dict:
        """What run.json records about it: {"launcher": …} and, for a job, {"job": job_record(…)}."""
        ...

    def stop_words(self, code: int) -> str:
        """How it ended when stopped, for the run's events ("Slurm job 16 cancelled", "SIGTERM")."""
        ...

    def change_words(self) -> str:
        """Its state after its tracker saw it change, for the run's events ("Slurm job 16 RUNNING on node3")."""
        ...


class TrackedJob:
    """What a job on a cluster scheduler shares, whatever the scheduler: its state, kept by the run's tracker
    in one call for all its jobs (`LABEL`: the scheduler's word; `LIVE_STATES`: the states of a job not ended)."""

    LABEL = ""
    LIVE_STATES: frozenset[str] = frozenset()
    tracker: Any
    job_id: str
    state: str
    node: str | None
    returncode: int | None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.tracker.refresh()
        return self.returncode

    def leftovers(self) -> bool:
        """Whether the scheduler still lists the job as not ended."""
        self.tracker.refresh()
        return self.state in self.LIVE_STATES

    def what(self) -> str:
        return f"{self.LABEL} job {self.job_id}" + (f" on {self.node}" if self.node else "")


class Tracker(Protocol):
    """A run's jobs on one launcher, kept fresh in one call for all (Slurm: one squeue per poll)."""

    on_change: Callable[[Any], None] | None  # called with a handle whose state or node changed


@runtime_checkable
class Launcher(Protocol):
    """Where a run's process runs. Registered by name (launchers.registry)."""

    @property
    def name(self) -> str: ...

    @property
    def settings_class(self) -> type | None:
        """A dataclass of its settings (command fields marked by command_field); None: it takes none."""
        ...

    @property
    def site_file(self) -> str | None:
        """Its site settings' file name under $HERMES_HOME/rl (None: it has none)."""
        ...

    @property
    def remote(self) -> bool:
        """Its workers run on other machines: the run's servers bind an address they reach."""
        ...

    def settings(self, data: Mapping | None) -> Any:
        """Its settings checked from data: BadInput naming the field."""
        ...

    def site_settings(self) -> dict:
        """The site's settings from its file ({} without one); BadInput naming the file."""
        ...

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        """BadInput, with the reason, when `replicas` workers with these settings cannot run (checked
        before anything of the run starts)."""
        ...

    def tracker(self, run_id: str, run_dir: Path) -> Tracker | None: ...

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_fd: int,
        log: Path,
        settings: Mapping,
        tracker: Tracker | None,
        warm: Any = None,
    ) -> Handle:
        """Start one process: OSError or LauncherError when it cannot."""
        ...

    def cleanup(self, run_id: str, job_ids: list[str]) -> tuple[list[str], list[str]]:
        """End a lost run's jobs (those recorded and any other the launcher finds for the run): the ids
        ended and the ids still there."""
        ...

    def where(self, job: Mapping) -> str:
        """Where a job runs, in one line ("node3 RUNNING", "PENDING")."""
        ...

    def job_running(self, job: Mapping) -> bool:
        """Whether a job record says it still runs (a job has no pid here to check)."""
        ...

    def view_fields(self, job: Mapping) -> dict:
        """Fields a process view kept from earlier versions ({} for most launchers)."""
        ...


def job_record(launcher: str, job_id: str | None, node: str | None, state: str | None) -> dict:
    """The launcher-neutral record of a job in run.json."""
    return {"launcher": launcher, "id": job_id, "node": node, "state": state}


def job_of(proc: Mapping) -> dict | None:
    """A process record's job, from `job` or from the fields run.json had before it (job_id, slurm_state)."""
    job = proc.get("job")
    if isinstance(job, Mapping):
        return dict(job)
    if proc.get("job_id") or "slurm_state" in proc:
        return job_record(
            proc.get("launcher") or "slurm", proc.get("job_id"), proc.get("node"), proc.get("slurm_state")
        )
    return None


# ---------------------------------------------------------------- settings that are commands
# A launcher's settings may hold commands: shell lines, a program the worker runs under, the interpreter,
# an entrypoint or a runtime environment. Those come only from the user's own files (a site's settings,
# like $HERMES_HOME/rl/slurm.yaml), never from what a start is given (an agent tool, a CLI option, a
# per-run override): text that steers an agent could otherwise run anything on every node. Each
# launcher's settings class marks such fields with `command_field`; `settings_over_site` is the one
# merge of a start's settings over the site's, and refuses them there, so a new launcher inherits it.
# A script or task a launcher generates carries no directive but hermes-rl's own.


def command_field(default=None, *, factory=None):
    """A settings field that is a command: taken from the user's own files only (settings_over_site)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"command": True})
    return field(default=default, metadata={"command": True})


def command_keys(settings_class: type | None) -> dict[str, object]:
    """The fields of a launcher's settings class that are commands, with their defaults."""
    out: dict[str, object] = {}
    if settings_class is None or not is_dataclass(settings_class):
        return out
    for item in fields(settings_class):
        if item.metadata.get("command"):
            factory = item.default_factory
            out[item.name] = factory() if factory is not MISSING else item.default
    return out


def settings_over_site(
    launcher: str, site: Mapping, given: Mapping | None, *, site_file: str, settings_class: type | None
) -> dict:
    """A start's settings for `launcher` (whose settings are `settings_class`) over the site's (key by
    key); BadInput, with the reason, for a command key the start gives unless it only repeats what the
    site's file already says (so settings resolved once can be resolved again)."""
    if given is not None and not isinstance(given, Mapping):
        raise BadInput(f"{launcher} settings must be a mapping of settings, got {str(given)[:60]!r}")
    given = dict(given or {})
    commands = command_keys(settings_class)
    for key in sorted(set(given) & set(commands)):
        if given[key] != site.get(key, commands[key]):
            raise BadInput(
                f"{launcher}.{key} is a command a worker runs: it comes only from your own {site_file}, "
                "never from a start's settings (an agent tool, a CLI option, a per-run override)",
                hint=f"put {key} in {site_file} yourself if the workers need it",
            )
    return {**site, **given}


def event_fields(record: Mapping) -> dict:
    """A handle's record as an event's fields: the job's id and node also flat (job_id, node)."""
    job = record.get("job")
    if isinstance(job, Mapping):
        return {**record, "job_id": job.get("id"), "node": job.get("node")}
    return dict(record)


def read_site_file(path: Path, launcher: str, example: str, validate: Callable[[dict], object]) -> dict:
    """A launcher's site defaults from its file under $HERMES_HOME/rl ({} without the file), checked by
    `validate`; BadInput naming the file when it is wrong. One way for every launcher's site file."""
    data = read_yaml(path, what=f"{launcher} site settings")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{path} must be a mapping of {launcher.lower()} settings ({example})")
    try:
        validate(data)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc.message}", hint=exc.hint) from None
    return data
