"""Ctrl-C during `hermes-rl start`, at several moments: the run is stopped and removed (nothing keeps
training unseen), or the answer names the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hermes_rl.core.base.paths import runs_dir
from hermes_rl.core.envs import drafts

pytestmark = [pytest.mark.reliability, pytest.mark.usefixtures("run_processes_cleanup")]


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
