"""Ctrl-C during `hermes-rl start`, at several moments: the run is stopped and removed (nothing keeps
training unseen), or the answer names the run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hermes_rl.core.base.paths import runs_dir
from hermes_rl.core.envs import drafts
from tests.reliability.helpers import launch_standin, wait_running

# serial: a signal lands at a moment of a start-up, which saturated cores stretch past the tests' waits.
pytestmark = [pytest.mark.reliability, pytest.mark.serial, pytest.mark.usefixtures("run_processes_cleanup")]


def _run_folders() -> list:
    return [p for p in runs_dir().iterdir() if p.is_dir()] if runs_dir().is_dir() else []


def _supervisor_registered() -> bool:
    for folder in _run_folders():
        try:
            if '"pid": ' in (folder / "run.json").read_text().split('"supervisor"', 1)[1][:80]:
                return True
        except (OSError, IndexError):
            pass
    return False


MOMENTS = {
    "run folder created": lambda: bool(_run_folders()),
    "supervisor starting": lambda: any((f / "supervisor.log").exists() for f in _run_folders()),
    "supervisor registered": _supervisor_registered,
}


def _ours(home) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        marks = env.get("HERMES_RL_RUN_DIR", "") + env.get("HERMES_RL_SUPERVISOR_OF", "")
        if str(home) in marks:
            found.append(proc)
    return found


@pytest.mark.timeout(240)
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_ctrl_c_during_start_leaves_no_hidden_run(arith_env, hermes_home, moment):
    drafts.get_config(None)  # the config probe is cached: start gets to its later moments quickly
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "start"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    reached = MOMENTS[moment]
    try:
        deadline = time.monotonic() + 60
        while not reached() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, f"start finished before {moment}: {proc.communicate()}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        left = _run_folders()
        if left:  # allowed only when the answer names the run
            assert all(folder.name in out + err for folder in left), (moment, out, err)
        else:
            deadline = time.monotonic() + 10
            while _ours(hermes_home) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not _ours(hermes_home), f"processes of an interrupted start kept running ({moment})"
    finally:
        if proc.poll() is None:
            proc.kill()
        for leftover in _ours(hermes_home):
            leftover.kill()


@pytest.mark.timeout(120)
def test_a_start_past_the_local_run_limit_is_refused_clearly(arith_env, hermes_home, monkeypatch):
    import json

    from hermes_rl.core import runs
    from hermes_rl.core.base.errors import Conflict
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.daemons import procscan
    from hermes_rl.core.runs import start

    drafts.get_config(None)
    run_id = "1a2b3c4d"
    # An active local run: a live process proven to be its supervisor (start time and marker).
    sup = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, procscan.SUPERVISOR_MARKER: str(run_dir(run_id))},
    )
    try:
        # until it has exec'd, the child's /proc environ is still ours (no marker)
        marker = str(run_dir(run_id))
        deadline = time.monotonic() + 10
        while not procscan.carries_marker(sup.pid, procscan.SUPERVISOR_MARKER, marker):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ids = {
            "pid": sup.pid,
            "start_ticks": procscan.process_start_ticks(sup.pid),
            "create_time": procscan.process_create_time(sup.pid),
        }
        run_dir(run_id).mkdir(parents=True)
        record = {"run_id": run_id, "status": "running", "created_at": time.time(), "backend": "local"}
        (run_dir(run_id) / "run.json").write_text(json.dumps({**record, "supervisor": ids, "processes": []}))
        assert runs.get_run(run_id, sample=False)["status"] == "running"

        monkeypatch.setenv(start.MAX_LOCAL_RUNS_ENV, "1")
        with pytest.raises(Conflict, match="limit is 1"):
            runs.start_run()
        assert [p.name for p in _run_folders()] == [run_id]  # nothing created
        argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "start"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert out.returncode == 1 and "limit is 1" in out.stderr and start.MAX_LOCAL_RUNS_ENV in out.stderr
        with pytest.raises(Conflict, match=f"{run_id}.*limit is 1"):  # a custom pipeline counts it too
            launch_standin()
        assert [p.name for p in _run_folders()] == [run_id]
        monkeypatch.setenv(start.MAX_LOCAL_RUNS_ENV, "2")
        start.check_local_capacity()  # one active run is within a limit of two
    finally:
        sup.kill()
        sup.wait()


@pytest.mark.timeout(120)
def test_the_local_run_limit_counts_a_custom_pipeline_run(arith_env, monkeypatch):
    """A run launched with a custom pipeline (runs.launch) takes a local place like any other: with a
    limit of 1, start (library and CLI) and another launch are refused naming it, until it is stopped."""
    from hermes_rl.core import runs
    from hermes_rl.core.base.errors import Conflict
    from hermes_rl.core.runs import start

    drafts.get_config(None)
    monkeypatch.setenv(start.MAX_LOCAL_RUNS_ENV, "1")
    first = wait_running(launch_standin()["run_id"])["run_id"]
    with pytest.raises(Conflict, match=f"{first}.*limit is 1"):
        runs.start_run()
    with pytest.raises(Conflict, match=f"{first}.*limit is 1"):
        launch_standin()
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "start"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 1 and "limit is 1" in out.stderr and first in out.stderr, out.stderr
    assert [p.name for p in _run_folders()] == [first]  # nothing created by the refused starts
    runs.stop_run(first)
    second = launch_standin()["run_id"]  # its place is free again
    assert wait_running(second)["status"] == "running"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_model_build_leaves_no_temp_folder(tmp_path, sig):
    out = tmp_path / "models" / "tiny"
    argv = [sys.executable, "-m", "hermes_rl.dataplane.tiny_model", "--out", str(out)]
    for _attempt in range(3):  # a quiet machine may finish the build before the signal lands: try again
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
        try:
            deadline = time.monotonic() + 120
            while not list(out.parent.glob(".tiny.build-*")) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert proc.poll() is None, "the build ended before it could be interrupted"
            proc.send_signal(sig)  # inside the build: its temp folder exists
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        if not (proc.returncode == 0 and out.exists()):
            break
        shutil.rmtree(out)
    assert proc.returncode != 0
    assert not list(out.parent.glob(".tiny.build-*")), "an interrupted build left its temp folder"
    assert not out.exists()
