"""The two describers of environment fields (the config probe's, for Atropos configs, and the verifiers
bridge's, for tasksets, which runs by path under a taskset's interpreter) read one file,
core/base/field_shapes.py, and give the same shapes and defaults for the same annotations."""

from __future__ import annotations

import datetime
import enum
import importlib.util
import sys
from pathlib import Path
from typing import Literal, Optional

import pydantic

from hermes_rl.core.base.paths import PROJECT_ROOT
from hermes_rl.core.envs import probe_child


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Window(pydantic.BaseModel):
    start: datetime.datetime
    size: float


def _bridge():
    """The bridge as its interpreter loads it: by path, outside the package."""
    spec = importlib.util.spec_from_file_location(
        "verifiers_bridge_under_test", PROJECT_ROOT / "dataplane" / "verifiers_bridge.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_probe_and_the_bridge_describe_fields_alike_from_one_file():
    bridge = _bridge()
    assert Path(bridge._shapes.__file__).resolve() == (PROJECT_ROOT / "core" / "base" / "field_shapes.py").resolve()
    annotations = [
        int,
        bool,
        float,
        str,
        Path,
        dict,
        list,
        dict[str, int],
        list[int],
        tuple[int, ...],
        Window,
        Mode,
        Literal["a", "b"],
        Optional[Mode],  # noqa: UP045 - the older spelling, which a taskset may still use
        int | None,
        int | str,
        object,
    ]
    shapes = [bridge._describe(a) for a in annotations]
    assert shapes == [probe_child.describe_annotation(a) for a in annotations]
    assert [s["type"] for s in shapes] == [
        "int",
        "bool",
        "float",
        "str",
        "str",
        "dict",
        "list",
        "dict",
        "list",
        "list",
        "dict",
        "enum",
        "enum",
        "enum",
        "int",
        "str",
        "str",
    ]
    assert shapes[13] == {"type": "enum", "choices": ["fast", "slow"], "nullable": True}

    start = datetime.datetime(2026, 1, 2, 3, 4, 5)
    defaults = [float("nan"), float("inf"), Mode.SLOW, {1: (2.5, None)}, Window(start=start, size=-float("inf"))]
    values = [bridge._jsonable(v) for v in defaults]
    assert values == [probe_child.jsonable(v) for v in defaults]
    assert values == [None, None, "slow", {"1": [2.5, None]}, {"start": "2026-01-02T03:04:05", "size": None}]
