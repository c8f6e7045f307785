"""The SkyPilot launcher's driver, run by path under the interpreter that has SkyPilot (`sky_python`; it
imports SkyPilot and the standard library only, never hermes-rl, which that environment lacks).

    skypilot_driver.py run TASK_FILE CLUSTER STATE_FILE [SECRET_NAME…]   one worker, to its end
    skypilot_driver.py down RUN_ID [CLUSTER…]                            tear a run's clusters down
    skypilot_driver.py check [INFRA]                                      SkyPilot can launch there

`run` loads the task with SkyPilot's own loader (`sky.Task.from_yaml_config`), gives the named secrets
their values from its environment (as `sky launch --secret NAME` does: never in the task's file),
launches the cluster through SkyPilot's SDK (`sky.launch`, down=True: torn down once the job ends),
follows the job's log to its stdout (the run's process log) and exits with the job's outcome. Its state
(LAUNCHING, RUNNING, SUCCEEDED, FAILED, CANCELLED; the infra chosen) goes to STATE_FILE for the
launcher's tracker. On SIGTERM it cancels the job and tears the cluster down.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from typing import Any

sky: Any = None  # SkyPilot and its SDK, imported by main(): they exist in SkyPilot's environment only
sdk: Any = None

STOPPED_CODE = 128 + signal.SIGTERM


class Stop(Exception):
    """SIGTERM: the supervisor stops this worker."""


def _on_term(_signum, _frame):
    raise Stop


def write_state(path: str, **fields) -> None:
    data = {"driver_pid": os.getpid(), **fields}
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a link planted there is removed, never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def infra_of(handle) -> str | None:
    """Where the cluster runs, as SkyPilot names infra ("k8s/ctx", "aws/us-east-1")."""
    resources = getattr(handle, "launched_resources", None)
    infra = getattr(resources, "infra", None)
    text = infra.to_str() if infra is not None else None
    return text or (str(resources) if resources is not None else None)


def _status_name(status) -> str:
    return str(getattr(status, "value", status) or "UNKNOWN")


def run(task_file: str, cluster: str, state_file: str, secret_names: list[str]) -> int:
    with open(task_file, encoding="utf-8") as handle:
        config = json.load(handle)
    secrets = [(name, os.environ[name]) for name in secret_names if name in os.environ]
    task = sky.Task.from_yaml_config(config, secrets_overrides=secrets or None)
    job_id = None
    infra = None
    signal.signal(signal.SIGTERM, _on_term)
    try:
        write_state(state_file, state="LAUNCHING")
        job_id, handle = sdk.stream_and_get(sdk.launch(task, cluster_name=cluster, down=True))
        infra = infra_of(handle)
        write_state(state_file, state="RUNNING", job=job_id, infra=infra)
        sdk.tail_logs(cluster, job_id, follow=True)
        statuses = sdk.get(sdk.job_status(cluster, [job_id])) or {}
        state = _status_name(statuses.get(job_id) or statuses.get(str(job_id)))
        write_state(state_file, state=state, job=job_id, infra=infra)
        return 0 if state == "SUCCEEDED" else 1
    except Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop: the teardown below is not interrupted
        write_state(state_file, state="CANCELLING", job=job_id, infra=infra)
        if job_id is not None:
            try:
                sdk.get(sdk.cancel(cluster, job_ids=[job_id]))
            except Exception as exc:  # noqa: BLE001 - the cluster is torn down below anyway
                print(f"SkyPilot: cancelling job {job_id} on {cluster}: {exc}", flush=True)
        sdk.get(sdk.down(cluster))
        write_state(state_file, state="CANCELLED", job=job_id, infra=infra)
        return STOPPED_CODE
    except Exception as exc:  # noqa: BLE001 - SkyPilot's refusal, in its words, is the worker's last line
        print(f"SkyPilot: {type(exc).__name__}: {exc}", flush=True)
        write_state(state_file, state="FAILED", job=job_id, infra=infra, message=str(exc)[:300])
        try:
            sdk.get(sdk.down(cluster))
        except Exception:  # noqa: BLE001 - nothing was provisioned
            pass
        return 1


def down(run_id: str, clusters: list[str]) -> int:
    """Tear down the clusters named and every cluster SkyPilot lists for the run; prints {down, left}."""
    prefix = f"hermes-{run_id}-".lower()
    names = list(dict.fromkeys(clusters))
    try:
        for record in sdk.get(sdk.status()) or []:
            name = record.get("name") if isinstance(record, dict) else getattr(record, "name", None)
            if isinstance(name, str) and name.startswith(prefix) and name not in names:
                names.append(name)
    except Exception as exc:  # noqa: BLE001 - the named ones are still torn down
        print(f"SkyPilot: listing clusters: {exc}", file=sys.stderr)
    done, left = [], []
    for name in names:
        try:
            sdk.get(sdk.down(name))
            done.append(name)
        except Exception as exc:  # noqa: BLE001 - one cluster's failure does not keep the others up
            if "does not exist" in str(exc):
                done.append(name)
            else:
                print(f"SkyPilot: down {name}: {exc}", file=sys.stderr)
                left.append(name)
    print(json.dumps({"down": done, "left": left}))
    return 0 if not left else 1


def check(infra: str) -> int:
    """0 when SkyPilot has enabled infra (where `infra` asks, when given); else 1 with the reason."""
    enabled = [str(c).lower() for c in sdk.get(sdk.enabled_clouds()) or []]
    if not enabled:
        print("no infra is enabled in SkyPilot (`sky check` says why)")
        return 1
    wanted = infra.split("/")[0].lower() if infra else ""
    aliases = {"k8s": "kubernetes"}
    wanted = aliases.get(wanted, wanted)
    if wanted and not any(c == wanted or c.startswith(wanted) for c in enabled):
        print(f"{infra} is not enabled in SkyPilot; enabled: {', '.join(enabled)}")
        return 1
    print(f"enabled: {', '.join(enabled)}")
    return 0


def main(argv: list[str]) -> int:
    global sky, sdk
    import sky as skypilot  # type: ignore[import-not-found]  # SkyPilot's environment, not hermes-rl's
    from sky.client import sdk as client  # type: ignore[import-not-found]  # its SDK (the API server's client)

    sky, sdk = skypilot, client
    if len(argv) >= 4 and argv[0] == "run":
        return run(argv[1], argv[2], argv[3], argv[4:])
    if len(argv) >= 2 and argv[0] == "down":
        return down(argv[1], argv[2:])
    if len(argv) in (1, 2) and argv[0] == "check":
        return check(argv[1] if len(argv) == 2 else "")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
