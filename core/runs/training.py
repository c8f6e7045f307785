"""The real training run as data (DESIGN §5): model → api → tinker → trainer → env.

   model    (local only) prepare the model folder if missing (dataplane.models); must complete before tinker starts
   api      Atropos run-api on 127.0.0.1:{port:api}; ready when GET /status answers
   tinker   (local only) the in-project Tinker-protocol server; ready when GET /healthz answers
   trainer  needs api + tinker ready; ready when its inference server answers GET /health;
            its clean exit with results.json completes the run
   env      (env-1 … env-N with replicas) starts once run-api is ready (and the model exists),
            overlapping its slow imports with the trainer's start-up; run-api only lets it register
            after the trainer has registered and asked for a batch; ready when run-api's log shows
            it registered; restarted on failure, at most twice; on this machine, or as Slurm
            jobs (config.yaml's `workers:`)

run-api and the trainer's inference server bind the workers' address (127.0.0.1 unless a Slurm run's
`workers.address` says otherwise); the local Tinker server is only the trainer's, on loopback.

Only stdlib here: core never imports the data plane. Secrets are named in
`secret_env`; the supervisor passes their values from its own environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..base.paths import models_dir
from ..base.secrets import ENDPOINT_KEY_ENV, LOCAL_TINKER_KEY_ENV, RUN_KEYS, SECRET_NAMES, get_key
from ..daemons import procscan
from ..daemons.log_watch import REGISTERED
from ..daemons.pipeline import ProcessSpec, Readiness, RestartPolicy
from ..daemons.warm import base as warm_base
from ..envs import verifiers_envs
from ..envs.discovery import EnvInfo, import_root
from .runconfig import CONFIG_FILE, RunConfig
from .workers import LOOPBACK, replica_names

LOCAL_TRAINER_READY_S = 120.0
CLOUD_TRAINER_READY_S = 600.0  # Tinker cloud may queue the model creation
ENV_READY_S = 900.0  # its dataset load and the trainer's start-up come first
CONFIG_PATH = "{run_dir}/" + CONFIG_FILE  # for specs made without a run config: launch() writes the file


def _locked(profile, name: str):
    field = getattr(profile, "locked", {}).get(name)
    return getattr(field, "value", None)


# What each process's start-up imports (seconds of CPU each: torch, transformers, atroposlib): the run's warm
# server imports them once and the processes start as forks of it (daemons.warm.client.WarmStarts). Not the
# entry modules themselves: runpy runs those afresh.
WARM_TINKER_LOCAL = ["torch", "fastapi", "uvicorn", "hermes_rl.dataplane.tinker_local.server"]
WARM_TRAINER = ["tinker", "hermes_rl.dataplane.trainer.loop"]
WARM_ENVIRONMENT = ["atroposlib.envs.base", "hermes_rl.dataplane.wandb_fallback", "hermes_rl.dataplane.compat"]
WARM_RUN_API = ["uvicorn", "atroposlib.api"]
# What an inference test's policy server imports beyond an environment's (core.runs.trial).
WARM_POLICY = ["tinker", "hermes_rl.dataplane.trainer.inference", "hermes_rl.dataplane.trainer.tokenizer"]


def run_env(local: bool) -> dict[str, str]:
    """What every process of a run has in its environment on top of the supervisor's."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_DIR": "{run_dir}",
        "WANDB_SILENT": "true",
    }
    if not get_key("WANDB_API_KEY"):
        # W&B without a key: offline into the run folder (atroposlib's wandb.init would fail).
        env["WANDB_MODE"] = "offline"
    if local:
        # The local profile never reaches a hub: the model and tokenizer are built on this machine.
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    return env


def keep_runs_warm(enabled: bool = True) -> None:
    """For a long-lived client that starts local runs (the dashboard): one warm base that imported what a
    run's processes import, so that each run it starts forks its warm server from it instead of importing
    everything again (daemons.warm.base). The base is this process's child and ends with it (or here,
    disabled); the runs' servers do not."""
    hidden = {*SECRET_NAMES, *RUN_KEYS, procscan.MARKER, procscan.PROCESS_MARKER, procscan.SUPERVISOR_MARKER}
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env.update({k: v for k, v in run_env(local=True).items() if k not in warm_base.RUNTIME_ONLY_ENV})
    preload = [*WARM_TINKER_LOCAL, *WARM_TRAINER, *WARM_ENVIRONMENT, *WARM_RUN_API, *WARM_POLICY]
    warm_base.keep(preload, env, enabled)


