"""Fixtures for the supervisor and run API tests: spec builders over the small real programs in
tests/procs/, waiting helpers, and a cleanup that kills every process a test's runs left behind
(supervisors, watchdogs, children, grandchildren) even when the test failed."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy

PROCS = Path(__file__).resolve().parent / "procs"
PY = sys.executable


def proc_path(name: str) -> str:
    return str(PROCS / name)


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.02, what: str = "condition"):
    """Poll predicate until it returns something truthy; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.2)


def wait_status(run_id: str, statuses, timeout: float = 20.0) -> dict:
    from hermes_rl.core import runs

    statuses = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    last = {}

    def check():
        nonlocal last
        last = runs.get_run(run_id, sample=False)
        return last if last["status"] in statuses else None

    try:
        return wait_until(check, timeout, what=f"run {run_id} to be {'/'.join(statuses)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it is {last.get('status')} ({last.get('reason')})") from None


def wait_trained_steps(run_id: str, steps: int = 2, timeout: float = 300.0) -> dict:
    """The run once its trainer has written `steps` metric rows, or once it stopped starting or running."""
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import run_dir

    metrics = run_dir(run_id) / "metrics.jsonl"
    wait_until(
        lambda: (
            metrics.exists()
            and len(metrics.read_text().splitlines()) >= steps
            or runs.get_run(run_id, sample=False)["status"] not in ("starting", "running")
        ),
        timeout,
        what=f"{steps} trained steps",
    )
    return runs.get_run(run_id, sample=False)


def lose_run(run: dict) -> None:
    """Kill a live run's supervisor and its watchdog outright, leaving nothing to record the run's end,
    as after a machine-wide kill. The supervisor is frozen first so it cannot start a new watchdog
    between the two kills (that one would record the end, and the run would never be lost)."""
    supervisor = run["supervisor"]["pid"]
    watchdog = (run.get("watchdog") or {}).get("pid")
    os.kill(supervisor, signal.SIGSTOP)
    if watchdog:
        os.kill(watchdog, signal.SIGKILL)
        wait_until(lambda: not pid_alive(watchdog), what="watchdog gone")
    os.kill(supervisor, signal.SIGKILL)
    wait_until(lambda: not pid_alive(supervisor), what="supervisor gone")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")
    except OSError:
        return False


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids (not ours) whose environment has name=value: everything a test's runs started."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                env = handle.read().split(b"\0\0", 1)[0].split(b"\0")  # a warm fork's ends at its padding
        except OSError:
            continue
        if needle in env and pid_alive(int(entry)):
            found.append(int(entry))
    return found


@pytest.fixture
def run_processes_cleanup(hermes_home):
    """After the test: SIGKILL every process carrying this test's HERMES_HOME."""
    yield hermes_home
    for _ in range(3):
        pids = processes_with_env("HERMES_HOME", str(hermes_home))
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


@pytest.fixture
def specs():
    """Builders of ProcessSpecs over tests/procs/."""

    class Builders:
        @staticmethod
        def http(name: str, delay: float = 0.0, timeout: float = 20.0, **kw) -> ProcessSpec:
            return ProcessSpec(
                name=name,
                argv=[PY, proc_path("http_server.py"), "--port", f"{{port:{name}}}", "--delay", str(delay)],
                readiness=Readiness("http", f"http://127.0.0.1:{{port:{name}}}/health", timeout_s=timeout),
                port=name,
                **kw,
            )

        @staticmethod
        def log_ready(name: str, script: str = "ready.py", args=(), pattern: str = r"^ready", **kw) -> ProcessSpec:
            return ProcessSpec(
                name=name,
                argv=[PY, proc_path(script), *args],
                readiness=Readiness("log", pattern=pattern, timeout_s=kw.pop("timeout", 20.0)),
                **kw,
            )

        @staticmethod
        def crash(name: str, after: float = 0.0, code: int = 1, record: str | None = None, **kw) -> ProcessSpec:
            argv = [PY, proc_path("crash.py"), "--after", str(after), "--code", str(code)]
            if record:
                argv += ["--record", record]
            return ProcessSpec(name=name, argv=argv, **kw)

        @staticmethod
        def sleeper(name: str, **kw) -> ProcessSpec:
            return ProcessSpec(
                name=name, argv=[PY, "-c", "import time; print('up', flush=True); time.sleep(3600)"], **kw
            )

        @staticmethod
        def complete(name: str = "trainer", steps: int = 3, finish_reason: str | None = None, **kw) -> ProcessSpec:
            said = ["--finish-reason", finish_reason] if finish_reason else []
            return ProcessSpec(
                name=name,
                argv=[
                    PY,
                    proc_path("complete.py"),
                    "--run-dir",
                    "{run_dir}",
                    "--steps",
                    str(steps),
                    "--completion-file",
                    "{run_dir}/done",
                    *said,
                ],
                completes_run=True,
                completion_file="{run_dir}/done",
                **kw,
            )

    Builders.Readiness = Readiness
    Builders.RestartPolicy = RestartPolicy
    Builders.ProcessSpec = ProcessSpec

    return Builders
