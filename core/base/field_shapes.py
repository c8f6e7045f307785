"""A config field as JSON: its annotation's shape ({type, choices, nullable}) and its values made JSON-able.

One source for both describers of environment fields: the config probe (core.envs.probe_child, Atropos
configs) and the verifiers bridge (dataplane/verifiers_bridge.py, tasksets' configs), which loads this
file by path under a taskset's own interpreter, where hermes-rl is not installed. So: the standard library
only, and no import of the package.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from pathlib import Path

_KINDS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("bool", (bool,)),
    ("int", (int,)),
    ("float", (float,)),
    ("str", (str, Path)),
    ("list", (list, tuple, set, frozenset)),
    ("dict", (dict,)),
)


def jsonable(value: object) -> object:
    """`value` as JSON can hold it: enums by value, non-finite floats as None, pydantic models as their JSON
    form, anything else unknown as its str()."""
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return jsonable(model_dump(mode="json"))
    return str(value)


def describe_annotation(annotation: object) -> dict:
    """{"type", "choices", "nullable"} for a pydantic field annotation; a type it cannot place is "str"."""
    nullable = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        nullable = len(rest) < len(args)
        if len(rest) != 1:
            return {"type": "str", "choices": None, "nullable": nullable}
        annotation = rest[0]
        origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"type": "enum", "choices": [jsonable(a) for a in typing.get_args(annotation)], "nullable": nullable}
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return {"type": "enum", "choices": [jsonable(m.value) for m in annotation], "nullable": nullable}
        for kind, classes in _KINDS:
            if issubclass(annotation, classes):
                return {"type": kind, "choices": None, "nullable": nullable}
        if hasattr(annotation, "model_fields"):
            return {"type": "dict", "choices": None, "nullable": nullable}
    if origin in (list, tuple, set, frozenset):
        return {"type": "list", "choices": None, "nullable": nullable}
    if origin is dict:
        return {"type": "dict", "choices": None, "nullable": nullable}
    return {"type": "str", "choices": None, "nullable": nullable}