def local_model_dir(profile, run_config: RunConfig | None = None) -> str:
    """Where the local model lives: the run config's tinker.base_model, else the profile's, else the default."""
    chosen = ((run_config.get("tinker") or {}).get("base_model") if run_config else None) or _locked(
        profile, "base_model"
    )
    return str(chosen or models_dir() / "tiny-toy")


def training_pipeline(
    run_id: str, profile, env, run_config: RunConfig | None = None, mixed: list | None = None
) -> list[ProcessSpec]:
    """The specs of one run, for its config (build_run_config; without one, the profile's model and
    the run folder's defaults). Ports appear as {port:NAME} placeholders, filled by the supervisor.
    The trainer and the environment are other processes: they read the run's config.yaml. `mixed`:
    the run's other environments, [(process prefix, EnvInfo, its config file, replicas)]."""
    python = sys.executable
    hermes: dict[str, Any] = dict(run_config.get("hermes") or {}) if run_config else {}
    config_path = str(Path(hermes["run_dir"]).resolve() / CONFIG_FILE) if hermes.get("run_dir") else CONFIG_PATH
    backend = getattr(profile, "backend", "local")
    local = backend == "local"
    env_metrics = str(hermes.get("env_metrics_path") or "{run_dir}/env_metrics.jsonl")
    workers: dict[str, Any] = dict(run_config.get("workers") or {}) if run_config else {}
    address = workers.get("address") or LOOPBACK

    common_env = run_env(local)
    # the trainer serves the run's endpoint, which requires ENDPOINT_KEY_ENV of the environments it serves
    secrets = ["WANDB_API_KEY", ENDPOINT_KEY_ENV] + ([LOCAL_TINKER_KEY_ENV] if local else ["TINKER_API_KEY"])

    trainer_deps = [("api", "ready")]
    specs = [_api_spec(python, address, common_env)]
    if local:
        specs += _local_backend_specs(python, local_model_dir(profile, run_config), common_env)
        trainer_deps.append(("tinker", "ready"))
    specs.append(_trainer_spec(python, config_path, common_env, secrets, trainer_deps, address, local))
    groups = [("env", env, config_path, int(workers.get("replicas") or 1)), *(mixed or [])]
    specs += _environment_specs(python, groups, {**common_env, "HERMES_ENV_METRICS": env_metrics}, local, workers)
    return specs


def _api_spec(python: str, address: str, common_env: dict) -> ProcessSpec:
    """Atropos' run-api, on the workers' address."""
    return ProcessSpec(
        name="api",
        argv=[python, "-m", "atroposlib.cli.run_api", "--host", address, "--port", "{port:api}"],
        env=dict(common_env),
        readiness=Readiness(kind="http", url=f"http://{address}:{{port:api}}/status", timeout_s=60.0),
        stop_timeout=5.0,
        port="api",
        status_url=f"http://{address}:{{port:api}}/status",  # queue size and step, recorded in health.json
        warm=WARM_RUN_API,
    )


def _local_backend_specs(python: str, model_dir: str, common_env: dict) -> list[ProcessSpec]:
    """The local backend's processes: the model folder prepared, then the Tinker server over it."""
    specs: list[ProcessSpec] = []
    specs.append(
        ProcessSpec(
            name="model",
            argv=[python, "-m", "hermes_rl.dataplane.models", "--out", model_dir],
            env=dict(common_env),
            required=True,
            stop_timeout=5.0,
        )
    )
    specs.append(
        ProcessSpec(
            name="tinker",
            argv=[
                python,
                "-m",
                "hermes_rl.dataplane.tinker_local",
                "--host",
                "127.0.0.1",
                "--port",
                "{port:tinker}",
                "--model-dir",
                model_dir,
                "--checkpoint-dir",
                "{run_dir}/checkpoints",
            ],
            env=dict(common_env),
            secret_env=[LOCAL_TINKER_KEY_ENV],  # the credential it requires of every client
            depends_on=[("model", "completed")],
            readiness=Readiness(kind="http", url="http://127.0.0.1:{port:tinker}/healthz", timeout_s=120.0),
            stop_timeout=10.0,
            port="tinker",
            warm=WARM_TINKER_LOCAL,
        )
    )
    return specs


