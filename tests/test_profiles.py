"""Profiles: built-in values, key checks, YAML overrides and typed-value coercion."""

from __future__ import annotations

import pytest

from hermes_rl.core.base.errors import BadInput, MissingKey, NotFound
from hermes_rl.core.base.paths import models_dir
from hermes_rl.core.envs.profiles import (
    LOCAL_NOTICE,
    PROFILE_VALUES,
    check_keys,
    coerce_value,
    get_profile,
    list_profiles,
    resolve_profile,
)


def write_profile(hermes_home, name: str, text: str):
    folder = hermes_home / "rl" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def test_no_key_resolves_to_local_with_a_notice():
    profile, notice = resolve_profile(None)
    assert profile.name == "local" and profile.backend == "local"
    assert notice == "No TINKER_API_KEY: using the local profile (tiny model on CPU)" == LOCAL_NOTICE


def test_a_key_in_the_environment_or_dotenv_resolves_to_tinker(monkeypatch, hermes_home):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    assert resolve_profile(None) == (get_profile("tinker"), None)
    monkeypatch.delenv("TINKER_API_KEY")
    (hermes_home / ".env").write_text("TINKER_API_KEY=tml-from-dotenv\n")
    profile, notice = resolve_profile(None)
    assert profile.name == "tinker" and notice is None


def test_explicit_profile_name_wins_over_the_key_check(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    assert resolve_profile("local")[0].name == "local"


def test_tinker_profile_has_the_seed_values_backend_locked_training_as_defaults():
    tinker = get_profile("tinker")
    values = {name: field.value for name, field in tinker.locked.items()}
    assert values["tokenizer_name"] == values["base_model"] == "Qwen/Qwen3-8B"
    assert (values["max_token_length"], values["max_num_workers"], values["max_token_trainer_length"]) == (
        8192,
        2048,
        9000,
    )
    assert "rollout_server_url" in tinker.locked
    assert tinker.needs_keys == ["TINKER_API_KEY"] and tinker.default_environment == "gsm8k"
    # the hyperparameters are training defaults each run may change, never locked
    assert tinker.editable_defaults == {
        "learning_rate": 4e-5,
        "total_steps": 2500,
        "lora_rank": 32,
        "group_size": 16,
        "batch_size": 128,
    }
    assert not set(tinker.editable_defaults) & set(tinker.locked)
    assert all(field.reason.startswith("backend") for field in tinker.locked.values())


def test_local_profile_uses_the_locally_built_model_and_small_values():
    local = get_profile("local")
    model = str(models_dir() / "tiny-toy")
    assert local.locked["base_model"].value == model == local.locked["tokenizer_name"].value
    assert local.editable_defaults["total_steps"] == PROFILE_VALUES["local"]["editable_defaults"]["total_steps"]
    assert local.editable_defaults["lora_rank"] < get_profile("tinker").editable_defaults["lora_rank"]
    assert local.needs_keys == [] and local.default_environment == "toy_addition"
    assert local.editable_defaults["batch_size"] >= local.editable_defaults["group_size"] >= 2


def test_check_keys_names_the_missing_key_and_how_to_set_it(hermes_home, monkeypatch):
    with pytest.raises(MissingKey) as caught:
        check_keys(get_profile("tinker"))
    assert "TINKER_API_KEY" in caught.value.message
    assert "export TINKER_API_KEY" in caught.value.hint and str(hermes_home / ".env") in caught.value.hint
    check_keys(get_profile("local"))  # needs nothing
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    check_keys(get_profile("tinker"))


def test_overrides_file_changes_locked_values_and_says_so(hermes_home):
    path = write_profile(
        hermes_home, "tinker", "learning_rate: 2e-5\nlora_rank: '16'\ngroup_size: 8\nmax_token_length: 4096\n"
    )
    tinker = get_profile("tinker")
    assert tinker.editable_defaults["learning_rate"] == 2e-5  # YAML reads 2e-5 as text; coerced to a float
    assert tinker.editable_defaults["lora_rank"] == 16
    assert tinker.locked["max_token_length"].value == 4096
    assert str(path) in tinker.locked["max_token_length"].reason
    assert tinker.editable_defaults["total_steps"] == 2500  # untouched
    assert tinker.editable_defaults["group_size"] == 8
    assert tinker.overrides_file == str(path)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("lora_rnak: 8\n", "unknown key 'lora_rnak'"),
        ("lora_rank: lots\n", "lora_rank in"),
        ("lora_rank: -4\n", "greater than 0"),
        ("rollout_server_url: http://evil:1\n", "rollout_server_url cannot be set"),
        ("- just\n- a list\n", "must be a mapping"),
        ("a: &x [1, 2]\nb: *x\n", "anchors and aliases"),
        ("lora_rank: [unclosed\n", "not valid YAML"),
        ("extends: local\n", "cannot extend"),
    ],
)
def test_bad_override_files_are_rejected_with_the_file_named(hermes_home, text, expected):
    path = write_profile(hermes_home, "tinker", text)
    with pytest.raises(BadInput) as caught:
        get_profile("tinker")
    assert expected in caught.value.message
    assert str(path) in caught.value.message
    if "unknown key" in expected:
        assert "lora_rank" in caught.value.hint and "learning_rate" in caught.value.hint


