"""A one-node Ray cluster for the Ray launcher's tests: `ray start --head --block` on loopback with ports
of its own and a temporary folder of its own, started once per test session and ended (its process
group) after, so clusters of other worktrees on the machine are never touched. A test that needs it is
skipped, with the reason, where Ray is not installed or the cluster does not come up."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from hermes_rl.core.daemons.launchers.ray_jobs import cluster_nodes

START_TIMEOUT_S = 150.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """The cluster's dashboard address (what `ray job submit --address` takes)."""
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        pytest.skip("no Ray cluster: ray is not installed (pip install 'hermes-rl[ray]')")
    folder = tempfile.mkdtemp(prefix="hrl-ray-", dir="/tmp")  # Ray's socket paths must stay short
    dashboard = _free_port()
    argv = [str(ray), "start", "--head", "--block", "--disable-usage-stats", "--num-cpus=2"]
    argv += ["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"]
    argv += [f"--port={_free_port()}", f"--ray-client-server-port={_free_port()}"]
    argv += [f"--dashboard-agent-listen-port={_free_port()}", f"--temp-dir={folder}"]
    log = open(Path(folder) / "head.log", "wb")  # noqa: SIM115 - open for the cluster's life
    head = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    address = f"http://127.0.0.1:{dashboard}"
    deadline = time.monotonic() + START_TIMEOUT_S
    up = False
    while time.monotonic() < deadline and head.poll() is None:
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as answer:
                up = answer.status == 200 and bool(cluster_nodes(address))  # its node registered too
        except OSError:
            pass
        if up:
            break
        time.sleep(1)
    try:
        if not up:
            tail = (Path(folder) / "head.log").read_text(errors="replace").strip().splitlines()[-1:]
            pytest.skip(f"no Ray cluster: `ray start --head` did not come up in {START_TIMEOUT_S:g}s: {tail}")
        yield address
    finally:
        # SIGKILL: on SIGTERM Ray 2.60's head drains for up to 30 s, for jobs the tests already stopped
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                head.wait(10.0)
        # what the head started in sessions of their own (raylets, workers) still carries the folder
        done = subprocess.run(["pgrep", "-f", folder], capture_output=True, text=True)
        for pid in done.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