def _trainer_spec(
    python: str, config_path: str, common_env: dict, secrets: list[str], deps: list, address: str, local: bool
) -> ProcessSpec:
    """The trainer, which serves the policy on the inference port and completes the run."""
    return ProcessSpec(
        name="trainer",
        argv=[python, "-m", "hermes_rl.dataplane.trainer", "--config", config_path],
        # The SDK's telemetry (a wrapper and an event queue around every call) has no one to go to
        # on the local server.
        env={**common_env, "TINKER_TELEMETRY": "0"} if local else dict(common_env),
        secret_env=secrets,
        depends_on=deps,
        readiness=Readiness(
            kind="http",
            url=f"http://{address}:{{port:inference}}/health",
            timeout_s=LOCAL_TRAINER_READY_S if local else CLOUD_TRAINER_READY_S,
        ),
        completes_run=True,
        completion_file="{run_dir}/results.json",
        warm=WARM_TRAINER,
        stop_timeout=15.0,
        port="inference",
        # completions served to the environments: with no scored group delivered, they were all dropped
        status_url=f"http://{address}:{{port:inference}}/health",
    )


def _environment_specs(python: str, groups: list, env_vars_base: dict, local: bool, workers: dict) -> list[ProcessSpec]:
    """Each environment's workers: [(process prefix, EnvInfo, its config file, replicas)]."""
    specs: list[ProcessSpec] = []
    for prefix, one_env, one_config, replicas in groups:
        env_file = getattr(one_env, "file", None) or str(one_env)
        env_vars = dict(env_vars_base)
        if getattr(one_env, "kind", "atropos") == verifiers_envs.KIND:
            for name in replica_names(replicas, prefix):
                specs.append(_taskset_spec(name, one_env, one_config, env_vars, local, workers))
            continue
        root = import_root(one_env) if isinstance(one_env, EnvInfo) else None
        if root is not None and root.sys_path:
            # The author's import root first, the user's own PYTHONPATH after it; the working folder is the
            # one its relative paths assume (a tinker-atropos checkout's configs/default.yaml).
            env_vars["PYTHONPATH"] = root.pythonpath(os.environ.get("PYTHONPATH"))
        for name in replica_names(replicas, prefix):
            specs.append(_env_spec(name, python, env_file, one_config, root, env_vars, local, workers))
    return specs


def _taskset_spec(name, env: EnvInfo, config_path, env_vars, local, workers) -> ProcessSpec:
    """A verifiers taskset's worker: the bridge (dataplane/verifiers_bridge.py) run by path under the
    taskset's own interpreter, registering with run-api as an Atropos environment does (DESIGN §8)."""
    spec = _env_spec(name, env.python, env.file, config_path, None, env_vars, local, workers)
    spec.argv = [env.python, verifiers_envs.bridge_path(), "serve", "--config", config_path, "--taskset", env.name]
    spec.env = {**env_vars, "PYTHONNOUSERSITE": "1"}
    spec.warm = []  # another interpreter: never a fork of hermes-rl's warm server
    return spec


def _env_spec(name, python, env_file, config_path, root, env_vars, local, workers) -> ProcessSpec:
    """One environment worker: each replica is its own `serve` process registering with run-api."""
    return ProcessSpec(
        name=name,
        # server_type/health_check for the trainer's inference server come from config.yaml's openai list.
        # Through env_launch: a failing wandb.init falls back to offline instead of crash-looping the env.
        argv=[python, "-m", "hermes_rl.dataplane.env_launch", env_file, "serve", "--config", config_path],
        cwd=(root.cwd if root is not None else "") or None,
        env=env_vars,
        secret_env=["WANDB_API_KEY", ENDPOINT_KEY_ENV],  # the key of the run's endpoint, which it samples
        # Started alongside the trainer, not after it: its imports take ~10 s of CPU, and run-api
        # itself holds it back ("wait for trainer to start") until the trainer has registered and
        # asked for its first batch, so it never gets work before the trainer is there.
        depends_on=[("api", "ready")] + ([("model", "completed")] if local else []),
        # Ready once it has registered with run-api (its access log says so): an environment that fails
        # before that, the same way twice, is not restarted again whatever the machine's load.
        readiness=Readiness(kind="log", source="api", pattern=REGISTERED.pattern, timeout_s=ENV_READY_S),
        restart=RestartPolicy(mode="on_failure", max_restarts=2, backoff_s=1.0),
        # BaseEnv.env_manager returns once run-api holds the data for total_steps; the trainer finishes.
        done_on_clean_exit=True,
        # ...unless the trainer still waits for batches once every worker has ended: then the run fails (the
        # supervisor's check_fed), after one restart of a worker that ended cleanly.
        feeds="trainer",
        stop_timeout=10.0,
        launcher=workers.get("launcher") or "local",
        settings=dict(workers.get(workers.get("launcher") or "local") or {}),
        warm=WARM_ENVIRONMENT,
    )
