"""Fuzz every tool's arguments: the answer is always a JSON-serialisable dict, never an exception.

Runs in a temp $HERMES_HOME whose selection names no real environment, so no example can start a
run or an inference test; the test checks afterwards that none did.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_rl.core.clients.toolset import TOOLS, call_tool

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
run_ids = st.sampled_from(
    ["../../etc/passwd", "..", "deadbeef", "DEADBEEF", "0" * 8, "0" * 9, "", "a/b", "\x00"]
) | st.text(max_size=20)


def _env_names():
    from hermes_rl.core.envs.discovery import discover_environments

    return {e.name for e in discover_environments()}


@pytest.fixture
def no_selectable_environment(hermes_home):
    """A selection that names no environment, so core falls back to nothing runnable."""
    (hermes_home / "rl").mkdir(parents=True, exist_ok=True)
    (hermes_home / "rl" / "current.yaml").write_text("environment: fuzz_no_such_env\nprofile: local\n")
    # and no default to fall back to (a selection that is not found falls back to the profile's default)
    (hermes_home / "rl" / "profiles").mkdir(parents=True, exist_ok=True)
    (hermes_home / "rl" / "profiles" / "local.yaml").write_text("default_environment: fuzz_no_such_env\n")
    return _env_names()


def _args_for(tool, real_names: set[str]):
    props = {}
    for name in tool.properties:
        if name == "run_id":
            props[name] = run_ids | json_values
        elif name == "name":
            props[name] = (st.text(max_size=30) | json_values).filter(
                lambda v: not (isinstance(v, str) and v in real_names)
            )
        else:
            props[name] = json_values
    fixed = st.fixed_dictionaries({}, optional=props)
    extra = st.dictionaries(st.text(max_size=8), json_values, max_size=2)
    return fixed | extra | json_values


def _check(result):
    assert isinstance(result, dict)
    json.dumps(result, allow_nan=False)  # strict JSON: no NaN/inf, no objects
    if "error" in result:
        assert isinstance(result["error"], str) and "Traceback" not in result["error"]
        # bad input is an expected failure with a clear message, never an internal error
        assert "this is unexpected" not in result.get("hint", ""), result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_any_arguments_give_a_json_dict(tool, no_selectable_environment, hermes_home):
    real_names = no_selectable_environment

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(args=_args_for(tool, real_names))
    def run(args):
        _check(call_tool(tool.name, args))

    run()
    runs_dir = hermes_home / "rl" / "runs"
    assert not runs_dir.exists() or not any(runs_dir.iterdir()), "a fuzz example started a run"
    tests_dir = hermes_home / "logs" / "rl_training" / "inference_trials"
    assert not tests_dir.exists() or not any(tests_dir.iterdir()), "a fuzz example started an inference test"


@settings(max_examples=40, deadline=None, derandomize=True)
@given(name=json_values, args=json_values)
def test_any_tool_name_gives_a_json_dict(name, args):
    _check(call_tool(name, args))
