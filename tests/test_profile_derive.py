"""Profiles derived without hand-written YAML: `hermes-rl profile new/list/show`, in-memory derived
profiles (a sweep's configurations) and a profile from a run's values."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from hermes_rl.core.base.errors import BadInput, Conflict
from hermes_rl.core.base.paths import profiles_dir, run_dir
from hermes_rl.core.clients.cli import main
from hermes_rl.core.envs.profile_derive import create_profile, derive_profile
from hermes_rl.core.envs.profiles import PROFILE_VALUES, get_profile
from hermes_rl.core.runs.profile_of_run import profile_from_run, run_profile_values


def test_profile_new_writes_a_profile_that_get_profile_reads_back_with_its_values(capsys):
    argv = ["profile", "new", "fast", "--from", "local", "--set", "learning_rate=3e-4", "total_steps=300"]
    assert main([*argv, "max_token_length=256"]) == 0
    assert "created profile fast" in capsys.readouterr().out
    fast = get_profile("fast")
    assert fast.editable_defaults["learning_rate"] == pytest.approx(3e-4)
    assert fast.editable_defaults["total_steps"] == 300
    assert fast.editable_defaults["lora_rank"] == PROFILE_VALUES["local"]["editable_defaults"]["lora_rank"]
    assert "fast.yaml" in fast.locked["max_token_length"].reason
    assert yaml.safe_load((profiles_dir() / "fast.yaml").read_text())["extends"] == "local"
    # listed with what it changes; shown with every value
    assert main(["profile", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fast"]["extends"] == "local" and rows["fast"]["changes"]["total_steps"] == 300
    assert rows["local"]["builtin"] and rows["local"]["extends"] is None
    assert main(["profile", "show", "fast", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["editable_defaults"]["learning_rate"] == pytest.approx(3e-4)
    assert {f["name"]: f["value"] for f in shown["locked"]}["max_token_length"] == 256


def test_the_config_editor_still_refuses_a_derived_profiles_locked_values():
    from hermes_rl.core.envs.drafts import get_config, set_fields

    create_profile("fast", "local", {"learning_rate": "3e-4", "max_token_length": "256"})
    with pytest.raises(BadInput, match="max_token_length"):
        set_fields({"max_token_length": "128"}, env_name="toy_addition", profile="fast")
    # its training values are defaults a run changes
    set_fields({"learning_rate": "1e-3"}, env_name="toy_addition", profile="fast")
    rows = {r["name"]: r for r in get_config("toy_addition", profile="fast").editable}
    assert rows["learning_rate"]["value"] == pytest.approx(1e-3)
    assert rows["learning_rate"]["default"] == pytest.approx(3e-4)


@pytest.mark.parametrize(
    "assignments, words",
    [
        ({"learning_rate": "3"}, "learning_rate in --set must be <= 1"),
        ({"lora_rank": "0"}, "must be greater than 0"),
        ({"group_size": "1"}, "at least 2"),
        ({"rollout_server_url": "http://x"}, "rollout_server_url cannot be set"),
        ({"learning_rat": "1e-4"}, "unknown key 'learning_rat'"),
        ({"total_steps": "many"}, "must be an integer"),
    ],
)
def test_derived_values_are_held_to_the_bounds_of_profile_files(assignments, words):
    with pytest.raises(BadInput, match=words):
        create_profile("bad", "local", assignments)
    with pytest.raises(BadInput, match=words):
        derive_profile("local", assignments)
    assert not (profiles_dir() / "bad.yaml").exists()  # nothing written for a refused value


def test_a_profile_new_never_replaces_a_built_in_or_an_existing_profile(capsys):
    with pytest.raises(Conflict, match="built-in"):
        create_profile("local", "local", {"learning_rate": "3e-4"})
    create_profile("fast", "local", {"learning_rate": "3e-4"})
    before = (profiles_dir() / "fast.yaml").read_text()
    assert main(["profile", "new", "fast", "--set", "learning_rate=1e-3"]) == 1
    assert "exists" in capsys.readouterr().err
    assert (profiles_dir() / "fast.yaml").read_text() == before


def test_a_profile_derived_from_a_derived_one_keeps_its_changes():
    create_profile("fast", "local", {"learning_rate": "3e-4"})
    longer = create_profile("fast-long", "fast", {"total_steps": "2000"})
    assert longer.editable_defaults["learning_rate"] == pytest.approx(3e-4)
    assert longer.editable_defaults["total_steps"] == 2000
    assert yaml.safe_load((profiles_dir() / "fast-long.yaml").read_text())["extends"] == "local"


def test_an_in_memory_derived_profile_writes_nothing_and_says_where_its_values_come_from():
    derived = derive_profile("local", {"learning_rate": "2e-4", "max_token_length": "256"})
    assert derived.name == "local" and derived.editable_defaults["learning_rate"] == pytest.approx(2e-4)
    assert "derived from the local profile" in derived.locked["max_token_length"].reason
    assert not profiles_dir().exists() or not list(profiles_dir().iterdir())


def _fake_run(run_id: str, profile_values: dict | None, config: dict) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    record = {"run_id": run_id, "status": "completed", "profile": "local", "created_at": time.time()}
    if profile_values is not None:
        record["profile_values"] = profile_values
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def test_a_profile_from_a_run_holds_the_values_it_trained_with(capsys):
    local = get_profile("local").values()
    _fake_run(
        "aaaa0001",
        {**local, "learning_rate": 5e-4},
        {"env": {"group_size": 4, "batch_size": 8, "total_steps": 800}, "tinker": {"learning_rate": 5e-4}},
    )
    assert run_profile_values("aaaa0001")["learning_rate"] == pytest.approx(5e-4)
    profile = profile_from_run("aaaa0001", "from-run")
    assert profile.editable_defaults["learning_rate"] == pytest.approx(5e-4)
    assert (profile.editable_defaults["group_size"], profile.editable_defaults["batch_size"]) == (4, 8)
    written = yaml.safe_load((profiles_dir() / "from-run.yaml").read_text())
    assert "base_model" not in written  # only what differs from the run's profile is written
    # a run recorded without profile_values: its config.yaml says what it used
    _fake_run("aaaa0002", None, {"env": {"total_steps": 50}, "tinker": {"learning_rate": 2e-4, "lora_rank": 4}})
    assert main(["profile", "new", "second", "--from-run", "aaaa0002", "--json"]) == 0
    training = json.loads(capsys.readouterr().out)["editable_defaults"]
    assert (training["total_steps"], training["lora_rank"]) == (50, 4)
