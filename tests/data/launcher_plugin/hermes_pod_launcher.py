"""A fourth launcher published by a package of its own (tests/test_launcher_plugins.py installs it into a
temporary site folder with a dist-info whose entry_points.txt names it under `hermes_rl.launchers`).
It runs each process as a "pod": a session of its own on this machine, recorded as a job (id, node,
state) as a launcher to another machine would. It uses only hermes-rl's public launcher API."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
from collections.abc import Mapping

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.daemons.launchers import command_field, job_record


@dataclasses.dataclass
class PodSettings:
    label: str = "default"
    entrypoint: list[str] = command_field(factory=list)  # a command: from the site's file only


class Pod:
    launcher = "pod"
    pid = pgid = create_time = start_ticks = None
    kill_grace_s = 5.0

    def __init__(self, popen: subprocess.Popen, label: str):
        self.popen = popen
        self.job_id = f"pod-{popen.pid}"
        self.node = f"{socket.gethostname()}/{label}"
        self.state = "RUNNING"

    @property
    def returncode(self):
        return self.popen.returncode

    def poll(self):
        code = self.popen.poll()
        if code is not None and self.state == "RUNNING":
            self.state = "EXITED"
        return code

    def leftovers(self) -> bool:
        return self.poll() is None

    def what(self) -> str:
        return f"pod {self.job_id} on {self.node}"

    def terminate(self) -> None:
        if self.poll() is None:
            self.state = "DELETED"
            os.killpg(self.popen.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)

    def watchdog_line(self) -> str:
        return f"job pod {self.popen.pid}"

    def record(self) -> dict:
        return {"launcher": "pod", "job": job_record("pod", self.job_id, self.node, self.state)}

    def stop_words(self, code: int) -> str:
        return f"pod {self.job_id} deleted"

    def change_words(self) -> str:
        return f"pod {self.job_id} {self.state}"


class PodLauncher:
    name = "pod"
    settings_class = PodSettings
    site_file = "pods.yaml"
    remote = False

    def settings(self, data: Mapping | None) -> PodSettings:
        try:
            return PodSettings(**dict(data or {}))
        except TypeError as exc:
            raise BadInput(f"pod settings: {exc}") from None

    def site_settings(self) -> dict:
        return {"entrypoint": []}

    def preflight(self, settings: Mapping, *, replicas: int = 1) -> None:
        if self.settings(settings).label == "refused":
            raise BadInput("no pod can run with label 'refused'")

    def tracker(self, run_id, run_dir):
        return None

    def start(self, name, argv, *, cwd, env, log_fd, log, settings, tracker, warm=None) -> Pod:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return Pod(popen, self.settings(settings).label)

    def cleanup(self, run_id: str, job_ids: list[str]):
        for job_id in job_ids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(job_id.removeprefix("pod-")), signal.SIGKILL)
        return list(job_ids), []

    def where(self, job: Mapping) -> str:
        return " ".join(str(p) for p in (job.get("node"), job.get("state")) if p)

    def job_running(self, job: Mapping) -> bool:
        return job.get("state") == "RUNNING"

    def view_fields(self, job: Mapping) -> dict:
        return {}
