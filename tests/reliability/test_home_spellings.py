"""One identity for a run however $HERMES_HOME is spelled: a client reaching the same folder through a
symlink, a `..` or a path relative to its working folder sees a live run as running, and its `stop`
ends every process of the run before it reports success (the run's process markers are compared by
file identity, and $HERMES_HOME is made canonical before any path is derived from it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hermes_rl.core import runs
from tests.reliability.helpers import assert_no_orphans, client_env, launch_standin, orphans, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]


def _cli(home_spelling: str, cwd, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", *args]
    env = client_env(home_spelling)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


def _spelling(kind: str, home, tmp_path) -> tuple[str, str]:
    """(the $HERMES_HOME a second client uses, its working folder) for the same folder as `home`."""
    if kind == "symlink":
        link = tmp_path / "home-link"
        link.symlink_to(home, target_is_directory=True)
        return str(link), str(tmp_path)
    if kind == "dotdot":
        (home.parent / "elsewhere").mkdir(exist_ok=True)
        return str(home.parent / "elsewhere" / ".." / home.name), str(tmp_path)
    return home.name, str(home.parent)  # relative to the client's working folder


@pytest.mark.parametrize("kind", ["symlink", "dotdot", "relative"])
def test_status_and_stop_through_another_spelling_of_home(kind, hermes_home, tmp_path):
    run = launch_standin()
    run_id = run["run_id"]
    try:
        wait_running(run_id)
        spelling, cwd = _spelling(kind, hermes_home, tmp_path)
        status = _cli(spelling, cwd, "status", run_id, "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["status"] == "running", status.stdout

        stopped = _cli(spelling, cwd, "stop", run_id, "--json")
        assert stopped.returncode == 0, stopped.stderr
        after = runs.get_run(run_id, sample=False)
        # Reported stopped only with nothing of the run left alive.
        assert after["status"] == "stopped", after
        assert not orphans(after), orphans(after)
    finally:
        if runs.get_run(run_id, sample=False)["status"] not in ("stopped", "failed", "completed"):
            runs.stop_run(run_id, force=True)
        assert_no_orphans(runs.get_run(run_id, sample=False))


def test_every_spelling_of_home_names_the_same_run_folder(hermes_home, tmp_path, monkeypatch):
    from hermes_rl.core.base.paths import run_dir

    canonical = run_dir("0123abcd")
    for kind in ("symlink", "dotdot", "relative"):
        spelling, cwd = _spelling(kind, hermes_home, tmp_path)
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("HERMES_HOME", spelling)
        assert run_dir("0123abcd") == canonical, (kind, spelling)
