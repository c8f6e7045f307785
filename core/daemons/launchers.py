"""Where a run's process runs: on this machine as a process group, or on a Slurm cluster as a batch job.

The supervisor starts every process through `start_process` and then only talks to the handle it gets
back (poll, leftovers, terminate, kill), so its one state machine — readiness checks, restarts, stop order — serves
both launchers. A handle also says how the watchdog ends it should the supervisor die (`watchdog_line`)
and what run.json records about it (`record`).

Slurm: one batch job per process (`sbatch`), not steps of one allocation: each worker is scheduled,
restarted and cancelled on its own, a restart never waits for (or holds) a whole allocation, and the
cluster may place replicas on whichever nodes are free. Jobs are named `hermes-<run>-<process>` and
carry `hermes-rl:<run>` as their comment, so the run's jobs can be found by name. Their output is
appended to the process log in the run folder by slurmd on the node that runs them: the run folder
must be on a filesystem every node mounts at the same path ($HERMES_HOME on a shared filesystem).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from ..base.errors import BadInput
from ..base.fsutil import write_regular_text
from ..base.names import is_ascii_digits, is_name
from . import procscan
from .spawn import describe_exit, spawn_group
from .warm.client import ColdStartNeeded, WarmStarts

LAUNCHERS = ("local", "slurm")
SLURM_CALL_TIMEOUT_S = 30.0  # one sbatch/squeue/scancel call; a busy controller answers slowly
# squeue is asked about all the run's jobs in one call: every SLURM_POLL_S while one is queued, starting
# or being stopped, every SLURM_STEADY_POLL_S while all run (a cluster's controller serves every user).
SLURM_POLL_S = 0.5
SLURM_STEADY_POLL_S = 2.0
# squeue states of a job that still holds (or waits for) resources; any other state is an end.
SLURM_LIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
    | {"RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
)
SQUEUE_FIELDS = "JobID:|,State:|,NodeList:|,Reason:|,exit_code:|"  # one line per job, fields ended by |
_SLURM_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^UNLIMITED$|^INFINITE$")
_SLURM_MEM_RE = re.compile(r"^\d+[KMGT]?$")


def recorded_job_running(proc: dict) -> bool:
    """Whether run.json records `proc` as a Slurm job squeue last listed as live. A job has no pid here to
    check, so its record (kept fresh by the supervisor's squeue polls) is what says it runs."""
    return proc.get("launcher") == "slurm" and bool(proc.get("job_id")) and proc.get("slurm_state") in SLURM_LIVE_STATES


# ---------------------------------------------------------------- settings that are commands
# A launcher's settings may hold commands: shell lines, a program the worker runs under, the interpreter,
# an entrypoint or a runtime environment. Those come only from the user's own files (a site's settings,
# like $HERMES_HOME/rl/slurm.yaml), never from what a start is given (an agent tool, a CLI option, a
# per-run override): text that steers an agent could otherwise run anything on every node. Each
# launcher's settings class marks such fields with `command_field`; `settings_over_site` is the one
# merge of a start's settings over the site's, and refuses them there, so a new launcher inherits it.


def command_field(default=None, *, factory=None):
    """A settings field that is a command: taken from the user's own files only (settings_over_site)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"command": True})
    return field(default=default, metadata={"command": True})


def command_keys(settings_class: type) -> dict[str, object]:
    """The fields of a launcher's settings class that are commands, with their defaults."""
    out: dict[str, object] = {}
    for item in fields(settings_class):
        if item.metadata.get("command"):
            factory = item.default_factory
            out[item.name] = factory() if factory is not MISSING else item.default
    return out


def settings_over_site(launcher: str, site: Mapping, given: Mapping | None, *, site_file: str) -> dict:
    """A start's settings for `launcher` over the site's (key by key); BadInput, with the reason, for a
    command key the start gives unless it only repeats what the site's file already says (so settings
    resolved once can be resolved again)."""
    if given is not None and not isinstance(given, Mapping):
        raise BadInput(f"{launcher} settings must be a mapping of settings, got {str(given)[:60]!r}")
    given = dict(given or {})
    settings_class = LAUNCHER_SETTINGS.get(launcher)
    commands = command_keys(settings_class) if settings_class is not None else {}
    for key in sorted(set(given) & set(commands)):
        if given[key] != site.get(key, commands[key]):
            raise BadInput(
                f"{launcher}.{key} is a command a worker runs: it comes only from your own {site_file}, "
                "never from a start's settings (an agent tool, a CLI option, a per-run override)",
                hint=f"put {key} in {site_file} yourself if the workers need it",
            )
    return {**site, **given}


def without_commands(launcher: str, data: Mapping | None) -> dict:
    """`data` without the command keys of `launcher`'s settings (a resumed run takes the site's again)."""
    settings_class = LAUNCHER_SETTINGS.get(launcher)
    commands = command_keys(settings_class) if settings_class is not None else {}
    return {k: v for k, v in (data or {}).items() if k not in commands}


# The first line of every generated batch script after its shebang: sbatch reads `#SBATCH` directives
# only up to the first command, so no line below (a setup line starting with #SBATCH) becomes one.
# hermes-rl's own options go on sbatch's command line.
SCRIPT_HEAD = "#!/bin/bash\n: hermes-rl worker, options on the sbatch command line\n"


def job_name(run_id: str, process: str) -> str:
    return f"hermes-{run_id}-{process}"


def job_comment(run_id: str) -> str:
    return f"hermes-rl:{run_id}"


@dataclass
class SlurmSettings:
    """The `slurm:` section of a run: what each worker's sbatch asks for."""

    partition: str | None = None
    time: str | None = None  # sbatch --time: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS
    cpus_per_worker: int = 1
    mem_per_worker: str | None = None  # sbatch --mem: 2G, 512M
    account: str | None = None  # sbatch --account
    qos: str | None = None  # sbatch --qos
    gres: str | None = None  # sbatch --gres: gpu:1, gpu:a100:2
    constraint: str | None = None  # sbatch --constraint: node features (a100&ib)
    # sbatch --signal: what the worker gets before its time limit, so it ends on its own terms
    # ([B:]SIG[@SECONDS]); with `time` set and no signal, B:TERM@60 (DEFAULT_GRACE_SIGNAL).
    signal: str | None = None
    # commands (command_field): from the user's own files only
    setup: list[str] = command_field(factory=list)  # shell lines run before the worker: module load, conda activate
    wrapper: str | None = command_field()  # a command the worker runs under: "apptainer exec --nv img.sif"
    python: str | None = command_field()  # the nodes' interpreter instead of this host's sys.executable: "python3"
    sbatch_args: list[str] = field(default_factory=list)  # more sbatch options, as given

    def to_json(self) -> dict:
        return {name: (list(value) if isinstance(value, list) else value) for name, value in vars(self).items()}

    def sbatch_options(self) -> list[str]:
        """The sbatch options these settings ask for (besides those every worker job gets)."""
        options = [f"--cpus-per-task={self.cpus_per_worker}"]
        named = {"partition": self.partition, "time": self.time, "mem": self.mem_per_worker}
        named.update(account=self.account, qos=self.qos, gres=self.gres, constraint=self.constraint)
        named["signal"] = self.signal or (DEFAULT_GRACE_SIGNAL if self.time else None)
        options += [f"--{name}={value}" for name, value in named.items() if value]
        return options + list(self.sbatch_args)

    def script(self, argv: list[str], interpreter: str) -> str:
        """The batch script: the setup lines, then the worker exec'd (the batch step's process, so
        scancel's and --signal's SIGTERM reach it), under the wrapper, with the nodes' python."""
        if self.python and argv and argv[0] == interpreter:
            argv = [self.python, *argv[1:]]
        wrapped = [*shlex.split(self.wrapper or ""), *argv]
        return SCRIPT_HEAD + "".join(line + "\n" for line in self.setup) + "exec " + shlex.join(wrapped) + "\n"


# Each launcher's settings class (None: it takes no settings); settings_over_site reads its command fields.
LAUNCHER_SETTINGS: dict[str, type | None] = {"local": None, "slurm": SlurmSettings}


def slurm_settings(data: dict | None) -> SlurmSettings:
    """A `slurm:` section checked: BadInput naming the field for anything sbatch would refuse."""
    data = dict(data or {})
    known = set(SlurmSettings.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadInput(f"unknown slurm setting(s): {', '.join(unknown)}", hint=f"known: {', '.join(sorted(known))}")
    settings = SlurmSettings(**data)
    if settings.partition is not None and not (
        isinstance(settings.partition, str) and re.fullmatch(r"[A-Za-z0-9_.,-]{1,64}", settings.partition)
    ):
        raise BadInput(f"slurm.partition must be a partition name, got {settings.partition!r}")
    if settings.time is not None and not is_name(_SLURM_TIME_RE, settings.time):
        raise BadInput(f"slurm.time must be a Slurm time limit (60, 1:00:00, 1-00:00:00), got {settings.time!r}")
    cpus = settings.cpus_per_worker
    if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= 4096:
        raise BadInput(f"slurm.cpus_per_worker must be an integer from 1, got {cpus!r}")
    mem = settings.mem_per_worker
    if mem is not None and not is_name(_SLURM_MEM_RE, mem):
        raise BadInput(f"slurm.mem_per_worker must be a size like 2G or 512M, got {mem!r}")
    _check_site_fields(settings)
    args = settings.sbatch_args
    if not isinstance(args, list) or not all(isinstance(a, str) and a.startswith("-") for a in args):
        raise BadInput(f"slurm.sbatch_args must be a list of sbatch options (each starting with -), got {args!r}")
    for arg in args:
        check_sbatch_option(arg)
    return settings


DEFAULT_GRACE_SIGNAL = "B:TERM@60"
_SLURM_FIELD_RES = {
    "account": re.compile(r"[A-Za-z0-9_.-]{1,64}"),
    "qos": re.compile(r"[A-Za-z0-9_.-]{1,64}"),
    "gres": re.compile(r"[A-Za-z0-9_.:,=-]{1,128}"),
    "constraint": re.compile(r"[A-Za-z0-9_.&|\[\]*:!()-]{1,256}"),
    "signal": re.compile(r"(R?B?:)?(SIG)?[A-Z0-9]{1,8}(@\d{1,6})?"),
}


def _check_site_fields(settings: SlurmSettings) -> None:
    """BadInput naming the field for a site setting sbatch would refuse or a shell could misread."""
    for name, pattern in _SLURM_FIELD_RES.items():
        value = getattr(settings, name)
        if value is not None and not (isinstance(value, str) and pattern.fullmatch(value)):
            raise BadInput(f"slurm.{name} must look like sbatch's --{name} value, got {str(value)[:60]!r}")
    setup = settings.setup
    if not isinstance(setup, list) or not all(isinstance(line, str) and "\n" not in line for line in setup):
        raise BadInput("slurm.setup must be a list of shell lines (module load …, conda activate …)")
    for name in ("wrapper", "python"):
        value = getattr(settings, name)
        if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
            raise BadInput(f"slurm.{name} must be one command line, got {str(value)[:60]!r}")


# The sbatch options a user may add, each spelled in full as sbatch spells it. An allowlist, not a list of
# what is ours: sbatch (getopt) takes any unique prefix (`--comm=` is --comment) and attached values
# (`-o/path`, `-Jname`), so a denylist compared by spelling let through the options hermes-rl relies on
# (job name, comment, output) and ones that change what a submission is (`--wait`, `--array`).
SBATCH_VALUE_OPTIONS = {
    "--account": "-A",
    "--qos": "-q",
    "--gres": None,
    "--gpus": "-G",
    "--gpus-per-node": None,
    "--gpus-per-task": None,
    "--cpus-per-gpu": None,
    "--mem-per-gpu": None,
    "--constraint": "-C",
    "--partition": "-p",
    "--time": "-t",
    "--time-min": None,
    "--mem": None,
    "--mem-per-cpu": None,
    "--cpus-per-task": "-c",
    "--reservation": None,
    "--nodelist": "-w",
    "--exclude": "-x",
    "--signal": None,
    "--licenses": "-L",
    "--tmp": None,
    "--hint": None,
    "--wckey": None,
    "--nice": None,
    "--mail-type": None,
    "--mail-user": None,
    "--begin": "-b",
    "--deadline": None,
    "--priority": None,
    "--gres-flags": None,
    "--mem-bind": None,
    "--cores-per-socket": None,
    "--sockets-per-node": None,
    "--threads-per-core": None,
    "--mincpus": None,
    "--cluster-constraint": None,
    "--network": None,
    "--exclusive": None,
}
SBATCH_FLAGS = {"--requeue", "--no-requeue", "--exclusive", "--oversubscribe", "-s", "--contiguous", "--spread-job"}
_SHORT_VALUE_OPTIONS = {short: long for long, short in SBATCH_VALUE_OPTIONS.items() if short}


def check_sbatch_option(arg: str) -> None:
    """BadInput unless `arg` is one allowed sbatch option with its value attached (`--account=x`, `-Ax`)
    or an allowed flag, parsed as sbatch parses it."""
    shown = arg[:60]
    if arg in SBATCH_FLAGS:
        return
    if arg.startswith("--"):
        name, equals, value = arg.partition("=")
        if name in SBATCH_VALUE_OPTIONS and equals and value:
            return
        if name in SBATCH_VALUE_OPTIONS:
            raise BadInput(f"slurm.sbatch_args: {shown} needs its value attached ({name}=VALUE)")
    elif len(arg) > 2 and arg[:2] in _SHORT_VALUE_OPTIONS:
        return
    elif arg[:2] in _SHORT_VALUE_OPTIONS:
        raise BadInput(f"slurm.sbatch_args: {shown} needs its value attached ({arg[:2]}VALUE)")
    raise BadInput(
        f"slurm.sbatch_args may not hold {shown!r}: hermes-rl sets how a worker is submitted, named and logged",
        hint="options allowed, spelled in full with the value attached: " + ", ".join(sorted(SBATCH_VALUE_OPTIONS)),
    )


class LauncherError(Exception):
    """A process could not be started; the message says why in words. `retry` is False where trying the
    same start again cannot help or could run the worker twice (a refusal sbatch gives every time, a
    submission whose outcome is unknown)."""

    def __init__(self, message: str, *, retry: bool = True):
        super().__init__(message)
        self.retry = retry


# ---------------------------------------------------------------- local process groups


class LocalProcess:
    """A child of the supervisor, leader of its own process group (tied to us by PDEATHSIG)."""

    launcher = "local"

    def __init__(self, popen: subprocess.Popen, why_cold: str | None = None):
        self.popen = popen
        self.why_cold = why_cold  # why it is not a fork of the run's warm server, when it was meant to be
        self.pid = self.pgid = popen.pid
        self.create_time = procscan.process_create_time(popen.pid)
        self.start_ticks = procscan.process_start_ticks(popen.pid)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def leftovers(self) -> bool:
        """Whether anything of its process group is still there (a leader's exit leaves workers behind)."""
        return procscan.group_alive(self.pgid)

    def what(self) -> str:
        return f"process group {self.pgid}"

    def terminate(self) -> None:
        procscan.signal_group(self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        procscan.signal_group(self.pgid, signal.SIGKILL)

    def watchdog_line(self) -> str:
        return f"pgid {self.pgid}"

    def record(self) -> dict:
        if self.why_cold:
            return {"launcher": "local", "warm": False, "why_cold": self.why_cold}
        return {"launcher": "local"}


class WarmProcess(LocalProcess):
    """A fork of the run's warm server (warm.client.WarmStarts): a session and process group of its own,
    tied to the server, which is tied to us; its exit code comes from the server."""

    def __init__(self, starts: WarmStarts, pid: int):
        self.starts = starts
        self.pid = self.pgid = pid
        self.create_time = procscan.process_create_time(pid)
        self.start_ticks = procscan.process_start_ticks(pid)
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self._code

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self.starts.exit_code(self.pid)
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        """As Popen.wait: its exit code (reaped and reported by the server); TimeoutExpired after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.poll() or 0

    def record(self) -> dict:
        return {"launcher": "local", "warm": True}


def start_local(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    log_fd: int,
    log: Path,
    warm: WarmStarts | None = None,
    session: bool = False,
) -> LocalProcess:
    """A fork of `warm` where it can be one (see WarmStarts.start), else a fresh process (leading a session
    of its own with `session`: a fork always does), both streams to `log_fd` (a fork appends to `log`)."""
    why_cold = None
    if warm is not None:
        try:
            return WarmProcess(warm, warm.start(argv, cwd=cwd, env=env, log=str(log), folders=_path_folders(env)))
        except ColdStartNeeded as exc:
            why_cold = str(exc)
    popen = spawn_group(
        argv, session=session, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT
    )
    return LocalProcess(popen, why_cold)


# sbatch's refusals that a later try can get past (the controller busy or restarting); any other
# refusal (an unknown partition or account, a limit the job exceeds) comes back the same every time.
_TRANSIENT_REFUSALS = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Resource temporarily unavailable",
    "try again",
    "Slurm temporarily unable",
)


def _transient(detail: str) -> bool:
    return any(marker.lower() in detail.lower() for marker in _TRANSIENT_REFUSALS)


def _path_folders(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


# ---------------------------------------------------------------- Slurm jobs


def _slurm_env(env: dict[str, str]) -> dict[str, str]:
    """The environment sbatch passes on: the process's own, without the SLURM_* of an allocation the
    supervisor itself may run in (sbatch would read them as options for the new job)."""
    return {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SBATCH_"))}


def slurm_call(argv: list[str], timeout: float = SLURM_CALL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """One Slurm command; LauncherError when it is missing or does not answer in time."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise LauncherError(f"{argv[0]} not found: Slurm's client commands must be on PATH") from None
    except subprocess.TimeoutExpired:
        raise LauncherError(f"{argv[0]} did not answer within {timeout:g}s (is slurmctld up?)") from None


def _exit_code(state: str, raw: str) -> int:
    """squeue's exit_code is a wait status: a signal as -N, a code as N; a cancelled job without a
    status was ended by scancel's SIGTERM, a failure of the node counts as a failure."""
    try:
        status = int(raw)
    except ValueError:
        status = 0
    if status & 0x7F:
        return -(status & 0x7F)
    code = status >> 8
    if code:
        return code
    if state in ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE"):
        return -signal.SIGTERM
    if state == "COMPLETED":
        return 0
    return 1  # NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY, FAILED without a status


class SlurmJob:
    """A process running as a Slurm batch job. Its state comes from squeue, asked for all jobs at once."""

    launcher = "slurm"

    def __init__(self, tracker: SlurmTracker, job_id: str):
        self.tracker = tracker
        self.job_id = job_id
        self.pid = self.pgid = self.create_time = self.start_ticks = None
        self.state = "PENDING"
        self.node: str | None = None
        self.reason: str | None = None
        self.returncode: int | None = None
        self.cancelled = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self.tracker.refresh()
        return self.returncode

    def leftovers(self) -> bool:
        """Whether squeue still lists the job (COMPLETING included: its processes are being ended)."""
        self.tracker.refresh()
        return self.state in SLURM_LIVE_STATES

    def what(self) -> str:
        return f"Slurm job {self.job_id}" + (f" on {self.node}" if self.node else "")

    def terminate(self) -> None:
        if self.state not in SLURM_LIVE_STATES:
            return
        self.cancelled = True
        # A stop is a cancellation, so Slurm records the job CANCELLED (not FAILED or COMPLETED by how the
        # worker took its signal): slurmctld sends SIGTERM to the batch step (the exec'd worker) and any
        # steps, and SIGKILL after the cluster's KillWait; kill() ends it sooner at the stop timeout.
        with contextlib.suppress(LauncherError):
            slurm_call(["scancel", self.job_id])

    def kill(self) -> None:
        if self.state in SLURM_LIVE_STATES:
            self.cancelled = True
            with contextlib.suppress(LauncherError):
                slurm_call(["scancel", self.job_id])  # cancelled: Slurm kills what is left after KillWait
                slurm_call(["scancel", "--full", "--signal=KILL", self.job_id])

    def watchdog_line(self) -> str:
        return f"slurm_job {self.job_id}"

    def stop_words(self, code: int) -> str:
        """How a stopped job ended, for the run's events: "Slurm job 16 cancelled" when scancel ended it."""
        if self.state == "CANCELLED":
            return f"Slurm job {self.job_id} cancelled"
        return f"Slurm job {self.job_id} {self.state}, {describe_exit(code)}"

    def record(self) -> dict:
        return {"launcher": "slurm", "job_id": self.job_id, "node": self.node, "slurm_state": self.state}

    def update(self, state: str, node: str, reason: str, raw_exit: str) -> None:
        self.state = state
        self.node = node or self.node
        self.reason = None if reason in ("", "None") else reason
        if state not in SLURM_LIVE_STATES and self.returncode is None:
            self.returncode = _exit_code(state, raw_exit)


class SlurmTracker:
    """The run's Slurm jobs: submits them and keeps their squeue state fresh (one call per SLURM_POLL_S)."""

    def __init__(self, run_id: str, run_dir: Path):
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.jobs: dict[str, SlurmJob] = {}
        self.last_refresh = 0.0
        self.on_change: Callable[[SlurmJob], None] | None = None  # called with a job whose state or node changed

    def submit(
        self, name: str, argv: list[str], *, cwd: str, env: dict[str, str], log: Path, settings: SlurmSettings
    ) -> SlurmJob:
        script = self.run_dir / "slurm" / f"{name}.sbatch"
        script.parent.mkdir(mode=0o700, exist_ok=True)
        # exec: the worker itself is the batch step's process, so scancel's SIGTERM reaches it.
        write_regular_text(script, settings.script(argv, sys.executable))
        os.chmod(script, 0o700)
        command = [
            "sbatch",
            "--parsable",
            f"--job-name={job_name(self.run_id, name)}",
            f"--comment={job_comment(self.run_id)}",
            f"--output={log}",
            "--open-mode=append",
            f"--chdir={cwd}",
            "--export=ALL",
            "--nodes=1",
            "--ntasks=1",
            *settings.sbatch_options(),
            str(script),
        ]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=SLURM_CALL_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env=_slurm_env(env),
            )
        except FileNotFoundError:
            raise LauncherError("sbatch not found: Slurm's client commands must be on PATH") from None
        except subprocess.TimeoutExpired:
            # The controller may have queued the job before the answer was lost: find it, never submit again.
            job_id = self.find_submitted(name, env)
        else:
            job_id = done.stdout.strip().split(";")[0]
            if done.returncode != 0 or not is_ascii_digits(job_id):
                detail = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()
                raise LauncherError(f"sbatch refused the job: {detail[-1]}", retry=_transient(detail[-1]))
        job = SlurmJob(self, job_id)
        self.jobs[job_id] = job
        self.last_refresh = 0.0  # the next poll asks at once (its node)
        return job

    def find_submitted(self, name: str, env: dict[str, str]) -> str:
        """The job id of this run's worker `name` when sbatch timed out: squeue asked by the job's name and
        comment. A job found is adopted; none found means it was not queued (retry); squeue failing too
        leaves the outcome unknown, which is not retried (it could run the worker twice)."""
        wanted = job_name(self.run_id, name)
        try:
            done = subprocess.run(
                ["squeue", "--noheader", f"--name={wanted}", "--format=%i|%k"],
                capture_output=True,
                text=True,
                timeout=SLURM_CALL_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env=_slurm_env(env),
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is None or done.returncode != 0:
            raise LauncherError(
                f"sbatch did not answer within {SLURM_CALL_TIMEOUT_S:g}s and squeue cannot say whether {wanted} "
                "was queued (is slurmctld up?); not submitted again",
                retry=False,
            )
        found = [
            line.split("|", 1)[0]
            for line in done.stdout.splitlines()
            if line.partition("|")[2].strip() == job_comment(self.run_id) and is_ascii_digits(line.split("|", 1)[0])
        ]
        if not found:
            raise LauncherError(f"sbatch did not answer within {SLURM_CALL_TIMEOUT_S:g}s and {wanted} was not queued")
        return found[-1]

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        watched = [j for j in self.jobs.values() if j.state in SLURM_LIVE_STATES]
        steady = all(j.state == "RUNNING" and not j.cancelled for j in watched)
        interval = SLURM_STEADY_POLL_S if steady else SLURM_POLL_S
        if not watched or (not force and now - self.last_refresh < interval):
            return
        self.last_refresh = now
        ids = ",".join(j.job_id for j in watched)
        try:
            done = slurm_call(["squeue", "-h", "-t", "all", "-j", ids, "-O", SQUEUE_FIELDS])
        except LauncherError:
            return  # the controller is busy or restarting: the jobs keep their last known state
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            return
        seen = set()
        for line in done.stdout.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 5 or parts[0] not in self.jobs:
                continue
            job = self.jobs[parts[0]]
            seen.add(job.job_id)
            before = (job.state, job.node)
            job.update(parts[1], parts[2], parts[3], parts[4])
            if (job.state, job.node) != before and self.on_change:
                self.on_change(job)
        for job in watched:
            if job.job_id not in seen:  # purged from the controller's memory: it ended a while ago
                job.update("GONE", "", "", "0")
                if self.on_change:
                    self.on_change(job)


def start_process(
    launcher: str,
    name: str,
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    log_fd: int,
    log: Path,
    slurm: SlurmTracker | None = None,
    settings: dict | None = None,
    warm: WarmStarts | None = None,
):
    """Start one process with its launcher; OSError (local) or LauncherError (Slurm) when it cannot.
    `warm`: the run's warm server, for a local process that may start as a fork of it."""
    if launcher == "slurm":
        assert slurm is not None
        if not os.path.isdir(cwd):
            raise FileNotFoundError(2, "No such file or directory", cwd)
        return slurm.submit(name, argv, cwd=cwd, env=env, log=log, settings=slurm_settings(settings))
    return start_local(argv, cwd=cwd, env=env, log_fd=log_fd, log=log, warm=warm)


def cancel_jobs(job_ids: list[str], wait: float = 30.0) -> list[str]:
    """scancel each job (the latest first), then wait until squeue no longer lists them; returns the
    ids still listed after `wait` seconds. Used by the watchdog and by clients cleaning a lost run."""
    ids = [j for j in dict.fromkeys(job_ids) if j]
    if not ids:
        return []
    for job_id in reversed(ids):
        with contextlib.suppress(LauncherError):
            slurm_call(["scancel", job_id])
    deadline = time.monotonic() + wait
    listed = ids
    while True:
        try:
            done = slurm_call(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"])
            listed = [line.strip() for line in done.stdout.splitlines() if line.strip() in ids]
        except LauncherError:
            pass
        if not listed or time.monotonic() >= deadline:
            return listed
        time.sleep(0.2)


def run_job_ids(run_id: str) -> list[str]:
    """The ids of every job squeue lists with the run's comment ([] when Slurm does not answer)."""
    try:
        done = slurm_call(["squeue", "-h", "-o", "%i|%k"])
    except LauncherError:
        return []
    comment = job_comment(run_id)
    return [line.split("|", 1)[0] for line in done.stdout.splitlines() if line.split("|", 1)[-1].strip() == comment]
