"""Probing an environment's config_init(): the editable fields it declares, as JSON.

config_init() runs the environment's code (and atroposlib: seconds), so it is evaluated in a
subprocess (core.envs.probe_child) with a timeout, and cached by the files' (mtime, size) in memory
and on disk: a broken or slow environment never hangs a client, and the second call costs no import.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

from ..base.envvar_limits import env_number
from ..base.errors import BadInput, HermesError
from ..base.failures import describe_failure, exception_line, failure_hint
from ..base.fsutil import atomic_write_text, file_lock, read_regular_text
from ..base.paths import probe_cache_dir, rl_dir
from ..base.secrets import SECRET_NAMES, redact
from ..daemons.spawn import run_bounded
from ..daemons.warm.base import packages_stamp
from ..daemons.warm.client import ColdStartNeeded, ForkServer
from . import verifiers_envs
from .discovery import EnvInfo, ImportRoot, discover_environments, import_root

PROBE_TIMEOUT_ENV = "HERMES_RL_PROBE_TIMEOUT"
PROBE_TIMEOUT_S = 60.0  # importing atroposlib alone takes seconds on a busy machine
PROBE_VERSION = 3  # bump when the probe's output changes, to invalidate disk caches (3: `validated`)
REFRESH_HINT = "the probe's result is cached until the files or installed packages change; --refresh probes again"

PROBE_MODULE = "hermes_rl.core.envs.probe_child"
# What every environment's module imports first: preloaded once by a warm probe server (keep_warm).
WARM_PRELOAD = ["atroposlib.envs.base"]
_warm_server: ForkServer | None = None
_probe_lock = threading.Lock()
_probe_memo: dict[tuple[str, str], tuple[tuple, dict | None, str | None, float]] = {}
_probe_running: dict[tuple[str, str], threading.Lock] = {}


def _signature(env: EnvInfo) -> tuple:
    """What a probe result depends on: the files, the import root folder, and the installed packages
    (site-packages changes when one is installed, so a probe that failed on a missing one runs again)."""
    parts = []
    root = import_root(env).root
    for path in (env.file, *env.base_files, *([root] if root else []), sysconfig.get_paths()["purelib"]):
        try:
            st = os.stat(path)
            parts.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            parts.append((path, 0, -1))
    return (PROBE_VERSION, sys.version_info[:3], env.class_name, tuple(parts))


def _cache_path(env: EnvInfo) -> Path:
    digest = hashlib.sha256(f"{env.file}\0{env.class_name}".encode()).hexdigest()[:24]
    return probe_cache_dir() / f"probe-{digest}.json"


def _probe_timeout() -> float:
    return env_number(PROBE_TIMEOUT_ENV, PROBE_TIMEOUT_S, minimum=1.0, maximum=3600)


def _probe_env(root: ImportRoot | None = None) -> dict:
    """The child's environment: no secrets (config_init must not need them), no hub access."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
    if root is not None and root.sys_path:
        env["PYTHONPATH"] = root.pythonpath(env.get("PYTHONPATH"))
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def keep_warm(enabled: bool = True) -> None:
    """For a long-lived client (the dashboard, the MCP server, the agent plugin): probe in forks of one
    process that has imported atroposlib already, so each probe after the first costs a fork, not the
    seconds of a fresh import. The server is this process's child and ends with it (or here, disabled)."""
    global _warm_server
    with _probe_lock:
        if enabled and _warm_server is None:
            _warm_server = ForkServer(WARM_PRELOAD, _probe_env())
        elif not enabled and _warm_server is not None:
            _warm_server.close()
            _warm_server = None


