"""Shared pieces of the reliability suite: the stand-in pipeline, an independent orphan scan,
a figures recorder for docs/benchmarks.md, and a secrets scanner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
from hermes_rl.core.daemons.procscan import MARKER
from tests.fixtures_core import PY, proc_path

HERE = Path(__file__).resolve().parent
RPROCS = HERE / "procs"
CORPUS = HERE / "corpus"
FINAL = ("completed", "failed", "stopped")
FIGURES_ENV = "HERMES_RL_RELIABILITY_FIGURES"  # set it to a file path to collect figures for the docs


def record(kind: str, **fields) -> None:
    """Append one figure (e.g. time to final state per fault) to $HERMES_RL_RELIABILITY_FIGURES."""
    target = os.environ.get(FIGURES_ENV)
    line = json.dumps({"kind": kind, **fields})
    print("FIGURE", line)
    if target:
        with open(target, "a") as handle:
            handle.write(line + "\n")


def freeze_until_stalled(run_id: str, pid: int, threshold: float, kind: str, deadline: float = 2.0) -> dict:
    """SIGSTOP `pid` (the trainer) and wait for rl_check_status to report the run stalled; checks the
    report, records the detection time and returns the report. The caller sends SIGCONT (in a finally)."""
    from hermes_rl.core.clients import toolset

    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    report = wait_for(
        lambda: (s := toolset.rl_check_status(run_id, min_interval_s=0)).get("stalled") and s,
        threshold + 10,
        max_interval=0.02,  # the detection time is recorded
    )
    detect = time.monotonic() - stopped_at
    assert report, toolset.rl_check_status(run_id, min_interval_s=0)
    assert report["status"] == "running" and report["stalled_for_s"] >= threshold
    assert any("no training step" in tip for tip in report["tips"]), report["tips"]
    record(
        kind,
        fault="SIGSTOP trainer (stall detected)",
        status="running+stalled",
        reason=report["tips"][0],
        seconds=round(detect, 3),
        threshold_s=threshold,
    )
    assert detect < threshold + deadline, f"stall reported {detect:.2f}s after SIGSTOP (threshold {threshold}s)"
    return report


def standin_pipeline(
    step_s: float = 0.1, env_restarts: int = 1, trainer_stop_timeout: float = 10.0
) -> list[ProcessSpec]:
    """api (HTTP, port api) -> trainer (metrics + log lines naming run/port) and env (restarted on failure),
    the shape of the real pipeline (core/training.py) with small programs."""
    api = ProcessSpec(
        name="api",
        argv=[PY, proc_path("http_server.py"), "--port", "{port:api}"],
        readiness=Readiness("http", "http://127.0.0.1:{port:api}/health", timeout_s=30),
        port="api",
    )
    trainer = ProcessSpec(
        name="trainer",
        argv=[
            PY,
            str(RPROCS / "trainer.py"),
            "--run-dir",
            "{run_dir}",
            "--run-id",
            "{run_id}",
            "--port",
            "{port:api}",
            "--step-s",
            str(step_s),
        ],
        depends_on=[("api", "ready")],
        readiness=Readiness("log", pattern=r"^ready", timeout_s=30),
        stop_timeout=trainer_stop_timeout,
    )
    env = ProcessSpec(
        name="env",
        argv=[PY, "-c", "import sys, time; print('env up', sys.argv[1], flush=True); time.sleep(3600)", "{run_id}"],
        depends_on=[("api", "ready")],
        restart=RestartPolicy("on_failure", max_restarts=env_restarts, backoff_s=0.1),
    )
    return [api, trainer, env]


def launch_standin(**kw) -> dict:
    from hermes_rl.core import runs

    return runs.launch(standin_pipeline(**kw), environment="standin", profile="local", total_steps=100)


def wait_for(predicate, timeout: float, interval: float = 0.02, max_interval: float = 0.2):
    """predicate's first truthy value, or its last value after `timeout` s. Polls every `interval` s at
    first, then less often (x1.5 up to `max_interval`): a long wait does not poll run state at 50 Hz.
    A caller timing how soon something happens passes max_interval=interval."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
        interval = min(max(interval, interval * 1.5), max(interval, max_interval))


