"""Warm config probes: a long-lived client (dashboard, MCP server, agent plugin) probes environments in
forks of one server that imported atroposlib once (core.daemons.warm.server), and gets what a cold probe
in a fresh interpreter would have given — the same fields, the same errors, the same limits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import PROJECT_ROOT
from hermes_rl.core.daemons.warm.client import ForkServer
from hermes_rl.core.envs import probe
from hermes_rl.core.envs.discovery import find_environment
from tests.fixtures_config import fixture_id

pytestmark = pytest.mark.timeout(240)

# A config_init that tells who ran it: the probe's parent, whether a secret reached it, its folder.
WHO_ENV = """
import os
from pathlib import Path

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from pydantic import Field


def _environ_block():
    return Path("/proc/self/environ").read_bytes()


class WhoConfig(BaseEnvConfig):
    parent: int = Field(default_factory=os.getppid)
    sees_key: bool = Field(default_factory=lambda: "TINKER_API_KEY" in os.environ or b"tml-secret" in _environ_block())
    folder: str = Field(default_factory=os.getcwd)
    atroposlib_from: str = Field(default_factory=lambda: __import__("atroposlib").__file__)


class WhoEnv(BaseEnv):
    name = "who"
    env_config_cls = WhoConfig

    @classmethod
    def config_init(cls):
        return WhoConfig(), []
"""


@pytest.fixture
def server():
    """This test worker's warm probe server (conftest keeps one warm, as the dashboard does)."""
    assert probe._warm_server is not None
    return probe._warm_server


@pytest.fixture
def fresh_server():
    """A warm probe server of this test's own, not started yet, as keep_warm() makes it."""
    warm = ForkServer(probe.WARM_PRELOAD, probe._probe_env())
    yield warm
    warm.close()


def defaults(result: dict) -> dict:
    return {row["name"]: row["default"] for row in result["fields"]}


def probe_with(server: ForkServer | None, name: str, monkeypatch) -> dict:
    monkeypatch.setattr(probe, "_warm_server", server)
    env = find_environment(name)
    probe.clear_probe_cache(env, disk=True)
    return probe.probe_config(env)


def server_pid(server: ForkServer) -> int:
    assert server._proc is not None
    return server._proc.pid


def test_a_warm_probe_is_a_fork_of_the_server_and_equals_a_cold_one(server, user_envs, monkeypatch):
    (user_envs / "who_env.py").write_text(WHO_ENV)
    cold = probe_with(None, "who", monkeypatch)
    warm = probe_with(server, "who", monkeypatch)
    assert defaults(warm)["parent"] == server_pid(server)  # forked, not a fresh interpreter
    assert defaults(cold)["parent"] != server_pid(server)
    assert defaults(warm)["folder"] == defaults(cold)["folder"] == str(user_envs)
    for result in (warm, cold):
        result["fields"] = [row for row in result["fields"] if row["name"] != "parent"]
    assert warm == cold


@pytest.mark.parametrize("name", ["gsm8k", fixture_id("fixture_child")])
def test_warm_and_cold_probes_give_the_same_fields(server, fixture_envs, monkeypatch, name):
    assert probe_with(server, name, monkeypatch) == probe_with(None, name, monkeypatch)


@pytest.mark.parametrize(
    "name, expected",
    [
        (fixture_id("fixture_crash"), "RuntimeError: dataset gsm8k_missing.jsonl not found"),
        (fixture_id("fixture_hard_exit"), "exit code 7"),
        (fixture_id("broken_syntax"), "syntax error"),
    ],
)
def test_a_failing_environment_fails_warm_as_it_does_cold(server, fixture_envs, monkeypatch, name, expected):
    messages = []
    for mode in (server, None):
        with pytest.raises(BadInput) as caught:
            probe_with(mode, name, monkeypatch)
        messages.append(caught.value.message)
    assert expected in messages[0]
    assert messages[0] == messages[1]
    # The server survives a child that crashed or exited hard, and serves the next probe.
    assert probe_with(server, "toy_addition", monkeypatch)["ok"]


def test_a_hanging_probe_times_out_warm_and_leaves_only_the_server(server, fixture_envs, monkeypatch):
    monkeypatch.setenv("HERMES_RL_PROBE_TIMEOUT", "3")
    started = time.monotonic()
    with pytest.raises(BadInput) as caught:
        probe_with(server, fixture_id("fixture_slow"), monkeypatch)
    assert time.monotonic() - started < 20
    assert "within 3 s" in caught.value.message
    assert psutil.Process(server_pid(server)).children(recursive=True) == []
    assert probe_with(server, "toy_addition", monkeypatch)["ok"]


