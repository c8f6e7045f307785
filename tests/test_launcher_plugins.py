"""A fourth launcher costs one module: a package publishes it under the `hermes_rl.launchers` entry-point
group and a run uses it with no hermes-rl file changed. The package (tests/data/launcher_plugin) is
installed here into a temporary site folder with a real dist-info, on this process's path and the
supervisor's and watchdog's (PYTHONPATH), as pip would install it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.daemons import launchers
from hermes_rl.core.daemons.launchers import registry
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from hermes_rl.core.runs.workers import resolve_workers
from tests.fixtures_core import PY, pid_alive, proc_path, wait_status, wait_until

PLUGIN = Path(__file__).parent / "data" / "launcher_plugin" / "hermes_pod_launcher.py"


@pytest.fixture
def pod_launcher(tmp_path, monkeypatch):
    """The plug-in package installed into a site folder of its own, seen by this process and its children."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(PLUGIN, site / PLUGIN.name)
    info = site / "hermes_pod_launcher-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-pod-launcher\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hermes_rl.launchers]\npod = hermes_pod_launcher:PodLauncher\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    registry.reload_published()
    yield site
    registry.reload_published()
    sys.modules.pop("hermes_pod_launcher", None)


def test_a_published_launcher_is_found_by_name_and_held_to_the_rules(pod_launcher):
    assert "pod" not in registry._BUILT_IN and launchers.names()[:4] == ["local", "slurm", "ray", "skypilot"]
    assert "pod" in launchers.names()
    pod = launchers.get("pod")
    assert isinstance(pod, launchers.Launcher)
    # its settings go where any launcher's do; a command among them comes from its site file only
    workers = resolve_workers({"launcher": "pod", "pod": {"label": "blue"}})
    assert workers["pod"] == {"label": "blue", "entrypoint": []}
    with pytest.raises(BadInput, match=r"pod\.entrypoint is a command"):
        resolve_workers({"launcher": "pod", "pod": {"entrypoint": ["sh", "-c", "id"]}})
    with pytest.raises(BadInput, match="launcher must be one of local, slurm, ray, skypilot, pod"):
        launchers.get("nowhere")


def test_hermes_rl_launchers_lists_every_launcher_with_its_settings_and_preflight(pod_launcher, hermes_home):
    def listed(*extra: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "hermes_rl.core.clients.cli", "launchers", "--json", *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return {row["name"]: row for row in json.loads(done.stdout)}

    rows = listed("--no-preflight")
    assert (
        list(rows) == ["local", "slurm", "ray", "skypilot", "pod"] and rows["pod"]["from"] == "hermes-pod-launcher 0.1"
    )
    assert {k["name"]: k["command"] for k in rows["pod"]["settings"]} == {"label": False, "entrypoint": True}
    assert {k["name"] for k in rows["slurm"]["settings"] if k["command"]} == {"setup", "wrapper", "python"}
    commands = {k["name"] for k in rows["skypilot"]["settings"] if k["command"]}
    assert commands == {"setup", "python", "image_id", "envs", "sky_python"}
    assert rows["pod"]["preflight"] is None and rows["slurm"]["site_file"].endswith("rl/slurm.yaml")
    rows = listed()
    assert rows["local"]["preflight"] == "ok" and rows["pod"]["preflight"] == "ok"
    assert isinstance(rows["slurm"]["preflight"], str)  # "ok" on a cluster, else why not, in words
    assert "no Ray cluster address" in rows["ray"]["preflight"]  # no ray.yaml here, no RAY_ADDRESS
    text = subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", "launchers", "--no-preflight"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "pod  this machine  from hermes-pod-launcher 0.1" in text and "entrypoint*" in text, text


def test_a_run_uses_a_published_launcher_and_kill_9_leaves_nothing(pod_launcher, run_processes_cleanup):
    def spec(name: str) -> ProcessSpec:
        return ProcessSpec(
            name=name,
            argv=[PY, proc_path("ready.py")],
            readiness=Readiness("log", pattern=r"^ready", timeout_s=60.0),
            launcher="pod",
            settings={"label": "blue"},
        )

    run = runs.launch([spec("w")], environment="toy", profile="local")
    run_id = run["run_id"]
    wait_status(run_id, "running", timeout=60)
    (proc,) = runs.get_run(run_id)["processes"]
    node = f"{socket.gethostname()}/blue"
    assert proc["launcher"] == "pod" and proc["job"]["launcher"] == "pod" and proc["alive"], proc
    assert proc["job_id"].startswith("pod-") and proc["node"] == node and proc["where"] == f"{node} RUNNING"
    status = subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", "status", run_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
    ).stdout
    assert f"{node} RUNNING" in status and f"job {proc['job_id']}" in status, status
    final = runs.stop_run(run_id, wait=30)
    assert final["status"] == "stopped"
    events = [e["message"] for e in runs.run_events(run_id) if e.get("process") == "w"]
    assert any(m.startswith(f"w stopped (pod {proc['job_id']} deleted") for m in events), events
    assert not pid_alive(int(proc["job_id"].removeprefix("pod-")))

    # a supervisor killed with SIGKILL: the watchdog ends the pod through the plug-in's cleanup
    run = runs.launch([spec("w")], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running", timeout=60)
    pid = int(runs.get_run(run["run_id"])["processes"][0]["job_id"].removeprefix("pod-"))
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    final = wait_status(run["run_id"], "failed", timeout=60)
    assert final["reason"].startswith("supervisor died")
    wait_until(lambda: not pid_alive(pid), 10, what="the watchdog to end the pod")