def _run_child(env: EnvInfo, args: list[str]) -> tuple[Any, Any, str]:
    """core.envs.probe_child with `args` (in a fork of the warm server when keep_warm is on and the
    environment allows it): (its JSON answer or None, the finished child, its stderr); BadInput naming the
    file when it cannot start or does not finish in time."""
    timeout = _probe_timeout()
    where = f"environment {env.id or env.name!r} ({env.file})"
    root = import_root(env)  # the same import root and working folder as the run's env process
    cwd = root.cwd or str(Path(env.file).parent)
    child_env = _probe_env(root)
    result = None
    server = _warm_server
    if server is not None:
        try:
            result = server.run(
                PROBE_MODULE, args, timeout, env=child_env, cwd=cwd, stamp=packages_stamp(), folders=list(root.sys_path)
            )
        except ColdStartNeeded:
            result = None
    try:
        if result is None:
            result = run_bounded([sys.executable, "-m", PROBE_MODULE, *args], timeout, cwd=cwd, env=child_env)
    except OSError as exc:
        raise BadInput(f"cannot start the config probe for {where}: {exc.strerror}") from exc
    if result.timed_out:
        raise BadInput(
            f"{where}: config_init() did not finish within {timeout:g} s",
            hint=f"the module or config_init is too slow or hangs; raise {PROBE_TIMEOUT_ENV} if it is just slow",
        )
    text = redact(result.stdout.decode("utf-8", errors="replace"))
    errors = redact(result.stderr.decode("utf-8", errors="replace"))
    payload = None
    for line in reversed(text.splitlines()):
        try:
            payload = json.loads(line)
            break
        except ValueError:
            continue
    return payload, result, errors


_checked_values: dict[tuple, str | None] = {}  # (signature, values) -> the refusal (None: accepted)


def check_values(env: EnvInfo, values: dict) -> None:
    """BadInput naming the field when the environment's own config class refuses `values` (the values a
    draft edit or a start would use): its validators ask what it uses (a reasoning-gym task name and its
    generator's parameters, with "did you mean"), before anything starts rather than in the run's env
    process a minute later. Asked only when a value differs from config_init's and the config class
    validates it (the probe says which fields it does): other environments pay nothing."""
    if env.kind == verifiers_envs.KIND:
        return
    probed = probe_config(env)
    defaults = {row["name"]: row.get("default") for row in probed["fields"] if isinstance(row, dict)}
    given = {k: v for k, v in values.items() if k in defaults and v != defaults[k]}
    validated = set(probed.get("validated") or ())
    if not given or not (probed.get("model_validated") or validated & set(given)):
        return
    key = (_signature(env), json.dumps(given, sort_keys=True, default=str))
    if key not in _checked_values:
        known, refusal = _stored_check(env, key)
        if not known:
            payload, _result, _errors = _run_child(env, ["--check", env.file, env.class_name, key[1]])
            if not isinstance(payload, dict) or payload.get("crashed"):
                return  # the module itself fails: the probe and the start say so in their own words
            if payload.get("ok") is not True:
                field = payload.get("field")
                refusal = (f"{field}: " if field else "") + str(payload.get("error") or "refused")[:1000]
            _store_check(env, key, refusal)
        _checked_values[key] = refusal
    refusal = _checked_values[key]
    if refusal:
        raise BadInput(
            f"environment {env.name} refuses its settings: {refusal}"[:600],
            hint="fix the value with `hermes-rl config --set FIELD=VALUE` (its own config class checks it)",
        )


def _check_path(env: EnvInfo, key: tuple) -> Path:
    digest = hashlib.sha256(json.dumps([env.file, env.class_name, list(map(str, key))]).encode()).hexdigest()[:32]
    return probe_cache_dir() / f"check-{digest}.json"


def _stored_check(env: EnvInfo, key: tuple) -> tuple[bool, str | None]:
    """(whether a check of these values for these files is on disk, its refusal): the next start or
    process does not import the environment again for the same values."""
    try:
        stored = json.loads(read_regular_text(_check_path(env, key), follow=False))
    except (OSError, ValueError):
        return False, None
    refusal = stored.get("refusal") if isinstance(stored, dict) else None
    if not isinstance(stored, dict) or stored.get("key") != key[1] or not isinstance(refusal, (str, type(None))):
        return False, None
    return True, refusal


