"""A stand-in for the part of SkyPilot that needs a cloud, for tests/test_skypilot.py: run under SkyPilot's
own interpreter, before the launcher's driver (`python -m hermes_sky_standin DRIVER ARGS…`). It replaces
the SDK calls that go to SkyPilot's API server and from there to a cloud (launch, logs, job status,
cancel, down, status, enabled infra) with a "cloud" that is this machine: a cluster is a record in
$HERMES_SKY_STANDIN_DIR, its setup and run are the real Task's `setup` and `run` run by bash, in an
environment holding only PATH and the Task's own envs and secrets (SkyPilot's envs_and_secrets). The
Task itself is SkyPilot's: the driver loads it with `sky.Task.from_yaml_config`."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

from sky import task as task_lib
from sky.client import sdk

ROOT = Path(os.environ["HERMES_SKY_STANDIN_DIR"])
ENABLED = os.environ.get("HERMES_SKY_STANDIN_INFRA", "kubernetes").split(",")
_jobs: dict[str, subprocess.Popen] = {}


def _record(cluster: str) -> Path:
    return ROOT / f"{cluster}.json"


def _read(cluster: str) -> dict | None:
    try:
        return json.loads(_record(cluster).read_text())
    except (OSError, ValueError):
        return None


def _write(cluster: str, data: dict) -> None:
    tmp = _record(cluster).with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, _record(cluster))


def launch(task, cluster_name=None, down=False, **_kw):
    for src in (task.file_mounts or {}).values():
        if not os.path.exists(src):
            raise FileNotFoundError(f"file_mounts source {src} does not exist")
    (resources,) = list(task.resources)
    infra = resources.infra.to_str() or "kubernetes"
    parsed = {"infra": infra, "cpus": resources.cpus, "setup": task.setup, "run": task.run, "envs": task.envs}
    parsed["secrets"] = sorted(task.secrets)  # names only: what SkyPilot holds as secrets, not envs
    (ROOT / f"{cluster_name}.task").write_text(json.dumps(parsed))  # the task as SkyPilot's loader read it
    env = {"PATH": os.environ["PATH"], **task_lib.get_plaintext_envs_and_secrets(task.envs_and_secrets)}
    if task.setup:
        subprocess.run(["bash", "-c", task.setup], env=env, check=True, stdin=subprocess.DEVNULL)
    log = ROOT / f"{cluster_name}.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(
            ["bash", "-c", task.run], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    _jobs[cluster_name] = job
    _write(cluster_name, {"name": cluster_name, "infra": infra, "pid": job.pid, "status": "RUNNING", "down": down})
    handle = type("Handle", (), {"launched_resources": resources})()
    return ("launched", (1, handle))


def stream_and_get(request_id):
    return request_id[1]


def get(request_id):
    return request_id[1] if isinstance(request_id, tuple) else request_id


def tail_logs(cluster_name, job_id, follow=True, **_kw):
    job = _jobs[cluster_name]
    with open(ROOT / f"{cluster_name}.log", "rb") as log:
        while True:
            chunk = log.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif job.poll() is not None:
                break
            else:
                time.sleep(0.1)
    record = _read(cluster_name) or {}
    _write(cluster_name, {**record, "status": "SUCCEEDED" if job.returncode == 0 else "FAILED"})
    if record.get("down"):
        _record(cluster_name).unlink(missing_ok=True)  # down=True: torn down once its job ended
    return job.returncode


def job_status(cluster_name, job_ids=None):
    record = _read(cluster_name) or {}
    status = record.get("status") or ("SUCCEEDED" if _jobs[cluster_name].returncode == 0 else "FAILED")
    return ("job_status", {1: status})


def _end(cluster_name) -> None:
    record = _read(cluster_name)
    if record is None:
        raise ValueError(f"Cluster {cluster_name!r} does not exist.")
    try:
        os.killpg(record["pid"], signal.SIGKILL)
    except ProcessLookupError:
        pass


def cancel(cluster_name, job_ids=None, **_kw):
    _end(cluster_name)
    return ("cancel", None)


def down(cluster_name, **_kw):
    _end(cluster_name)
    _record(cluster_name).unlink(missing_ok=True)
    return ("down", None)


def status(cluster_names=None, **_kw):
    return ("status", [json.loads(p.read_text()) for p in ROOT.glob("*.json")])


def enabled_clouds(**_kw):
    return ("enabled_clouds", ENABLED)


# only calls SkyPilot's SDK has: a call it lacks stays missing, as the driver would find it
for _name in (
    "launch",
    "stream_and_get",
    "get",
    "tail_logs",
    "job_status",
    "cancel",
    "down",
    "status",
    "enabled_clouds",
):
    assert callable(getattr(sdk, _name)), _name
    setattr(sdk, _name, globals()[_name])

if __name__ == "__main__":
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
