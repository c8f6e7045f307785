"""The only door from the dashboard into `core`: every call the app makes, imported lazily.

Calls that may be slow (config_init subprocesses, starting/stopping runs, psutil sampling) are made
from workers, never from the UI thread. A module another part of the project has not delivered yet
gives a clear HermesError instead of an ImportError.
"""

from __future__ import annotations

import importlib

from hermes_rl.core.base.errors import HermesError


_MODULES = {
    "runs": "hermes_rl.core.runs",
    "discovery": "hermes_rl.core.envs.discovery",
    "config": "hermes_rl.core.envs.config",
    "profiles": "hermes_rl.core.envs.profiles",
    "inference_test": "hermes_rl.core.runs.inference_test",
}


def _core(name: str):
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError as exc:
        raise HermesError(f"{_MODULES[name]} is not available ({exc})", hint="update hermes-rl") from exc


def available(name: str) -> bool:
    try:
        _core(name)
        return True
    except HermesError:
        return False


# -- runs ---------------------------------------------------------------------------------
def list_runs(stall_after_s: float | None = None) -> list[dict]:
    return _core("runs").list_runs(stall_after_s=stall_after_s)


def get_run(run_id: str, *, sample: bool = True, stall_after_s: float | None = None) -> dict:
    return _core("runs").get_run(run_id, sample=sample, stall_after_s=stall_after_s)


def stall_threshold(seconds: float | None = None) -> float:
    return _core("runs").stall_threshold(seconds)


def start_run(env_name: str | None, profile: str | None, overrides: dict | None = None) -> dict:
    return _core("runs").start_run(env_name, profile, overrides)


def stop_run(run_id: str, wait: float = 15.0) -> dict:
    return _core("runs").stop_run(run_id, wait=wait)


def restart_process(run_id: str, name: str, wait: float = 30.0) -> dict:
    return _core("runs").restart_process(run_id, name, wait=wait)


# -- environments and config ------------------------------------------------------------------
def discover_environments() -> list:
    return _core("discovery").discover_environments()


def environment_dirs() -> list:
    try:
        return _core("discovery").environment_dirs()
    except HermesError:
        return []


def get_config(env_name: str | None, profile: str | None = None):
    return _core("config").get_config(env_name, profile)


def set_fields(assignments: dict, env_name: str | None, profile: str | None = None) -> dict:
    return _core("config").set_fields(assignments, env_name, profile)


def reset_draft(env_name: str) -> None:
    _core("config").reset_draft(env_name)


def select_environment(name: str, profile: str | None = None) -> dict:
    return _core("config").select_environment(name, profile)


def current_selection() -> dict:
    try:
        return _core("config").current_selection()
    except HermesError:
        return {"environment": None, "profile": None}


def resolve_profile(name: str | None):
    return _core("profiles").resolve_profile(name)


# -- keys and inference ---------------------------------------------------------------------
def keys_present() -> dict[str, bool]:
    from hermes_rl.core.base.secrets import keys_present as present

    return present()


def prepare_inference_test(env_name: str | None, num_steps: int, group_size: int, models=None, base_url=None):
    """An InferenceTest ready to run (its .events() yields started/model_started/progress/model_result/summary)."""
    return _core("inference_test").InferenceTest.prepare(num_steps, group_size, models, base_url, env_name=env_name)


def validate_field(row: dict, raw: object) -> object:
    """Coerce and range-check one editable field's value without saving (BadInput says what is wrong)."""
    from dataclasses import fields as dataclass_fields

    config = _core("config")
    names = {f.name for f in dataclass_fields(config.FieldInfo)}
    info = config.FieldInfo(**{k: v for k, v in row.items() if k in names})
    return config.validate_value(info, raw)