def _store_check(env: EnvInfo, key: tuple, refusal: str | None) -> None:
    with contextlib.suppress(Exception):  # a cache: a read-only home checks again next time
        atomic_write_text(_check_path(env, key), json.dumps({"key": key[1], "refusal": refusal}) + "\n")


def _run_probe(env: EnvInfo) -> dict:
    """Run core.envs.probe_child for the environment's fields; BadInput naming the file on a crash, a
    timeout or bad output."""
    where = f"environment {env.id or env.name!r} ({env.file})"
    payload, result, errors = _run_child(env, [env.file, env.class_name])
    if isinstance(payload, dict) and payload.get("ok") is True and isinstance(payload.get("fields"), list):
        return payload
    if isinstance(payload, dict) and payload.get("error"):
        detail = str(payload["error"])
        hint = failure_hint(exception_line(detail))
        detail += f" ({hint})" if hint else ""
    else:
        code = result.returncode if result.returncode is not None else -9
        status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        line = describe_failure(errors) or _last_line(errors)
        detail = f"the probe crashed ({status})" + (f": {line}" if line else "")
    raise BadInput(
        f"{where}: config_init() failed: {detail}",
        hint=f"see the traceback with: python -m hermes_rl.core.envs.probe_child {env.file} {env.class_name}",
    )


def _cached(env: EnvInfo, signature: tuple) -> dict | None:
    """A probe result still valid for these files, from memory, else disk (then remembered); a recent
    failure raises again at once instead of re-running a slow or broken probe."""
    key = (env.file, env.class_name)
    with _probe_lock:
        memo = _probe_memo.get(key)
    if memo and memo[0] == signature:
        if memo[1] is not None:
            return memo[1]
        raise BadInput(memo[2] or "config probe failed", hint=REFRESH_HINT)
    try:
        cached = json.loads(read_regular_text(_cache_path(env), follow=False))  # a cache: never through a link
        if cached.get("signature") == json.loads(json.dumps(signature)):
            if _valid_result(cached.get("result")):
                with _probe_lock:
                    _probe_memo[key] = (signature, cached["result"], None, time.monotonic())
                return cached["result"]
            if isinstance(cached.get("error"), str):  # a failure another process probed: not again
                with _probe_lock:
                    _probe_memo[key] = (signature, None, cached["error"], time.monotonic())
                raise BadInput(cached["error"], hint=REFRESH_HINT)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _valid_result(result: object) -> bool:
    """A probe result read back from disk, checked like run state: its fields a list of named rows."""
    if not isinstance(result, dict) or result.get("ok") is not True or not isinstance(result.get("fields"), list):
        return False
    return all(isinstance(row, dict) and isinstance(row.get("name"), str) for row in result["fields"])


def _remember(env: EnvInfo, signature: tuple, result: dict | None, error: str | None = None) -> None:
    with _probe_lock:
        _probe_memo[(env.file, env.class_name)] = (signature, result, error, time.monotonic())
    record: dict[str, Any] = {"signature": signature}
    if result is not None:
        record["result"] = result
    else:
        record["error"] = error or "config probe failed"
    try:
        atomic_write_text(_cache_path(env), json.dumps(record) + "\n")
    except Exception:
        pass  # the cache is an optimisation; a read-only home still works


def _check_probeable(env: EnvInfo) -> None:
    if env.error:
        raise BadInput(f"environment {env.name!r} cannot be used: {env.file}: {env.error}")
    if not env.class_name:
        raise BadInput(f"environment {env.name!r} has no class to probe")


