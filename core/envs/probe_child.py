"""Evaluate one environment's config_init() and print its fields as JSON.

Run only as a child process: `python -m hermes_rl.core.envs.probe_child FILE CLASS`. Importing an environment
runs its code (and atroposlib, torch: seconds), so core.envs.probe does it here, in a subprocess with
a timeout, never in a client. Everything the module prints goes to stderr; stdout carries one
JSON object: {"ok": true, "fields": [...], ...} or {"ok": false, "error": "..."}.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from ..base.field_shapes import describe_annotation, jsonable
from ..base.fsutil import remove_temporary_directories
from .envload import import_environment


def _bounds(field_info: object) -> dict:
    """Numeric bounds from pydantic constraints (Field(ge=..., lt=...))."""
    out: dict = {"minimum": None, "maximum": None, "exclusive_minimum": False, "exclusive_maximum": False}
    for item in getattr(field_info, "metadata", []) or []:
        for attr, key, exclusive in (
            ("ge", "minimum", False),
            ("gt", "minimum", True),
            ("le", "maximum", False),
            ("lt", "maximum", True),
        ):
            bound = getattr(item, attr, None)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                out[key] = bound
                out[f"exclusive_{key}"] = exclusive
    return out


def probe(file: str, class_name: str) -> dict:
    path = Path(file).resolve()
    module = import_environment(path)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise LookupError(f"{path.name} has no class {class_name}")
    result = cls.config_init()  # type: ignore[attr-defined]  # any class the scan found; checked below
    if not isinstance(result, tuple) or len(result) < 1:
        raise TypeError(
            f"{class_name}.config_init() must return (env_config, server_configs), got {type(result).__name__}"
        )
    config = result[0]
    servers = result[1] if len(result) > 1 else None
    config_type = type(config)
    fields_map = getattr(config_type, "model_fields", None)
    if not isinstance(fields_map, dict):
        raise TypeError(f"{class_name}.config_init() returned {config_type.__name__}, not a pydantic config")
    # atroposlib's BaseEnvConfig, found through the MRO so this module never imports atroposlib itself.
    base_fields: set[str] = set()
    for klass in config_type.__mro__:
        if klass.__name__ == "BaseEnvConfig" and klass.__module__.startswith("atroposlib"):
            base_fields = set(getattr(klass, "model_fields", {}))
            break
    fields = []
    for name, info in fields_map.items():
        row = {
            "name": name,
            **describe_annotation(info.annotation),
            **_bounds(info),
            "default": jsonable(getattr(config, name, None)),
            "description": " ".join((info.description or "").split()),
            "in_base": name in base_fields,
        }
        fields.append(row)
    server_list = servers if isinstance(servers, (list, tuple)) else [servers] if servers is not None else []
    server_rows = []
    for server in server_list:
        dumped = jsonable(server) if hasattr(server, "model_dump") else {}
        if isinstance(dumped, dict):
            dumped.pop("api_key", None)  # never carry a key out of the probe
            server_rows.append(dumped)
    validated, model_validated = _validators(config_type)
    return {
        "ok": True,
        "validated": validated,
        "model_validated": model_validated,
        "class_name": class_name,
        "env_name": getattr(cls, "name", None) if isinstance(getattr(cls, "name", None), str) else None,
        "config_class": config_type.__name__,
        "base_config_found": bool(base_fields),
        "fields": fields,
        "servers": server_rows,
    }


def _validators(config_type: type) -> tuple[list[str], bool]:
    """(the fields the environment's own validators check, whether it has model validators): what
    hermes-rl asks the config class about before a start or a draft edit (check). atroposlib's are left
    out: a field it validates is checked in the run's own env process as before."""
    decorators = getattr(config_type, "__pydantic_decorators__", None)
    if decorators is None:
        return [], False

    def own(decorator) -> bool:
        return not str(getattr(decorator, "cls_ref", "")).startswith("atroposlib.")

    fields = sorted(
        {str(name) for d in decorators.field_validators.values() if own(d) for name in d.info.fields if name != "*"}
    )
    star = any(own(d) and "*" in d.info.fields for d in decorators.field_validators.values())
    return fields, star or any(own(d) for d in decorators.model_validators.values())


def check(file: str, class_name: str, values: dict) -> dict:
    """`values` over config_init()'s config, validated by the environment's own config class (its
    validators ask whatever it uses: reasoning-gym's task names and generator parameters). {"ok": True},
    or the first refusal: {"ok": False, "field", "error"} in the validator's words."""
    module = import_environment(Path(file).resolve())
    config = getattr(module, class_name).config_init()[0]
    try:
        type(config).model_validate({**config.model_dump(), **values})
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, or what a validator raised
        errors = getattr(exc, "errors", None)
        first = errors(include_url=False)[0] if callable(errors) and errors() else None
        if first is None:
            return {"ok": False, "field": None, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        message = str(first.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        field = ".".join(str(part) for part in first.get("loc") or ()) or None
        return {"ok": False, "field": field, "error": message[:1000]}
    return {"ok": True}


def _safe_probe(file: str, class_name: str) -> dict:
    try:
        return probe(file, class_name)
    except BaseException as exc:  # report anything, including SystemExit from module code
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}".strip()
        return {"ok": False, "error": message[:2000]}


def _emit(out_fd: int, payload: dict) -> None:
    data = json.dumps(payload, default=str).encode("utf-8") + b"\n"
    while data:
        written = os.write(out_fd, data)
        data = data[written:]


def main(argv: list[str]) -> int:
    """FILE CLASS: one result. --batch JSON: [[file, class], ...], one line per environment as each finishes
    (atroposlib is imported once for all of them: a cache warm-up, see core.envs.probe.warm_config_cache).
    --check FILE CLASS JSON: values checked by the environment's config class (check)."""
    # The real stdout is kept for our JSON; anything the environment prints (Python or C level) goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    if len(argv) == 2 and argv[0] == "--batch":
        for file, class_name in json.loads(argv[1]):
            _emit(out_fd, {**_safe_probe(file, class_name), "file": file, "class_name": class_name})
        return 0
    if len(argv) == 4 and argv[0] == "--check":
        try:
            payload = check(argv[1], argv[2], json.loads(argv[3]))
        except BaseException as exc:  # the module or config_init failed: said as the probe says it
            traceback.print_exc()
            payload = {"ok": False, "field": None, "error": f"{type(exc).__name__}: {exc}"[:2000], "crashed": True}
        _emit(out_fd, payload)
        return 0
    if len(argv) != 2:
        _emit(out_fd, {"ok": False, "error": "usage: python -m hermes_rl.core.envs.probe_child FILE CLASS"})
        return 2
    payload = _safe_probe(argv[0], argv[1])
    _emit(out_fd, payload)
    return 0 if payload.get("ok") else 1


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stderr.flush()
    remove_temporary_directories()  # of all that an exit would do, what leaves something behind
    os._exit(code)  # skip atexit hooks of whatever the environment imported (threads, wandb...)
