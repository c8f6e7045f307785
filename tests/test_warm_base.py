"""A run's warm server forked from the warm base of the client that started it (daemons.warm.base): the run
pays a fork instead of importing torch, atroposlib and the SDK again, and its server is still the run's —
it shows the run's marker, ends with the run however the supervisor ends, and outlives the base (a run
outlives the dashboard that started it). What the base cannot be faithful to gets a server of its own,
with the reason in the run's events."""

from __future__ import annotations

import json
import os

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.daemons.warm import base as warm_base
from tests.fixtures_core import lose_run, pid_alive, processes_with_env, wait_status, wait_until
from tests.test_warm_start import _proc_file, _processes, _spec

pytestmark = pytest.mark.timeout(180)


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])


@pytest.fixture
def own_base(monkeypatch):
    """A warm base of this test's own (the worker's stays as it is), named to the supervisors it starts."""
    env = {k: v for k, v in os.environ.items() if k != warm_base.BASE_ENV}
    base = warm_base.WarmBase(["numpy"], {**env, "PYTHONUNBUFFERED": "1", "WORKER_SETTING": "shared"})
    try:
        wait_until(lambda: base.ready, 60, what="the warm base to import numpy")
        monkeypatch.setenv(warm_base.BASE_ENV, base.path)
        yield base
    finally:
        base.close()


def _warm_events(run_id: str) -> list[str]:
    return [e["message"] for e in runs.run_events(run_id) if e.get("event") == "warm"]


def test_a_run_forks_its_warm_server_from_the_base_and_outlives_it(worker_module, own_base, hermes_home):
    run = runs.launch([_spec("one", worker_module), _spec("two", worker_module)], environment="warm", profile="local")
    run_id = run["run_id"]
    try:
        run = wait_status(run_id, "running", timeout=90)
        assert any("forked from the warm base" in m for m in _warm_events(run_id)), _warm_events(run_id)
        procs = _processes(run_id)
        server = _parent(procs["one"]["pid"])
        assert _parent(procs["two"]["pid"]) == server and _parent(server) == own_base.proc.pid
        # the run's own server as ps and the run's marker show it, in a session of its own
        assert "hermes_rl.core.daemons.warm.server" in " ".join(_proc_file(server, "cmdline"))
        shown = dict(line.split("=", 1) for line in _proc_file(server, "environ") if "=" in line)
        assert shown["HERMES_RL_RUN_DIR"] == str(run_dir(run_id)) and "HERMES_RL_WARM_ROOM" not in shown
        assert os.getsid(server) == server
        assert all("preloaded before main True" in open(run["logs"][n]).read() for n in ("one", "two"))

        own_base.close()  # the client that started the run quits: the run goes on
        assert not os.path.exists(own_base.folder)
        assert pid_alive(server) and all(pid_alive(p["pid"]) for p in _processes(run_id).values())
        assert runs.get_run(run_id)["status"] == "running"
    finally:
        runs.stop_run(run_id, wait=60)
    wait_status(run_id, ("stopped",), timeout=60)
    wait_until(lambda: not pid_alive(server), 10, what="the borrowed server to end with the run")
    assert not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run_id)))


def test_a_supervisor_killed_outright_takes_its_borrowed_server_along(worker_module, own_base, hermes_home):
    run = runs.launch([_spec("one", worker_module)], environment="warm", profile="local")
    run = wait_status(run["run_id"], "running", timeout=90)
    child = _processes(run["run_id"])["one"]["pid"]
    server = _parent(child)
    assert _parent(server) == own_base.proc.pid
    lose_run(run)
    wait_until(lambda: not pid_alive(child) and not pid_alive(server), 15, what="the fork and its server to end")
    assert not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run["run_id"])))
    assert pid_alive(own_base.proc.pid)  # the base serves the next run


def test_what_the_base_cannot_be_faithful_to_gets_a_server_of_its_own_and_says_why(
    worker_module, own_base, hermes_home, monkeypatch
):
    # OMP_NUM_THREADS is read while torch imports: the base imported with another value.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = runs.launch([_spec("one", worker_module)], environment="warm", profile="local")
    try:
        wait_status(run["run_id"], "running", timeout=90)
        events = _warm_events(run["run_id"])
        assert any("not from the warm base" in m and "OMP_NUM_THREADS" in m for m in events), events
        one = _processes(run["run_id"])["one"]
        assert one["warm"] is True and _parent(_parent(one["pid"])) != own_base.proc.pid
    finally:
        runs.stop_run(run["run_id"], wait=60)

    # a module the base never imported: its own server imports it
    monkeypatch.delenv("OMP_NUM_THREADS")
    run = runs.launch([_spec("one", worker_module, warm=["numpy", "tabnanny"])], environment="warm", profile="local")
    try:
        wait_status(run["run_id"], "running", timeout=90)
        events = _warm_events(run["run_id"])
        assert any("the warm base did not import tabnanny" in m for m in events), events
    finally:
        runs.stop_run(run["run_id"], wait=60)


