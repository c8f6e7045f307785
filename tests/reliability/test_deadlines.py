"""Every external wait is a deadline: a config probe whose config_init forks a daemon, a server that
trickles its answer, and an MCP client that gives up on rl_test_inference."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.reliability.helpers import RPROCS, record

pytestmark = [pytest.mark.reliability]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.timeout(180)
def test_a_config_init_that_forks_a_daemon_neither_blocks_config_nor_leaves_it_running(
    hermes_home, user_envs, tmp_path
):
    shutil.copy(RPROCS / "forking_config_env.py", user_envs / "forking_config_env.py")
    pid_file = tmp_path / "daemon.pid"
    env = {**os.environ, "FORKING_CONFIG_PID_FILE": str(pid_file), "HERMES_RL_PROBE_TIMEOUT": "60"}
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "config", "--env", "forking_config", "--json"]
    started = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=50, env=env)
    finally:
        daemons = [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []
        for pid in daemons:  # never leave the test's daemon behind, whatever happened
            if _alive(pid):
                os.kill(pid, 9)
                time.sleep(0.2)
                daemons.append(-1)
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert daemons and -1 not in daemons, "the daemon config_init started was still running after the probe"
    assert elapsed < 40, f"hermes-rl config took {elapsed:.1f} s"
    record("deadline", case="config_init forks a daemon", seconds=round(elapsed, 2), left_running=0)


class _Trickler:
    """An HTTP server that answers one byte every 0.2 s for two minutes: each read succeeds in time,
    the whole answer never arrives. `headers_too`: even the status line trickles."""

    def __init__(self, headers_too: bool):
        import socketserver
        import threading

        trickler = self
        self.stop = threading.Event()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.recv(65536)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                if not headers_too:
                    self.request.sendall(head)
                data = (head if headers_too else b"") + b'{"data": [' + b" " * 100000
                for byte in data:
                    if trickler.stop.wait(0.2):
                        return
                    try:
                        self.request.sendall(bytes([byte]))
                    except OSError:
                        return

        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("headers_too", [False, True], ids=["body trickles", "headers trickle"])
def test_a_trickling_server_cannot_stretch_rl_test_inference(arith_env, headers_too):
    from hermes_rl.core.clients.toolset import call_tool
    from hermes_rl.core.envs import drafts
    from hermes_rl.core.runs.trial import LIST_MODELS_DEADLINE_S

    drafts.get_config(None)  # the environment's config probe (seconds of imports) is not what is timed
    server = _Trickler(headers_too)
    try:
        started = time.monotonic()
        out = call_tool("rl_test_inference", {"num_steps": 1, "group_size": 1, "base_url": server.url})
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert "error" in out and "within" in out["error"], out
    assert elapsed < LIST_MODELS_DEADLINE_S + 5, f"rl_test_inference took {elapsed:.1f} s"
    record("deadline", case=f"trickling server ({'headers' if headers_too else 'body'})", seconds=round(elapsed, 2))


def _inference_children(home) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "process --config" in cmd and str(home) in cmd:
            found.append(proc)
    return found


@pytest.mark.timeout(180)
def test_an_mcp_client_that_gives_up_stops_the_inference_child(arith_env, hermes_home):
    import anyio
    from mcp import types
    from mcp.shared.exceptions import McpError
    from mcp.shared.memory import create_connected_server_and_client_session

    from hermes_rl.core.clients.mcp_server import build_server
    from hermes_rl.core.envs import drafts

    drafts.get_config(None)
    server = _Trickler(headers_too=True)  # the model never answers: the child waits on it
    timings: dict = {}

    async def scenario():
        async with create_connected_server_and_client_session(build_server()) as client:
            request_id = client._request_id  # the id the next request gets
            args = {"num_steps": 1, "group_size": 1, "models": ["slow"], "base_url": server.url}

            async def call():
                try:
                    await client.call_tool("rl_test_inference", args)
                except McpError as exc:  # the server's answer to a cancelled request
                    timings["answer"] = str(exc)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                with anyio.fail_after(60):
                    while not _inference_children(hermes_home):
                        await anyio.sleep(0.2)
                await anyio.sleep(1.0)
                notice = types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=request_id, reason="the user gave up")
                )
                cancelled_at = time.monotonic()
                await client.send_notification(types.ClientNotification(notice))
                with anyio.move_on_after(15):
                    while _inference_children(hermes_home):
                        await anyio.sleep(0.1)
                timings["child_gone_s"] = time.monotonic() - cancelled_at
                tasks.cancel_scope.cancel()

    try:
        anyio.run(scenario)
    finally:
        server.close()
        leftovers = _inference_children(hermes_home)
        for proc in leftovers:
            proc.kill()
    assert not leftovers, "the inference child kept running after the client cancelled"
    assert timings["child_gone_s"] < 10
    record("deadline", case="MCP client cancels rl_test_inference", child_gone_s=round(timings["child_gone_s"], 2))
