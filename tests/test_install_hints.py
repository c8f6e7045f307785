"""Install hints name hermes-rl's extra, read from the installed metadata (pyproject.toml is the one
list): a missing training package says `pip install 'hermes-rl[train]'`, not `pip install atroposlib`,
and a start on an install without a backend's packages is refused before anything starts, naming the extra."""

from __future__ import annotations

import importlib.util

import pytest

from hermes_rl.core.base import extras
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.failures import failure_hint


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("atroposlib", "train"),
        ("tinker", "train"),
        ("math_verify.parser", "train"),
        ("torch", "local"),
        ("transformers", "local"),
        ("accelerate", "local"),
        ("mcp", "mcp"),
        ("peft", "dev"),
        ("no_such_pkg", None),
    ],
)
def test_each_package_is_named_with_the_smallest_extra_that_installs_it(module, extra):
    assert extras.extra_providing(module) == extra


@pytest.mark.parametrize(("module", "extra"), [("tinker", "train"), ("atroposlib", "train"), ("gguf", "local")])
def test_a_missing_module_hint_names_the_extra(module, extra):
    hint = failure_hint(f"ModuleNotFoundError: No module named '{module}'")
    assert f"pip install 'hermes-rl[{extra}]'" in hint


def test_a_start_without_the_backends_packages_is_refused_naming_the_extra(hermes_home, monkeypatch):
    from hermes_rl.core import runs

    real = importlib.util.find_spec
    # a base install: the training packages are not there (nothing else is changed)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("atroposlib", "tinker") else real(name, *a)
    )
    with pytest.raises(BadInput) as refused:
        runs.start_run("toy_addition")
    assert "atroposlib" in refused.value.message and "tinker" in refused.value.message
    assert "pip install 'hermes-rl[local]'" in refused.value.hint
    runs_folder = hermes_home / "rl" / "runs"
    assert not runs_folder.exists() or not list(runs_folder.iterdir())


def test_environment_tools_name_the_profile_in_use_not_null(hermes_home, monkeypatch):
    """With no profile chosen, the tools say the one a run started now would use."""
    from hermes_rl.core.clients import toolset

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert toolset.rl_list_environments()["profile"] == "local"
    assert toolset.rl_select_environment("toy_addition")["profile"] == "local"
    monkeypatch.setenv("TINKER_API_KEY", "tml-" + "x" * 20)
    assert toolset.rl_list_environments()["profile"] == "tinker"