def test_only_its_owners_user_reaches_it_and_a_bad_request_changes_nothing(own_base):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(own_base.path)
        conn.sendall(b'{"env": "not a mapping"}\n')
        assert b"bad request" in conn.recv(4096)
    for env in ({"A": 1}, {"A\u0000B": "x"}):  # a value that is no string, a name no environment can hold
        pipes = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(own_base.path)
            request = {"env": env, "preload": ["numpy"], "runtime_only": []}
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], list(pipes))
            conn.recv(4096)
        for fd in pipes:
            os.close(fd)
    assert os.stat(own_base.folder).st_mode & 0o777 == 0o700  # no other user reaches the socket
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WORKER_SETTING": "shared"}
    server, why = warm_base.borrow(["numpy"], env, set())
    assert server is not None, why  # the base still answers after a bad request
    assert _parent(server.pid) == own_base.proc.pid
    server.stdin.close()  # its client is gone: it ends
    server.wait(10)
    server, why = warm_base.borrow(["numpy"], env, set())
    assert server is not None, why
    server.kill()
    server.wait(10)


def test_a_run_started_while_the_base_still_imports_waits_for_it_and_forks(worker_module, hermes_home, monkeypatch):
    """The dashboard's first run starts its base and its supervisor at once: the supervisor waits for the
    base's imports (their cost paid once) rather than import the same modules again for itself; a client
    that asks not to wait (one process to start) is told so at once."""
    slow = worker_module / "slow_import"
    slow.mkdir()
    (slow / "slow_module.py").write_text("import time\ntime.sleep(3)\n")
    env = {k: v for k, v in os.environ.items() if k != warm_base.BASE_ENV}
    env.update(PYTHONUNBUFFERED="1", WORKER_SETTING="shared", PYTHONPATH=str(slow))
    base = warm_base.WarmBase(["numpy", "slow_module"], env)
    try:
        monkeypatch.setenv(warm_base.BASE_ENV, base.path)
        assert not base.ready
        server, why = warm_base.borrow(["numpy"], env, set(), wait=False)
        assert server is None and "still importing" in why
        run = runs.launch(
            [_spec("one", worker_module, warm=["numpy", "slow_module"])],
            environment="warm",
            profile="local",
        )
        try:
            wait_status(run["run_id"], "running", timeout=90)
            assert base.ready
            assert any("forked from the warm base" in m for m in _warm_events(run["run_id"])), _warm_events(
                run["run_id"]
            )
            assert _parent(_parent(_processes(run["run_id"])["one"]["pid"])) == base.proc.pid
        finally:
            runs.stop_run(run["run_id"], wait=60)
    finally:
        base.close()


def test_config_probes_and_one_off_processes_fork_from_the_base_too(own_base, tmp_path):
    """A long-lived client's probe server (core.envs.probe) and a single process that would not pay for a
    server of its own (an inference test's one environment, borrow_only) are forks of its base."""
    from hermes_rl.core.daemons.warm.client import ForkServer, WarmStarts

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WORKER_SETTING": "shared"}
    probes = ForkServer(["numpy"], env)
    try:
        done = probes.run("platform", [], 30, env=env, cwd=str(tmp_path))
        assert done.returncode == 0 and done.stdout.strip(), done
        assert _parent(probes._proc.pid) == own_base.proc.pid
    finally:
        probes.close()
    one = WarmStarts(["numpy"], env, set(), borrow_only=True)
    try:
        assert one.borrowed and one.wait_started() == "ready" and _parent(one.pid) == own_base.proc.pid
    finally:
        one.close()
    refused = WarmStarts(["numpy"], {**env, "WORKER_SETTING": "other"}, set(), borrow_only=True)
    assert refused.state == "failed" and refused.pid is None  # no server of its own: a cold start follows
    assert "WORKER_SETTING" in refused.not_borrowed