def test_a_key_in_the_clients_environment_never_reaches_a_warm_probe(user_envs, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-secret")  # the client has it when the server starts
    warm = ForkServer(probe.WARM_PRELOAD, probe._probe_env())
    try:
        (user_envs / "who_env.py").write_text(WHO_ENV)
        assert defaults(probe_with(warm, "who", monkeypatch))["sees_key"] is False
        assert b"tml-secret" not in open(f"/proc/{server_pid(warm)}/environ", "rb").read()
    finally:
        warm.close()


def test_a_folder_that_shadows_a_preloaded_package_is_probed_cold(server, user_envs, monkeypatch):
    """An environment folder with its own atroposlib (an Atropos checkout) must get that one, as a cold
    interpreter would: the warm server already holds the installed one, so that probe starts cold."""
    (user_envs / "who_env.py").write_text(WHO_ENV)
    own = user_envs / "atroposlib"
    own.mkdir()
    import atroposlib  # a copy of the installed package stands for a checkout's own

    subprocess.run(["cp", "-r", os.path.dirname(atroposlib.__file__) + "/.", str(own)], check=True)
    result = defaults(probe_with(server, "who", monkeypatch))
    assert result["parent"] != server_pid(server)
    assert result["atroposlib_from"] == str(own / "__init__.py")


def test_new_installed_packages_start_a_new_server(fresh_server, monkeypatch):
    server = fresh_server
    env = {**probe._probe_env(), "HERMES_HOME": os.environ["HERMES_HOME"]}
    args = dict(env=env, cwd=str(PROJECT_ROOT))
    code = [str(PROJECT_ROOT / "environments" / "toy_addition.py"), "ToyAdditionEnv"]
    assert server.run(probe.PROBE_MODULE, code, 60, stamp=("before",), **args).returncode == 0
    first = server_pid(server)
    assert server.run(probe.PROBE_MODULE, code, 60, stamp=("before",), **args).returncode == 0
    assert server_pid(server) == first
    assert server.run(probe.PROBE_MODULE, code, 60, stamp=("after",), **args).returncode == 0
    assert server_pid(server) != first
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE


def test_a_server_started_by_a_worker_thread_outlives_that_thread(fresh_server, tmp_path):
    """The dashboard probes from worker threads that end: the server one of them started keeps serving."""
    server = fresh_server
    (tmp_path / "quick.py").write_text("print('done')\n")
    args = dict(env=probe._probe_env(), cwd=str(tmp_path))
    worker = threading.Thread(target=server.run, args=("quick", [], 60), kwargs=args)
    worker.start()
    worker.join()
    first = server_pid(server)
    time.sleep(0.5)
    assert server._proc.poll() is None, "the server died with the thread that started it"
    assert server.run("quick", [], 60, **args).stdout == b"done\n"
    assert server_pid(server) == first


class SlowAfterWrite:
    """A client that is slow to read (a busy dashboard): both answers are in the pipe when it looks."""

    def __init__(self, pipe):
        self.pipe = pipe

    def write(self, data):
        written = self.pipe.write(data)
        time.sleep(1.0)
        return written

    def flush(self):
        self.pipe.flush()
        time.sleep(1.0)

    def close(self):
        self.pipe.close()


def test_a_child_that_ends_before_the_client_reads_is_not_taken_for_a_hang(server, tmp_path):
    (tmp_path / "quick.py").write_text("print('done')\n")
    args = dict(env=probe._probe_env(), cwd=str(tmp_path))
    assert server.run("quick", [], 60, **args).returncode == 0  # started
    pipe = server._proc.stdin
    server._proc.stdin = SlowAfterWrite(pipe)
    started = time.monotonic()
    try:
        result = server.run("quick", [], 8, **args)
    finally:
        if server._proc is not None:
            server._proc.stdin = pipe
    assert not result.timed_out and result.returncode == 0 and result.stdout == b"done\n"
    assert time.monotonic() - started < 5


def test_the_server_and_its_probe_die_with_their_client(fixture_envs, tmp_path):
    """A client killed by SIGKILL mid-probe (a dashboard's terminal closed) leaves no server or probe."""
    _kill_the_client_mid_probe(tmp_path, "main thread")


def test_a_client_probing_from_worker_threads_leaves_nothing_when_killed(fixture_envs, tmp_path):
    """The dashboard and the MCP server probe from worker threads that come and go: the server one of them
    started, and its probe, still end with the client."""
    _kill_the_client_mid_probe(tmp_path, "worker threads")


def test_a_cold_probe_dies_with_its_client(fixture_envs, tmp_path):
    """A one-off client (the CLI) probes cold: that probe ends with the client too."""
    _kill_the_client_mid_probe(tmp_path, "cold")


def _kill_the_client_mid_probe(tmp_path, where: str) -> None:
    client = textwrap.dedent(
        f"""
        import os, sys, threading
        from hermes_rl.core.envs import probe
        from hermes_rl.core.envs.discovery import find_environment

        def in_worker(job):
            if {where!r} == "main thread":
                return job()
            worker = threading.Thread(target=job)
            worker.start()
            worker.join()

        probe.keep_warm({where!r} != "cold")
        in_worker(lambda: probe.probe_config(find_environment("toy_addition")))
        print(probe._warm_server._proc.pid if probe._warm_server else 0, flush=True)
        os.environ["HERMES_RL_PROBE_TIMEOUT"] = "600"

        def slow():
            try:
                probe.probe_config(find_environment({fixture_id("fixture_slow")!r}))
            except Exception as exc:
                print("probe ended:", exc, flush=True)

        in_worker(slow)
        """
    )
    env = {**os.environ, "HERMES_RL_PROBE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", client], stdout=subprocess.PIPE, text=True, env=env)

    def started() -> list[psutil.Process]:
        """The warm server and its probe, or the cold probe."""
        if warm_pid:
            children = psutil.Process(warm_pid).children()
            return [psutil.Process(warm_pid), *children] if children else []
        return [child for child in psutil.Process(proc.pid).children() if "slow_config" in " ".join(child.cmdline())]

    try:
        warm_pid = int(proc.stdout.readline())
        assert bool(warm_pid) == (where != "cold")
        deadline = time.monotonic() + 60
        while not started() and time.monotonic() < deadline:
            time.sleep(0.1)
        processes = started()
        assert processes, "the slow probe never started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(processes, timeout=15)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
