"""Patterns match whole strings and numbers are ASCII digits: a name with a trailing newline, or a
number in another script's digits, is refused everywhere a user, a file or an environment can hand one
in — it would otherwise land in run.json, config.yaml, file names and command lines."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.names import ascii_float, ascii_int
from hermes_rl.core.base.paths import process_log_path, tinker_checkpoint_subpath, validate_env_name, validate_run_id
from hermes_rl.core.clients import cli
from hermes_rl.core.envs import profile_derive

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("check", [validate_run_id, validate_env_name])
def test_ids_with_a_trailing_newline_are_refused(check, hermes_home):
    good = "a1b2c3d4"
    check(good)
    with pytest.raises(BadInput):
        check(good + "\n")


def test_process_and_checkpoint_names_with_a_trailing_newline_are_refused(hermes_home):
    with pytest.raises(BadInput):
        process_log_path("trainer\n", "a1b2c3d4")
    with pytest.raises(BadInput):
        tinker_checkpoint_subpath("tinker://model-1/weights/step-10\n")
    assert tinker_checkpoint_subpath("tinker://model-1/weights/step-10") == "model-1/weights/step-10"


def test_a_profile_named_with_a_newline_is_not_created(hermes_home):
    with pytest.raises(BadInput):
        profile_derive.create_profile("abc\n", "local", {"learning_rate": "1e-4"})
    profiles = hermes_home / "rl" / "profiles"
    assert not profiles.exists() or not list(profiles.iterdir())


@pytest.mark.parametrize("text", ["٣", "３", "²", "1\n2", "nan", "inf", "0x10", ""])
def test_numbers_in_other_scripts_or_forms_are_refused(text):
    with pytest.raises(ValueError):
        ascii_int(text)
    if text not in ("٣", "３", "²"):
        with pytest.raises(ValueError):
            ascii_float(text)


def test_cli_refuses_a_step_in_arabic_digits(hermes_home, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["rollouts", "a1b2c3d4", "--step", "٣"])
    assert exited.value.code != 0
    assert "invalid int value" in capsys.readouterr().err


def test_a_config_field_refuses_arabic_digits(hermes_home):
    from hermes_rl.core.envs.profiles import coerce_value

    with pytest.raises(BadInput):
        coerce_value("total_steps", "int", "٣")
    assert coerce_value("total_steps", "int", "30") == 30


def test_no_name_pattern_is_matched_by_prefix():
    """The mechanism: nothing in the product calls .match() on a compiled `*_RE` pattern (use is_name)."""
    offenders = []
    for folder in ("core", "dataplane", "tui", "environments"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "match"
                    and isinstance(node.func.value, ast.Name)
                    and re.search(r"_RE$", node.func.value.id)
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