def test_user_profile_extends_a_builtin(hermes_home):
    write_profile(hermes_home, "quick", "extends: local\ntotal_steps: 20\ndefault_environment: gsm8k\n")
    quick = get_profile("quick")
    assert quick.backend == "local" and quick.editable_defaults["total_steps"] == 20
    assert quick.editable_defaults["lora_rank"] == get_profile("local").editable_defaults["lora_rank"]
    assert quick.default_environment == "gsm8k"
    assert list_profiles() == ["tinker", "local", "smollm2", "quick"]

    write_profile(hermes_home, "orphan", "total_steps: 20\n")
    with pytest.raises(BadInput, match="extends"):
        get_profile("orphan")


@pytest.mark.parametrize("name", ["nope", "../../etc/passwd", "", None, "UPPER"])
def test_unknown_profiles_list_the_valid_ones(name):
    with pytest.raises(NotFound) as caught:
        get_profile(name)
    assert "local" in caught.value.hint and "tinker" in caught.value.hint


def test_huge_override_file_is_refused(hermes_home):
    write_profile(hermes_home, "local", "# x\n" * 100_000)
    with pytest.raises(BadInput, match="too large"):
        get_profile("local")


@pytest.mark.parametrize(
    "kind, raw, expected",
    [
        ("int", "8", 8),
        ("int", " 12 ", 12),
        ("int", "8.0", 8),
        ("int", 3.0, 3),
        ("int", "1_000", 1000),
        ("float", "0.5", 0.5),
        ("float", "4e-5", 4e-5),
        ("float", 2, 2.0),
        ("bool", "true", True),
        ("bool", "No", False),
        ("bool", "1", True),
        ("bool", False, False),
        ("str", "hello", "hello"),
        ("str", 12, "12"),
        ("list", '["a", "b"]', ["a", "b"]),
        ("list", "a, b", ["a", "b"]),
        ("list", ("x",), ["x"]),
        ("dict", '{"k": 1}', {"k": 1}),
    ],
)
def test_coercion_accepts_cli_text_and_native_values(kind, raw, expected):
    value = coerce_value("field", kind, raw)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "kind, raw",
    [
        ("int", "8.5"),
        ("int", "eight"),
        ("int", True),
        ("int", None),
        ("float", "nan"),
        ("float", "inf"),
        ("float", "fast"),
        ("bool", "maybe"),
        ("bool", 2),
        ("str", "two\nlines"),
        ("str", ["a"]),
        ("list", '{"k": 1}'),
        ("dict", "[1]"),
    ],
)
def test_coercion_rejects_bad_values_naming_the_field(kind, raw):
    with pytest.raises(BadInput) as caught:
        coerce_value("my_field", kind, raw)
    assert "my_field" in caught.value.message


def test_coercion_of_choices_and_nullable_values():
    assert coerce_value("mode", "enum", "BOXED", choices=["plain", "boxed"]) == "boxed"
    assert coerce_value("level", "enum", "2", choices=[1, 2]) == 2
    with pytest.raises(BadInput, match="plain, boxed"):
        coerce_value("mode", "enum", "fancy", choices=["plain", "boxed"])
    assert coerce_value("seed", "int", "none", nullable=True) is None
    assert coerce_value("seed", "int", None, nullable=True) is None