def probe_config(env: EnvInfo, refresh: bool = False) -> dict:
    """The probe result for an environment, from memory, then disk, then a subprocess (`refresh`: always).
    A verifiers taskset's fields come from its interpreter's cached listing (core.envs.verifiers_envs)."""
    if env.kind == verifiers_envs.KIND:
        if refresh:
            verifiers_envs.clear_cache(env.python)
        return verifiers_envs.probe_payload(env)
    _check_probeable(env)
    if refresh:
        clear_probe_cache(env, disk=True)
    signature = _signature(env)
    cached = _cached(env, signature)
    if cached is not None:
        return cached
    with _probe_lock:
        running = _probe_running.setdefault((env.file, env.class_name), threading.Lock())
    # Two threads of one client (dashboard workers) share one probe, and so do many client processes
    # that miss the cache at once (the CLI, agent tools and the dashboard together): one probes, the
    # others wait for its result on disk instead of starting their own slow probes on a small machine.
    with running, _probe_file_lock(env):
        cached = _cached(env, signature)
        if cached is not None:
            return cached
        try:
            result = _run_probe(env)
        except BadInput as exc:
            _remember(env, signature, None, exc.message)
            raise
        _remember(env, signature, result)
        return result


@contextlib.contextmanager
def _probe_file_lock(env: EnvInfo):
    """The cross-process probe lock; without a writable home (no lock file) each process probes alone."""
    try:
        lock = file_lock(_cache_path(env))
        lock.__enter__()
    except HermesError:
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def warm_config_cache(envs: list[EnvInfo] | None = None) -> dict[str, str]:
    """Probe every environment not cached yet in ONE subprocess, so atroposlib is imported once for all
    (a dashboard or `hermes-rl envs` can call it in the background). Returns {name: "cached" | "probed" |
    "error: ..."}. Failures here are not remembered: the next get_config probes that environment alone."""
    status: dict[str, str] = {}
    todo: list[tuple[EnvInfo, tuple]] = []
    for env in discover_environments() if envs is None else envs:
        if env.kind == verifiers_envs.KIND:
            continue  # listed with its fields already
        try:
            _check_probeable(env)
            signature = _signature(env)
            if _cached(env, signature) is not None:
                status[env.name] = "cached"
                continue
        except BadInput as exc:
            status[env.name] = f"error: {exc.message}"
            continue
        todo.append((env, signature))
    if not todo:
        return status
    pairs = [[env.file, env.class_name] for env, _ in todo]
    # What finished before the deadline still counts.
    out = run_bounded(
        [sys.executable, "-m", PROBE_MODULE, "--batch", json.dumps(pairs)],
        _probe_timeout() + 5 * len(todo),
        cwd=str(rl_dir()) if rl_dir().is_dir() else None,
        env=_probe_env(),
    ).stdout
    results = {}
    for line in redact(out.decode("utf-8", errors="replace")).splitlines():
        try:
            payload = json.loads(line)
        except ValueError:
            continue
        if isinstance(payload, dict):
            results[(payload.get("file"), payload.get("class_name"))] = payload
    for env, signature in todo:
        payload = results.get((env.file, env.class_name))
        if payload and payload.get("ok") is True and isinstance(payload.get("fields"), list):
            _remember(env, signature, payload)
            status[env.name] = "probed"
        else:
            status[env.name] = "error: " + str((payload or {}).get("error") or "the probe did not finish")
    return status


def clear_probe_cache(env: EnvInfo | None = None, disk: bool = False) -> None:
    """Forget probe results in memory (one environment's, or all), and on disk too if asked."""
    if env is not None and env.kind == verifiers_envs.KIND:
        verifiers_envs.clear_cache(env.python if disk else None)  # its interpreter is asked again
        return
    with _probe_lock:
        _checked_values.clear()
        if env is None:
            _probe_memo.clear()
        else:
            _probe_memo.pop((env.file, env.class_name), None)
    if disk and env is not None:
        try:
            _cache_path(env).unlink()
        except OSError:
            pass
    elif disk:
        for path in [*probe_cache_dir().glob("probe-*.json"), *probe_cache_dir().glob("check-*.json")]:
            try:
                path.unlink()
            except OSError:
                pass
