"""Values that validate but would break the run: every number has bounds, names are plain names, and
a draft holding a bad value (or a corrupt or too-large one) refuses `start` instead of falling back
to defaults silently; warnings are capped."""

from __future__ import annotations

import json

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import drafts_dir, runs_dir
from hermes_rl.core.clients import toolset
from hermes_rl.core.envs import drafts
from tests.reliability.helpers import CORPUS

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120), pytest.mark.usefixtures("run_processes_cleanup")]

BOUNDS = json.loads((CORPUS / "field_bounds.json").read_text())


def _value(raw):
    return eval(raw[1:], {}) if isinstance(raw, str) and raw.startswith("=") else raw  # noqa: S307 - test data


@pytest.fixture
def env_name(arith_env):
    drafts.get_config(None)  # probe once
    return arith_env


def test_out_of_bounds_and_path_like_values_are_refused_by_name(env_name):
    before = drafts.get_config(None).values()
    for name, raw, message in BOUNDS["cases"]:
        out = toolset.call_tool("rl_edit_config", {"field": name, "value": _value(raw)})
        assert "error" in out and message in out["error"], (name, raw, out)
        assert len(out["error"]) < 400
    assert drafts.get_config(None).values() == before  # nothing written
    for name, raw in BOUNDS["accepted"]:
        out = toolset.call_tool("rl_edit_config", {"field": name, "value": raw})
        assert "error" not in out, (name, raw, out)


@pytest.mark.parametrize(
    "draft_text, message",
    [
        ("steps_per_eval: " + "9" * 300 + "\n", "steps_per_eval must be <="),
        ("wandb_project: ../../etc\n", "wandb_project must be a plain name"),
        ("{not: yaml: at all\n", "cannot be used"),
        ("- a list\n- not a mapping\n", "must be a mapping"),
        ("padding: '" + "x" * (300 * 1024) + "'\n", "cannot be used"),
    ],
    ids=["huge number", "path as project", "syntax error", "not a mapping", "too large"],
)
def test_a_bad_draft_refuses_start_instead_of_using_defaults(env_name, draft_text, message):
    path = drafts_dir() / f"{env_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(draft_text)
    with pytest.raises(BadInput, match=message.replace("(", r"\(")):
        runs.start_run()
    assert not runs_dir().exists() or not list(runs_dir().iterdir()), "a run was created"
    out = toolset.call_tool("rl_start_training", {})
    assert "error" in out and "draft" in out["error"], out
    assert path.read_text() == draft_text  # the user's file is kept as written


def test_warnings_about_a_draft_are_capped(env_name):
    path = drafts_dir() / f"{env_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"unknown_field_{i}: 1\n" for i in range(5000)))
    view = drafts.get_config(None)
    assert 1 < len(view.warnings) <= drafts.MAX_WARNINGS + 3, len(view.warnings)
    assert any("more problem" in w for w in view.warnings)


def _profile_file(key: str, raw: str, name: str = "local"):
    """The profile's YAML file with `key: raw` added (a user profile keeps its `extends`)."""
    from hermes_rl.core.base.paths import profiles_dir

    profiles_dir().mkdir(parents=True, exist_ok=True)
    path = profiles_dir() / f"{name}.yaml"
    kept = [ln for ln in (path.read_text().splitlines() if path.exists() else []) if not ln.startswith(key + ":")]
    path.write_text("".join(ln + "\n" for ln in [*kept, f"{key}: {_value(raw)}"]))
    return path


@pytest.mark.parametrize(
    "key, raw, message", BOUNDS["profile_cases"], ids=[f"{c[0]}={c[1]}" for c in BOUNDS["profile_cases"]]
)
def test_a_profile_number_past_its_bound_is_refused_by_name(key, raw, message):
    """Locked numbers come from profile files: an absurd learning rate (or a huge counter) is refused
    when the profile is read, naming the key and the file, before any run exists."""
    from hermes_rl.core.envs.profiles import get_profile

    path = _profile_file(key, raw)
    with pytest.raises(BadInput) as refused:
        get_profile("local")
    assert f"{key} in {path}" in refused.value.message and message in refused.value.message, refused.value.message
    assert len(refused.value.message) < 400


def test_profile_numbers_within_bounds_are_taken():
    from hermes_rl.core.envs.profiles import get_profile

    for key, raw in BOUNDS["profile_accepted"]:
        _profile_file(key, raw)
        assert get_profile("local").locked.get(key) is None or get_profile("local").locked[key].value == float(raw)


def test_start_with_an_absurd_learning_rate_is_refused_up_front(env_name):
    import os
    import subprocess
    import sys

    _profile_file("learning_rate", "1e300", name=drafts.current_selection().get("profile") or "local")
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", "start"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert out.returncode == 1, out.stdout + out.stderr
    assert "learning_rate in" in out.stderr and "must be <= 1, got" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not runs_dir().exists() or not [p for p in runs_dir().iterdir() if p.is_dir()], "a run was created"
