"""The Slurm launcher: a run's process as a Slurm batch job — its settings, the site's file
($HERMES_HOME/rl/slurm.yaml), the preflight, submission, squeue tracking and the watchdog's cleanup.

One batch job per process (`sbatch`), not steps of one allocation: each worker is scheduled,
restarted and cancelled on its own, a restart never waits for (or holds) a whole allocation, and the
cluster may place replicas on whichever nodes are free. Jobs are named `hermes-<run>-<process>` and
carry `hermes-rl:<run>` as their comment, so the run's jobs can be found by name. Their output is
appended to the process log in the run folder by slurmd on the node that runs them: the run folder
must be on a filesystem every node mounts at the same path ($HERMES_HOME on a shared filesystem).

The site's file holds what every Slurm run on this site needs (account, QoS, GPUs, node features, time
limit and grace signal, the setup lines a worker runs before it starts), in the keys of a run's `slurm:`
section (SlurmSettings); what a start gives wins over it, except the commands (setup, wrapper, python),
which come from this file only. `preflight` asks the cluster, before the run's first process starts,
whether the partition exists (sinfo) and a worker job with these settings would be accepted
(`sbatch --test-only`), so a site problem is one clear error at start, not a worker job refused after
run-api and the trainer are up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.errors import BadInput
from ...base.fsutil import write_regular_text
from ...base.names import is_ascii_digits, is_name
from ...base.paths import rl_dir
from ..spawn import describe_exit
from .base import LauncherError, TrackedJob, command_field, job_record, read_site_file, settings_over_site

SLURM_KILL_GRACE_S = 30.0  # how long a cancelled job gets to leave squeue (slurmd ends it, then reports)
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


def slurm_settings(data: Mapping | None) -> SlurmSettings:
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


class SlurmJob(TrackedJob):
    """A process running as a Slurm batch job. Its state comes from squeue, asked for all jobs at once (COMPLETING
    is live: its processes are being ended)."""

    LABEL, LIVE_STATES = "Slurm", SLURM_LIVE_STATES

    launcher = "slurm"
    kill_grace_s = SLURM_KILL_GRACE_S

    def __init__(self, tracker: SlurmTracker, job_id: str):
        self.tracker = tracker
        self.job_id = job_id
        self.pid = self.pgid = self.create_time = self.start_ticks = None
        self.state = "PENDING"
        self.node: str | None = None
        self.reason: str | None = None
        self.returncode: int | None = None
        self.cancelled = False

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
        return f"job slurm {self.job_id}"

    def change_words(self) -> str:
        """Its new state in words for the run's events: "Slurm job 16 PENDING (Resources)"."""
        where = f" on {self.node}" if self.node else ""
        why = f" ({self.reason})" if self.reason and self.state == "PENDING" else ""
        return f"Slurm job {self.job_id} {self.state}{where}{why}"

    def stop_words(self, code: int) -> str:
        """How a stopped job ended, for the run's events: "Slurm job 16 cancelled" when scancel ended it."""
        if self.state == "CANCELLED":
            return f"Slurm job {self.job_id} cancelled"
        return f"Slurm job {self.job_id} {self.state}, {describe_exit(code)}"

    def record(self) -> dict:
        return {"launcher": "slurm", "job": job_record("slurm", self.job_id, self.node, self.state)}

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


# ---------------------------------------------------------------- the site's settings and preflight


SITE_FILE = "slurm.yaml"


def site_file() -> Path:
    return rl_dir() / SITE_FILE


def site_settings() -> dict:
    """The site's `slurm:` defaults ({} without the file); BadInput naming the file when it is wrong."""
    return read_site_file(site_file(), "Slurm", "account: …, qos: …", slurm_settings)


def with_site_settings(given: Mapping | None) -> dict:
    """A start's `slurm:` settings over the site's; BadInput for a command (setup, wrapper, python) the
    start gives that the site's file does not say (base.settings_over_site)."""
    return settings_over_site("slurm", site_settings(), given, site_file=str(site_file()), settings_class=SlurmSettings)


def preflight(data: Mapping | None) -> None:
    """BadInput, in Slurm's words, when the cluster would refuse a worker job with these settings: no
    Slurm commands, an unknown partition, or a job `sbatch --test-only` refuses (account, QoS, GRES,
    constraint, time limit)."""
    settings = slurm_settings(dict(data or {}))
    if settings.partition:
        _check_partition(settings.partition)
    with tempfile.TemporaryDirectory(prefix="hermes-slurm-") as folder:
        script = Path(folder) / "preflight.sbatch"
        write_regular_text(script, settings.script(["true"], ""))
        argv = ["sbatch", "--test-only", "--nodes=1", "--ntasks=1", *settings.sbatch_options(), str(script)]
        done = _call(argv)
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise BadInput(
            f"Slurm would not accept a worker job with these settings: {detail}",
            hint=f"fix the run's slurm settings or {site_file()}; `sbatch --test-only` says the same",
        )


def _check_partition(partition: str) -> None:
    done = _call(["sinfo", "--noheader", f"--partition={partition}", "--format=%P"])
    listed = {line.strip().rstrip("*") for line in done.stdout.splitlines() if line.strip()}
    if done.returncode != 0 or partition not in listed:
        known = _call(["sinfo", "--noheader", "--format=%P"]).stdout.split()
        raise BadInput(
            f"Slurm partition {partition!r} does not exist on this cluster",
            hint="partitions: " + (", ".join(p.rstrip("*") for p in known) or "none listed"),
        )


def _call(argv: list[str]):
    try:
        return slurm_call(argv)
    except LauncherError as exc:
        raise BadInput(f"cannot check the Slurm settings: {exc}") from None


# ---------------------------------------------------------------- the launcher


class SlurmLauncher:
    """Batch jobs on a Slurm cluster (`env_launcher: slurm`)."""

    name = "slurm"
    settings_class = SlurmSettings
    site_file = SITE_FILE
    remote = True
    cancelled_state = "CANCELLED"

    def settings(self, data: Mapping | None) -> SlurmSettings:
        return slurm_settings(data)

    def site_settings(self) -> dict:
        return site_settings()

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        preflight(settings)  # each worker is a job of its own: sbatch --test-only answers for one

    def tracker(self, run_id: str, run_dir: Path) -> SlurmTracker:
        return SlurmTracker(run_id, run_dir)

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
        tracker: Any,
        warm: Any = None,
    ) -> SlurmJob:
        assert isinstance(tracker, SlurmTracker)
        if not os.path.isdir(cwd):
            raise FileNotFoundError(2, "No such file or directory", cwd)
        return tracker.submit(name, argv, cwd=cwd, env=env, log=log, settings=slurm_settings(settings))

    def cleanup(self, run_id: str, job_ids: list[str]) -> tuple[list[str], list[str]]:
        every = list(dict.fromkeys([*job_ids, *run_job_ids(run_id)]))
        left = cancel_jobs(every)
        return [j for j in every if j not in left], left

    def where(self, job: Mapping) -> str:
        parts = [str(p) for p in (job.get("node"), job.get("state")) if p]
        return " ".join(parts)

    def job_running(self, job: Mapping) -> bool:
        return bool(job.get("id")) and job.get("state") in SLURM_LIVE_STATES

    def view_fields(self, job: Mapping) -> dict:
        return {"slurm_state": job.get("state")}  # what run.json called it before `job`


LAUNCHER = SlurmLauncher()