def wait_running(run_id: str, timeout: float = 30.0) -> dict:
    from hermes_rl.core import runs

    run = wait_for(
        lambda: (r := runs.get_run(run_id, sample=False))["status"] in ("running", *FINAL, "lost") and r, timeout
    )
    assert run and run["status"] == "running", (
        f"run {run_id} did not reach running: {runs.get_run(run_id, sample=False)}"
    )
    return run


def proc_record(run: dict, name: str) -> dict:
    return next(p for p in run["processes"] if p["name"] == name)


def orphans(run: dict) -> list[str]:
    """Live processes of a run found independently of core.procscan: its supervisor's session, its
    recorded process groups, or the HERMES_RL_RUN_DIR marker. Zombies do not count."""
    from hermes_rl.core.base.paths import run_dir

    folder = str(run_dir(run["run_id"]))
    sid = (run.get("supervisor") or {}).get("pid")
    pgids = {p.get("pgid") for p in run.get("processes") or [] if p.get("pgid")}
    found = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            why = []
            if sid and os.getsid(proc.pid) == sid:
                why.append("session")
            if os.getpgid(proc.pid) in pgids:
                why.append("group")
            if proc.environ().get(MARKER) == folder:
                why.append("marker")
        except (psutil.Error, OSError):
            continue
        if why:
            found.append(f"{proc.pid} ({'+'.join(why)}): {' '.join(proc.info['cmdline'] or [])[:120]}")
    return found


def assert_no_orphans(run: dict, timeout: float = 3.0) -> None:
    left = wait_for(lambda: not orphans(run), timeout)
    assert left, f"orphans of run {run['run_id']}: {orphans(run)}"


def all_files(root: Path):
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            yield Path(dirpath) / name


def assert_state_parses(home: Path) -> int:
    """Every JSON / JSONL / YAML file under home parses (JSONL: every complete line). Returns files checked."""
    import yaml

    checked = 0
    for path in all_files(home):
        if path.name.endswith(".lock") or path.name.startswith("."):
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            json.loads(text)
        elif path.suffix == ".jsonl":
            for line in text.splitlines(keepends=True):
                if line.endswith("\n"):
                    json.loads(line)
        elif path.suffix == ".yaml":
            yaml.safe_load(text)
        else:
            continue
        checked += 1
    return checked


def kill_tree(popen: subprocess.Popen) -> None:
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except OSError:
        pass
    popen.wait(timeout=5)


def client_env(home: Path) -> dict:
    from hermes_rl.core.base.paths import PROJECT_ROOT

    env = dict(os.environ, HERMES_HOME=str(home), PYTHONPATH=str(PROJECT_ROOT))
    return env


def start_watcher(home: Path, run_id: str, log: Path) -> subprocess.Popen:
    from hermes_rl.core.base.paths import PROJECT_ROOT

    return subprocess.Popen(
        [sys.executable, str(RPROCS / "watcher.py"), run_id],
        cwd=str(PROJECT_ROOT),
        env=client_env(home),
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_local_run(model_dir: Path, total_steps: int = 100000) -> dict:
    """The real local pipeline (core/training.py: model, api, tinker, trainer, env) on the tiny toy task,
    with the session's built model linked in and a step budget large enough that it never ends by itself."""
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import models_dir, profiles_dir

    link = models_dir() / "tiny-toy"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(Path(model_dir).resolve())
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "local.yaml").write_text(f"total_steps: {int(total_steps)}\n")
    return runs.start_run("toy_addition", "local", {})


def run_processes(run: dict, process: str | None = None) -> list[psutil.Process]:
    """Live processes carrying the run's environment marker (children and every grandchild: W&B's
    service processes live in sessions of their own), optionally only those started for `process`."""
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.daemons.procscan import PROCESS_MARKER

    folder = str(run_dir(run["run_id"]))
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get(MARKER) == folder and (process is None or env.get(PROCESS_MARKER) == process):
            found.append(proc)
    return found
