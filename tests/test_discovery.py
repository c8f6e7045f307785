"""Environment discovery: AST only, across folders, tolerant of broken files, cached by (path, mtime, size)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.paths import PROJECT_ROOT
from hermes_rl.core.envs import discovery
from hermes_rl.core.envs.discovery import discover_environments, environment_dirs, find_environment
from tests.fixtures_config import bump_mtime

SIMPLE_ENV = '''"""{doc}"""
from atroposlib.envs.base import BaseEnv


class {cls}(BaseEnv):
    name = "{name}"
'''


def by_name(envs):
    return {env.name: env for env in envs}


def test_finds_fixture_environments_with_their_details(fixture_envs):
    envs = by_name(discover_environments())

    basic = envs["fixture_basic"]
    assert basic.class_name == "BasicEnv"
    assert basic.file == str(fixture_envs / "basic_env.py")
    assert basic.description == "Adds small numbers; a fixture for discovery and config tests."
    assert basic.config_class == "BasicConfig"  # from config_init's return annotation
    assert basic.source == "extra" and basic.error is None

    # No `name` attribute: the file stem; config class unknown without annotation or env_config_cls.
    assert envs["attr_full"].class_name == "AttrFullEnv"
    assert envs["attr_full"].config_class is None
    # `base.BaseEnv` and an aliased `BaseEnv as AtroposEnv` both count.
    assert envs["fixture_attr_module"].class_name == "AttrModuleEnv"
    assert envs["fixture_alias"].class_name == "AliasEnv"
    # A string return annotation still names the config class.
    assert envs["fixture_crash"].config_class == "BaseEnvConfig"


def test_inheritance_through_another_scanned_file(fixture_envs):
    child = by_name(discover_environments())["fixture_child"]
    assert child.class_name == "ChildMathEnv"
    assert child.config_class == "MathConfig"  # inherited env_config_cls of the parent file
    assert child.base_files == (str(fixture_envs / "math_base.py"),)


def test_helper_modules_without_an_environment_are_skipped(fixture_envs):
    envs = discover_environments()
    files = {Path(env.file).name for env in envs}
    assert "helpers_only.py" not in files
    assert "not_an_env" not in by_name(envs)
    assert "toy_task.py" not in files  # the project's shared helper module


def test_project_environments_are_found():
    envs = [env for env in discover_environments() if env.source == "project"]
    present = {p.stem for p in (PROJECT_ROOT / "environments").glob("*.py")}
    if not {"toy_addition", "gsm8k"} <= present:
        pytest.skip("project environments not written yet")
    names = by_name(envs)
    assert names["toy_addition"].class_name == "ToyAdditionEnv"
    assert names["toy_addition"].config_class == "ToyAdditionConfig"
    assert names["gsm8k"].file == str(PROJECT_ROOT / "environments" / "gsm8k.py")


def test_files_that_fail_to_parse_become_entries_and_the_scan_goes_on(fixture_envs, user_envs):
    (user_envs / "latin1.py").write_bytes(b"# caf\xe9 without a coding line\nx = 1\n")
    big = user_envs / "huge.py"
    with open(big, "w") as handle:
        handle.write("# padding\n" * (discovery.MAX_FILE_BYTES // 10 + 10))
    (user_envs / "nested.py").write_text("x = " + "(" * 300_000 + ")" * 300_000 + "\n")
    (user_envs / "good.py").write_text(SIMPLE_ENV.format(doc="Still found.", cls="GoodEnv", name="good"))

    envs = by_name(discover_environments())

    assert "syntax error at line 6" in envs["broken_syntax"].error
    assert envs["broken_syntax"].class_name == ""
    assert "binary" in envs["binary_blob"].error
    assert "utf-8" in envs["latin1"].error.lower()
    assert "too large" in envs["huge"].error
    assert envs["nested"].error  # too deep for the parser: an entry, not a crash
    assert envs["good"].error is None and envs["good"].source == "user"
    assert envs["fixture_basic"].error is None


def test_find_environment_explains_a_broken_file(fixture_envs):
    with pytest.raises(BadInput) as caught:
        find_environment("broken_syntax")
    assert "broken_syntax.py" in caught.value.message
    assert "syntax error" in caught.value.message


def test_find_environment_unknown_lists_available_names(fixture_envs):
    with pytest.raises(NotFound) as caught:
        find_environment("no_such_env")
    assert "fixture_basic" in caught.value.hint
    assert "broken_syntax" not in caught.value.hint  # only usable ones are offered


def test_new_changed_and_removed_files_are_seen_on_the_next_call(user_envs):
    first = user_envs / "alpha.py"
    first.write_text(SIMPLE_ENV.format(doc="Alpha.", cls="AlphaEnv", name="alpha"))
    assert "alpha" in by_name(discover_environments())

    (user_envs / "beta.py").write_text(SIMPLE_ENV.format(doc="Beta.", cls="BetaEnv", name="beta"))
    assert {"alpha", "beta"} <= set(by_name(discover_environments()))

    first.write_text(SIMPLE_ENV.format(doc="Alpha renamed.", cls="AlphaEnv", name="alpha2"))
    bump_mtime(first)
    names = by_name(discover_environments())
    assert "alpha" not in names and names["alpha2"].description == "Alpha renamed."

    (user_envs / "beta.py").unlink()
    assert "beta" not in by_name(discover_environments())


def test_unchanged_files_are_not_parsed_again(user_envs, monkeypatch):
    for index in range(5):
        (user_envs / f"env{index}.py").write_text(SIMPLE_ENV.format(doc="x", cls=f"E{index}", name=f"e{index}"))
    discovery.clear_cache()
    parsed = []
    real_scan = discovery._scan_file
    monkeypatch.setattr(discovery, "_scan_file", lambda path, size: parsed.append(path.name) or real_scan(path, size))

    discover_environments()
    cold = len(parsed)
    discover_environments()
    assert len(parsed) == cold  # warm: nothing re-parsed

    target = user_envs / "env3.py"
    target.write_text(target.read_text() + "\n# edited\n")
    bump_mtime(target)
    envs = discover_environments()
    assert parsed[cold:] == ["env3.py"]  # only the changed file
    assert "e3" in by_name(envs)


def test_duplicate_names_are_all_reported_and_the_first_wins(user_envs, tmp_path, monkeypatch):
    extra = tmp_path / "extra"
    extra.mkdir()
    (user_envs / "mine.py").write_text(SIMPLE_ENV.format(doc="User copy.", cls="MineEnv", name="dup"))
    (extra / "theirs.py").write_text(SIMPLE_ENV.format(doc="Extra copy.", cls="TheirsEnv", name="dup"))
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(extra))

    dups = [env for env in discover_environments() if env.name == "dup"]
    assert [env.source for env in dups] == ["user", "extra"]
    assert dups[0].duplicate_of is None
    assert dups[1].duplicate_of == str(user_envs / "mine.py")
    assert find_environment("dup").class_name == "MineEnv"


def test_circular_inheritance_does_not_hang_or_count(user_envs):
    (user_envs / "loop_a.py").write_text("from loop_b import B\n\nclass A(B):\n    pass\n")
    (user_envs / "loop_b.py").write_text("from loop_a import A\n\nclass B(A):\n    pass\n")
    (user_envs / "selfish.py").write_text("class Selfish(Selfish):\n    pass\n")
    (user_envs / "real.py").write_text(
        "from loop_a import A\nfrom atroposlib.envs.base import BaseEnv\n\nclass Real(A, BaseEnv):\n    name = 'real'\n"
    )

    envs = by_name(discover_environments())
    assert "real" in envs
    assert not {"loop_a", "loop_b", "selfish"} & set(envs)


def test_library_classes_with_the_same_name_are_not_confused(user_envs):
    """A base imported from a module that is not scanned is not resolved to a scanned class of that name."""
    (user_envs / "local_base.py").write_text(
        "from atroposlib.envs.base import BaseEnv\n\nclass MathEnv(BaseEnv):\n    name = 'local_math'\n"
    )
    (user_envs / "other.py").write_text(
        "from somelib.envs import MathEnv\n\nclass Other(MathEnv):\n    name = 'other'\n"
    )
    names = by_name(discover_environments())
    assert "local_math" in names and "other" not in names


def test_discovery_never_imports_environment_code(user_envs, tmp_path):
    marker = tmp_path / "imported"
    (user_envs / "side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from atroposlib.envs.base import BaseEnv\n\nclass SideEffectEnv(BaseEnv):\n    name = 'side_effect'\n"
    )
    assert "side_effect" in by_name(discover_environments())
    assert not marker.exists()


def test_scan_folders_in_order_with_tinker_atropos_and_extra_paths(tmp_path, monkeypatch):
    checkout = tmp_path / "tinker-atropos"
    ta_envs = checkout / "tinker_atropos" / "environments"
    ta_envs.mkdir(parents=True)
    (ta_envs / "gsm8k_tinker.py").write_text(SIMPLE_ENV.format(doc="From the checkout.", cls="TEnv", name="ta_env"))
    first, second = tmp_path / "x1", tmp_path / "x2"
    first.mkdir()
    second.mkdir()
    (second / "late.py").write_text(SIMPLE_ENV.format(doc="Late.", cls="LateEnv", name="late"))
    monkeypatch.setenv("HERMES_RL_TINKER_ATROPOS", str(checkout))
    monkeypatch.setenv("HERMES_RL_ENV_PATH", os.pathsep.join([str(first), str(second), str(first)]))

    dirs = environment_dirs()
    assert [source for source, _ in dirs] == ["project", "user", "tinker-atropos", "extra", "extra"]
    assert dirs[2][1] == ta_envs and dirs[4][1] == second  # the repeated folder is scanned once
    names = by_name(discover_environments())
    assert names["ta_env"].source == "tinker-atropos"
    assert names["late"].source == "extra"


def test_missing_or_odd_folders_never_fail_the_scan(monkeypatch, tmp_path):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    monkeypatch.setenv("HERMES_RL_ENV_PATH", os.pathsep.join([str(tmp_path / "missing"), str(not_a_dir), "", "  "]))
    monkeypatch.setenv("HERMES_RL_TINKER_ATROPOS", str(tmp_path / "nowhere"))
    assert isinstance(discover_environments(), list)
