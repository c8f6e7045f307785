"""A run's processes started as forks of its warm server (daemons.warm.client.WarmStarts): what a user and
every tool see of them is what a fresh start shows — their own command line and environment in /proc,
their output and exit in the run, their own random seeds, nothing left running — and what a fork
cannot be faithful to starts cold."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
from tests.fixtures_core import lose_run, pid_alive, processes_with_env, wait_status, wait_until

pytestmark = pytest.mark.timeout(180)

# numpy's import is a fraction of a second: enough to tell a fork (it is already there) from a fresh start.
PRELOAD = ["numpy"]


def _spec(name: str, folder, *args: str, warm=PRELOAD, env=None, **kw) -> ProcessSpec:
    return ProcessSpec(
        name=name,
        argv=[sys.executable, "-m", "warm_worker", *args],
        cwd=str(folder),
        env={"WORKER_SETTING": "shared", **(env or {})},
        readiness=Readiness(kind="log", pattern=r"^numbers", timeout_s=60.0),
        warm=list(warm),
        **kw,
    )


def _proc_file(pid: int, name: str) -> list[str]:
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return [part.decode() for part in handle.read().split(b"\0") if part]


def _processes(run_id: str) -> dict[str, dict]:
    return {p["name"]: p for p in runs.get_run(run_id, sample=False)["processes"]}


def _log(run: dict, name: str) -> str:
    return open(run["logs"][name], encoding="utf-8", errors="replace").read()


def test_forked_processes_show_their_own_command_line_environment_and_random_seeds(worker_module, hermes_home):
    run = runs.launch([_spec("one", worker_module), _spec("two", worker_module)], environment="warm", profile="local")
    run_id = run["run_id"]
    try:
        run = wait_status(run_id, "running", timeout=90)
        procs = _processes(run_id)
        assert procs["one"].get("warm") is True and procs["two"].get("warm") is True, procs
        server = None
        for name in ("one", "two"):
            pid = procs[name]["pid"]
            # what ps and every /proc reader see: the command line it was asked for, its own variables
            assert _proc_file(pid, "cmdline") == [sys.executable, "-m", "warm_worker"], name
            env = dict(line.split("=", 1) for line in _proc_file(pid, "environ") if "=" in line)
            assert env["HERMES_RL_PROCESS"] == name and env["WORKER_SETTING"] == "shared", env
            assert env["HERMES_RL_RUN_DIR"] == str(run_dir(run_id)) and "HERMES_RL_WARM_ROOM" not in env
            parent = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
            assert "hermes_rl.core.daemons.warm.server" in " ".join(_proc_file(parent, "cmdline"))
            server = parent
            assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # a group (and session) of its own
        logs = {name: _log(run, name) for name in ("one", "two")}
        assert "up one shared" in logs["one"] and "up two shared" in logs["two"], logs
        assert all("preloaded before main True" in text for text in logs.values()), logs
        numbers = [text.split("numbers ")[1].split()[0] for text in logs.values()]
        assert numbers[0] != numbers[1], "two forks drew the same random numbers"
    finally:
        runs.stop_run(run_id, wait=60)
    final = wait_status(run_id, ("stopped",), timeout=60)
    assert all(p["state"] == "stopped" for p in final["processes"]), final["processes"]
    wait_until(lambda: not pid_alive(server), 10, what="the warm server to end with the run")
    assert not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run_id)))
    events = [e["message"] for e in runs.run_events(run_id)]
    assert not any(m.startswith("ended") and "leftover" in m for m in events), events  # nothing swept


def test_a_forked_process_failing_names_its_exception_and_exit_codes_pass_through(worker_module, hermes_home):
    restarts = RestartPolicy(mode="on_failure", max_restarts=1, backoff_s=0.1)
    run = runs.launch([_spec("reader", worker_module, "fail", restart=restarts)], environment="warm", profile="local")
    final = wait_status(run["run_id"], "failed", timeout=90)
    reader = _processes(run["run_id"])["reader"]
    assert reader["exit_code"] == 1 and reader["restarts"] == 1 and reader.get("warm") is True, reader
    assert "ValueError: the worker could not read its shard" in final["reason"], final["reason"]
    log = _log(final, "reader")
    assert log.count("Traceback (most recent call last)") == 2 and "attempt 2" in log, log[-2000:]

    run = runs.launch([_spec("quitter", worker_module, "exit")], environment="warm", profile="local")
    final = wait_status(run["run_id"], "failed", timeout=90)
    assert _processes(run["run_id"])["quitter"]["exit_code"] == 3, final["processes"]


def test_what_a_fork_would_get_wrong_starts_cold(worker_module, hermes_home, monkeypatch):
    # A variable read while modules import (thread counts, hub switches) must be the server's, or the
    # process starts fresh; so does one whose folder holds a module named like one the server imported.
    shadowing = worker_module / "shadow"
    shadowing.mkdir()
    (shadowing / "warm_worker.py").write_text((worker_module / "warm_worker.py").read_text())
    (shadowing / "numpy.py").write_text("import sys\nsys.exit('the user numpy module was imported')\n")
    specs = [
        _spec("same", worker_module),
        _spec("threads", worker_module, env={"OMP_NUM_THREADS": "1"}),
        _spec("shadowed", shadowing, required=False),
    ]
    run = runs.launch(specs, environment="warm", profile="local")
    try:
        wait_until(
            lambda: all(p["state"] in ("ready", "failed", "exited") for p in _processes(run["run_id"]).values()),
            90,
            what="every process to start",
        )
        procs = _processes(run["run_id"])
        assert procs["same"].get("warm") is True, procs["same"]
        assert procs["threads"]["state"] == "ready", procs["threads"]
        assert procs["threads"]["warm"] is False and "OMP_NUM_THREADS" in procs["threads"]["why_cold"], procs["threads"]
        # started fresh, it imports the folder's numpy, as python -m in that folder would
        assert procs["shadowed"]["warm"] is False and procs["shadowed"]["exit_code"] == 1, procs["shadowed"]
        assert "shadow" in procs["shadowed"]["why_cold"], procs["shadowed"]
        assert "the user numpy module was imported" in _log(runs.get_run(run["run_id"]), "shadowed")
    finally:
        runs.stop_run(run["run_id"], wait=60)

    monkeypatch.setenv("HERMES_RL_WARM_START", "0")
    run = runs.launch([_spec("same", worker_module)], environment="warm", profile="local")
    try:
        wait_status(run["run_id"], "running", timeout=90)
        assert not _processes(run["run_id"])["same"].get("warm")
    finally:
        runs.stop_run(run["run_id"], wait=60)


def test_a_supervisor_killed_outright_leaves_no_fork_and_no_server(worker_module, hermes_home):
    run = runs.launch([_spec("one", worker_module)], environment="warm", profile="local")
    run = wait_status(run["run_id"], "running", timeout=90)
    child = _processes(run["run_id"])["one"]["pid"]
    server = int(open(f"/proc/{child}/stat").read().rpartition(")")[2].split()[1])
    lose_run(run)
    wait_until(lambda: not pid_alive(child) and not pid_alive(server), 15, what="the fork and its server to end")
    assert not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run["run_id"])))


def test_a_fork_stopped_by_sigterm_reports_the_signal(worker_module, hermes_home):
    run = runs.launch([_spec("one", worker_module)], environment="warm", profile="local")
    run = wait_status(run["run_id"], "running", timeout=90)
    pid = _processes(run["run_id"])["one"]["pid"]
    os.kill(pid, signal.SIGTERM)
    final = wait_status(run["run_id"], "failed", timeout=60)
    assert _processes(run["run_id"])["one"]["exit_code"] == -signal.SIGTERM, final["processes"]
    assert "SIGTERM" in final["reason"], final["reason"]


def test_a_forks_pid_is_answered_once_proc_shows_its_own_environment(tmp_path):
    """Whoever is told a fork's pid (the supervisor, then run.json's readers: the watchdog's sweep, a test,
    `ps`) may read /proc/PID at once: it must already show the fork's own command line and environment,
    as a fresh process's does once Popen returns, not the server's."""
    from hermes_rl.core.daemons.warm.client import WarmStarts

    (tmp_path / "warm_sleeper.py").write_text("import time\ntime.sleep(120)\n")
    env = {k: v for k, v in os.environ.items() if k != "HERMES_RL_WARM_MARK"}
    starts = WarmStarts(["json"], env, {"HERMES_RL_WARM_MARK"})
    try:
        assert starts.wait_started() == "ready"
        for attempt in range(10):
            mark = f"attempt-{attempt}"
            argv = [sys.executable, "-m", "warm_sleeper", mark]
            pid = starts.start(
                argv, cwd=str(tmp_path), env={**env, "HERMES_RL_WARM_MARK": mark}, log=str(tmp_path / "log"), folders=[]
            )
            shown = _proc_file(pid, "environ")  # at once: no wait between the answer and the read
            assert f"HERMES_RL_WARM_MARK={mark}" in shown, (attempt, [e for e in shown if "WARM" in e])
            assert _proc_file(pid, "cmdline") == argv
    finally:
        starts.close()


def test_a_plain_folder_named_like_an_imported_package_keeps_the_process_warm(worker_module, hermes_home):
    # A folder without __init__.py (a run folder's wandb/, a data folder) hides no installed package: a
    # fresh `python -m` there imports the real numpy, so the fork is faithful.
    (worker_module / "numpy").mkdir()
    (worker_module / "numpy" / "notes.txt").write_text("not a package\n")
    run = runs.launch([_spec("one", worker_module)], environment="warm", profile="local")
    try:
        run = wait_status(run["run_id"], "running", timeout=90)
        one = _processes(run["run_id"])["one"]
        assert one.get("warm") is True, one
        assert "preloaded before main True" in _log(run, "one")
    finally:
        runs.stop_run(run["run_id"], wait=60)


def test_each_fork_has_its_own_temporary_folders_and_leaves_the_others(tmp_path):
    """wandb makes its media folder when it is imported (a TemporaryDirectory removed at exit): shared by
    the forks of one server, the first environment process to end removed it and the next one to log a
    table failed with FileNotFoundError. Each fork gets its own, as a fresh interpreter does."""
    from hermes_rl.core.daemons.warm.client import WarmStarts

    (tmp_path / "media_user.py").write_text(
        "import os, sys, time\n"
        "from wandb.sdk.data_types._private import MEDIA_TMP\n"
        "print('folder', MEDIA_TMP.name, flush=True)\n"
        "time.sleep(float(sys.argv[1]))\n"
        "open(os.path.join(MEDIA_TMP.name, 'table.json'), 'w').write('{}')\n"
    )
    env = dict(os.environ)
    starts = WarmStarts(["wandb.sdk.data_types._private"], env, set())
    try:
        assert starts.wait_started() == "ready"
        logs = [tmp_path / "long.log", tmp_path / "short.log"]
        pids = [
            starts.start(
                [sys.executable, "-m", "media_user", seconds], cwd=str(tmp_path), env=env, log=str(log), folders=[]
            )
            for seconds, log in zip(("3", "0"), logs)
        ]
        wait_until(lambda: all(starts.exit_code(pid) is not None for pid in pids), 60, what="both forks to end")
        assert [starts.exit_code(pid) for pid in pids] == [0, 0], [log.read_text()[-500:] for log in logs]
        folders = [log.read_text().split("folder ")[1].split()[0] for log in logs]
        assert folders[0] != folders[1] and not any(os.path.exists(folder) for folder in folders), folders

        # stopped as a run stops its processes (SIGTERM, whose default action skips the clean-up of an exit),
        # a fork still removes its folder, and ends by SIGTERM
        log = tmp_path / "stopped.log"
        pid = starts.start(
            [sys.executable, "-m", "media_user", "60"], cwd=str(tmp_path), env=env, log=str(log), folders=[]
        )
        wait_until(lambda: "folder " in log.read_text(), 30, what="the fork to start")
        folder = log.read_text().split("folder ")[1].split()[0]
        assert os.path.isdir(folder)
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: starts.exit_code(pid) is not None, 30, what="the fork to end")
        assert starts.exit_code(pid) == -signal.SIGTERM and not os.path.exists(folder)
    finally:
        starts.close()


@pytest.mark.parametrize("mode", ["wb", "ab"], ids=["new-log", "appended-log"])
def test_a_warm_start_that_gives_up_leaves_the_log_to_the_cold_process(tmp_path, mode):
    """A fork whose answer came too late (the warm server's 30 s) may have written to the log before the
    cold start replaced it: the log then holds what was there before and the cold process's lines, never the
    fork's (a client once read a dead fork's `ready` line from a server's log and found its port closed)."""
    from hermes_rl.core.daemons.launchers.local import start_local
    from hermes_rl.core.daemons.warm.client import ColdStartNeeded

    log = tmp_path / "server.log"
    log.write_text("an earlier start\n")

    class LateFork:
        def start(self, argv, *, cwd, env, log, folders):
            with open(log, "a") as handle:
                handle.write("ready on the fork's port\n")
            raise ColdStartNeeded("the warm server did not take the request")

    with open(log, mode) as handle:
        argv = [sys.executable, "-c", "print('ready on the cold port')"]
        process = start_local(
            argv, cwd=str(tmp_path), env=dict(os.environ), log_fd=handle.fileno(), log=log, warm=LateFork()
        )
        assert process.wait(60) == 0 and process.why_cold == "the warm server did not take the request"
    kept = "an earlier start\n" if mode == "ab" else ""
    assert log.read_text() == kept + "ready on the cold port\n"
