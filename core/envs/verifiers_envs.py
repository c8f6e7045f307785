"""verifiers v1 tasksets, found in the interpreters that hold them (DESIGN §"verifiers tasksets").

verifiers 0.4 cannot share hermes-rl's venv beside Hermes Agent (it needs openai>=2.54 and mcp 2), so its
tasksets live in interpreters of their own: every entry of $HERMES_RL_ENV_PYTHON (several joined with
os.pathsep), and this interpreter when verifiers is importable here. Each is asked once, in a child
(dataplane/verifiers_bridge.py `list`, run by path under that interpreter: it imports verifiers, which takes
seconds), for its installed tasksets with their config fields; the answer is cached on disk until that
interpreter's site-packages change, so a listing costs a few stats.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
import threading
import time
from pathlib import Path

from ..base.envvar_limits import env_number
from ..base.errors import BadInput
from ..base.fsutil import atomic_write_text, read_regular_text
from ..base.paths import PROJECT_ROOT, probe_cache_dir
from ..base.secrets import SECRET_NAMES, redact
from ..daemons.spawn import run_bounded
from . import envsettings
from .envinfo import EnvInfo

ENV_PYTHON_VAR = "HERMES_RL_ENV_PYTHON"
BRIDGE = PROJECT_ROOT / "dataplane" / "verifiers_bridge.py"
LIST_TIMEOUT_VAR = "HERMES_RL_VERIFIERS_LIST_TIMEOUT"
LIST_TIMEOUT_S = 180.0  # importing verifiers and every taskset package on a busy 2-core machine
CACHE_VERSION = 2  # 2: verifiers runs the episodes (the listing gained seats and the Env's own fields)
FAILURE_MEMO_S = 60.0  # a listing that failed is asked again after this long
KIND = "verifiers"

_lock = threading.Lock()
_memo: dict[str, tuple[tuple, dict]] = {}  # interpreter -> (signature, listing)


def bridge_path() -> str:
    return str(BRIDGE)


def interpreters() -> tuple[list[str], list[str]]:
    """(interpreters to ask, notices about entries that are not interpreters)."""
    out: list[str] = []
    notices: list[str] = []
    parts, where = envsettings.entries("pythons")  # $HERMES_RL_ENV_PYTHON, else rl/envs.yaml
    for part in parts:
        path = os.path.abspath(os.path.expanduser(part))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            notices.append(f"{where}: {part} is not an executable Python interpreter")
            continue
        out.append(path)
    own = os.path.abspath(sys.executable)
    if own not in out and importlib.util.find_spec("verifiers") is not None:
        out.insert(0, own)
    return list(dict.fromkeys(out)), notices


def _site_dirs(python: str) -> list[str]:
    """Where an interpreter's packages are installed: a venv's lib/python3.*/site-packages (this
    interpreter's own purelib), whose mtime changes when a package is installed or removed."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return [sysconfig.get_paths()["purelib"]]
    prefix = Path(python).parent.parent
    return sorted(str(p) for p in prefix.glob("lib/python3*/site-packages")) or [str(prefix)]


def _signature(python: str) -> tuple:
    parts = []
    for path in (python, str(BRIDGE), *_site_dirs(python)):
        try:
            st = os.stat(path)
            parts.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            parts.append((path, 0, -1))
    return (CACHE_VERSION, tuple(parts))


def _cache_path(python: str) -> Path:
    return probe_cache_dir() / f"verifiers-{hashlib.sha256(python.encode()).hexdigest()[:24]}.json"


def _ask(python: str) -> dict:
    """The interpreter's listing, from the bridge; {"ok": False, "error"} when it cannot say."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)  # hermes-rl's own paths would shadow the interpreter's packages
    timeout = env_number(LIST_TIMEOUT_VAR, LIST_TIMEOUT_S, minimum=1.0, maximum=3600)
    try:
        result = run_bounded([python, str(BRIDGE), "list"], timeout, env=env, cwd=str(probe_cache_dir().parent))
    except OSError as exc:
        return {"ok": False, "error": f"cannot run {python}: {exc.strerror or exc}"}
    if result.timed_out:
        return {"ok": False, "error": f"listing its tasksets took over {timeout:g} s (raise {LIST_TIMEOUT_VAR})"}
    for line in reversed(redact(result.stdout.decode("utf-8", "replace")).splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("ok") is True and isinstance(data.get("tasksets"), list):
            return data
    errors = [x for x in redact(result.stderr.decode("utf-8", "replace")).splitlines() if x.strip()]
    return {"ok": False, "error": f"its taskset listing failed: {errors[-1][:300] if errors else 'no output'}"}


def listing(python: str) -> dict:
    """One interpreter's tasksets: from memory, then the disk cache, then the bridge."""
    signature = _signature(python)
    with _lock:
        memo = _memo.get(python)
        if memo and memo[0] in (signature, (*signature, time.monotonic() // FAILURE_MEMO_S)):
            return memo[1]
    data = None
    try:
        cached = json.loads(read_regular_text(_cache_path(python)))
        if cached.get("signature") == json.loads(json.dumps(signature)):
            data = cached.get("listing")
    except (OSError, ValueError, AttributeError, BadInput):
        pass
    if not isinstance(data, dict):
        data = _ask(python)
        if not data.get("ok"):
            # A failure is not an answer: it is asked again a minute later (a raised timeout, a fixed
            # package), never cached on disk.
            with _lock:
                _memo[python] = ((*signature, time.monotonic() // FAILURE_MEMO_S), data)
            return data
        try:
            atomic_write_text(_cache_path(python), json.dumps({"signature": signature, "listing": data}) + "\n")
        except Exception:
            pass  # the cache is an optimisation
    with _lock:
        _memo[python] = (signature, data)
    return data


def clear_cache(python: str | None = None) -> None:
    """Forget listings in memory (all, or one interpreter's, whose disk cache goes too: it is asked again)."""
    with _lock:
        if python is None:
            _memo.clear()
            return
        _memo.pop(python, None)
    try:
        _cache_path(python).unlink()
    except OSError:
        pass


def _venv_label(python: str) -> str:
    prefix = Path(python).parent.parent
    return prefix.name.lstrip(".") or "python"


def discover(taken: set[str]) -> tuple[list, list[str]]:
    """EnvInfo entries of every interpreter's tasksets, with ids unique beside `taken` (the Atropos ids)."""
    pythons, notices = interpreters()
    out: list[EnvInfo] = []
    used = set(taken)
    for python in pythons:
        data = listing(python)
        if not data.get("ok"):
            notices.append(f"{python}: {data.get('error')}")
            continue
        for row in data["tasksets"]:
            base = str(row.get("id") or "")
            if not base:
                continue
            ident = (
                base
                if base not in used
                else f"{base}@{KIND}"
                if f"{base}@{KIND}" not in used
                else f"{base}@{_venv_label(python)}"
            )
            n = 1
            while ident in used:
                n += 1
                ident = f"{base}@{_venv_label(python)}-{n}"
            used.add(ident)
            out.append(
                EnvInfo(
                    name=base,
                    class_name=str(row.get("class_name") or ""),
                    file=str(row.get("file") or f"{python}::{base}"),
                    description=str(row.get("description") or ""),
                    config_class=row.get("config_class"),
                    source=KIND,
                    error=row.get("error"),
                    id=ident,
                    root=python,
                    kind=KIND,
                    python=python,
                    refused=row.get("refused"),
                    aliases=tuple(a for a in (str(row.get("module") or ""),) if a and a != ident),
                )
            )
    return out, notices


def probe_payload(env) -> dict:
    """What core.envs.probe gives for an Atropos environment, from the listing: the taskset config's fields."""
    for row in listing(env.python).get("tasksets") or []:
        if row.get("id") == env.name:
            if row.get("error"):
                raise BadInput(f"verifiers taskset {env.id!r} cannot be used: {row['error']}")
            return {
                "ok": True,
                "class_name": row.get("class_name"),
                "env_name": env.name,
                "config_class": row.get("config_class"),
                "base_config_found": True,
                "fields": list(row.get("fields") or []),
                "servers": [],
                "multi_turn": bool(row.get("multi_turn")),
            }
    raise BadInput(f"verifiers taskset {env.id!r} is no longer installed in {env.python}", hint="see `hermes-rl envs`")


def check_required(env, values: dict) -> None:
    """BadInput naming a taskset field that has no value and no usable default, before anything starts."""
    if getattr(env, "kind", "") != KIND:
        return
    for row in probe_payload(env)["fields"]:
        if row.get("required") and values.get(row["name"]) is None:
            choices = row.get("choices")
            one_of = f" (one of {', '.join(map(str, choices))})" if choices else ""
            raise BadInput(
                f"verifiers taskset {env.id!r} needs {row['name']} set{one_of}",
                hint=f"set it: hermes-rl config --set FIELD=VALUE ({row['name']}=…), or start with it set",
            )


def check_trainable(env) -> None:
    """BadInput with the one-line reason when a listed taskset cannot train here."""
    if getattr(env, "refused", None):
        tasks = "tasks cannot be made" in env.refused
        raise BadInput(
            f"verifiers taskset {env.id!r} cannot train here: {env.refused}",
            hint="a hub dataset must be in the local Hugging Face cache (load it once where the hub is reachable), "
            "a corpus installed"
            if tasks
            else "tasksets are served through plain chat here; sandboxed and tool-server tasksets need prime-rl",
        )
