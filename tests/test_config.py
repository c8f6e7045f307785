"""Config: real config_init probes in subprocesses, caches, validated edits, shared drafts, config.yaml."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import yaml

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.paths import PROJECT_ROOT, probe_cache_dir
from hermes_rl.core.envs import probe
from hermes_rl.core.envs.discovery import find_environment
from hermes_rl.core.envs.drafts import (
    current_selection,
    get_config,
    reset_draft,
    resolve_run_values,
    select_environment,
    set_field,
    set_fields,
)
from hermes_rl.core.envs.fields import editable_fields
from hermes_rl.core.envs.profiles import PROFILE_VALUES, get_profile
from hermes_rl.core.runs.runconfig import build_run_config, run_config_yaml
from tests.fixtures_config import bump_mtime, fixture_id, write_env

PORTS = {"api": 18000, "inference": 18001, "tinker": 18002}
RUN_ID = "0123abcd"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _probes_warmed_once(warm_probes):
    """Every test here may use the session's shared probe results (one atroposlib import for all)."""
    return warm_probes


def test_warm_up_probes_many_environments_in_one_process(warm_probes):
    assert warm_probes["fixture_basic"] in ("probed", "cached")
    assert all(status in ("probed", "cached") for status in warm_probes.values()), warm_probes


def rows(view):
    return {row["name"]: row for row in view.editable}


def draft_file(hermes_home, env):
    return hermes_home / "rl" / "drafts" / f"{fixture_id(env)}.yaml"


# --- probing config_init -----------------------------------------------------------------------


def test_editable_fields_come_from_config_init(fixture_envs):
    view = get_config("fixture_basic")
    fields = rows(view)
    assert view.environment == fixture_id("fixture_basic") and view.profile == "local"
    assert view.notice == "No TINKER_API_KEY: using the local profile (tiny model on CPU)"
    # The environment's own fields, with type, default, description and choices.
    assert fields["max_operand"]["type"] == "int" and fields["max_operand"]["default"] == 9
    assert (fields["max_operand"]["minimum"], fields["max_operand"]["maximum"]) == (1, 99)
    assert fields["max_operand"]["description"] == "Largest operand in a problem"
    assert fields["temperature"]["type"] == "float" and fields["temperature"]["exclusive_minimum"]
    assert fields["shuffle"]["type"] == "bool"
    assert fields["answer_format"]["choices"] == ["plain", "boxed"]
    assert fields["difficulty"]["type"] == "enum" and fields["difficulty"]["choices"] == ["easy", "hard"]
    assert fields["seed"]["nullable"] and fields["seed"]["default"] is None
    assert fields["stop_words"]["type"] == "list" and fields["stop_words"]["default"] == ["\n"]
    # Values config_init set on BaseEnvConfig fields are the defaults of the safe ones offered.
    assert fields["steps_per_eval"]["default"] == 25 and fields["use_wandb"]["default"] is False
    # Run shape defaults come from the profile; the name from {env}-{timestamp}.
    local_defaults = PROFILE_VALUES["local"]["editable_defaults"]
    assert fields["group_size"]["default"] == local_defaults["group_size"]
    assert fields["batch_size"]["default"] == local_defaults["batch_size"]
    assert fields["wandb_name"]["default"] == "fixture_basic-{timestamp}"
    # The training hyperparameters are editable, called "training", with the profile's defaults.
    for name in ("learning_rate", "total_steps", "lora_rank", "group_size", "batch_size"):
        assert fields[name]["default"] == local_defaults[name] and fields[name]["group"] == "training"
    assert (fields["learning_rate"]["section"], fields["lora_rank"]["section"]) == ("tinker", "tinker")
    # The backend and the rest of BaseEnvConfig are not editable; the profile's backend fields are locked.
    assert not {
        "tokenizer_name",
        "max_token_length",
        "rollout_server_url",
        "data_path_to_save_groups",
        "max_num_workers_per_node",
    } & set(fields)
    locked = {row["name"]: row for row in view.locked}
    assert locked["max_token_length"]["value"] == 512 and locked["max_token_length"]["reason"].startswith("backend")
    assert "lora_rank" not in locked
    assert all(not row["modified"] for row in view.editable)


def test_tinker_profile_defaults_and_locks(fixture_envs, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    view = get_config("fixture_basic")
    assert view.profile == "tinker" and view.notice is None
    assert rows(view)["group_size"]["default"] == 16 and rows(view)["batch_size"]["default"] == 128
    assert {row["name"]: row["value"] for row in view.locked}["max_token_trainer_length"] == 9000


def test_inherited_environment_gets_the_parent_config(fixture_envs):
    fields = {f.name: f for f in editable_fields(find_environment("fixture_child"), get_profile("local"))}
    assert fields["num_few_shot"].default == 2 and fields["num_few_shot"].minimum == 0


@pytest.mark.parametrize(
    "env_name, own",
    [
        ("toy_addition", {"max_operand", "temperature", "eval_size"}),
        ("gsm8k", {"temperature", "eval_size"}),
    ],
)
def test_project_environments_probe(env_name, own):
    if not (PROJECT_ROOT / "environments" / f"{env_name}.py").exists():
        pytest.skip(f"environments/{env_name}.py not written yet")
    fields = rows(get_config(env_name))
    assert own <= set(fields)
    assert "env_metrics_path" not in fields  # filled by hermes-rl per run, not edited


def test_crashing_config_init_is_a_clear_error(fixture_envs):
    with pytest.raises(BadInput) as caught:
        get_config("fixture_crash")
    assert "crash_config.py" in caught.value.message
    assert "RuntimeError: dataset gsm8k_missing.jsonl not found" in caught.value.message


def test_a_probe_that_dies_without_output_is_a_clear_error(fixture_envs):
    with pytest.raises(BadInput) as caught:
        get_config("fixture_hard_exit")
    assert "hard_exit_config.py" in caught.value.message and "exit code 7" in caught.value.message


def test_slow_config_init_times_out_and_leaves_no_process(fixture_envs, monkeypatch):
    monkeypatch.setenv("HERMES_RL_PROBE_TIMEOUT", "3")
    started = time.monotonic()
    with pytest.raises(BadInput) as caught:
        get_config("fixture_slow")
    assert time.monotonic() - started < 20
    assert "slow_config.py" in caught.value.message and "within 3 s" in caught.value.message
    cmdlines = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    leftovers = [line for line in cmdlines if "hermes_rl.core.envs.probe_child" in line and "slow_config" in line]
    assert leftovers == []
    # The failure is remembered: a second call answers at once instead of waiting again.
    started = time.monotonic()
    with pytest.raises(BadInput):
        get_config("fixture_slow")
    assert time.monotonic() - started < 2


def test_broken_file_is_a_clear_error(fixture_envs):
    with pytest.raises(BadInput, match="syntax error"):
        get_config("broken_syntax")


def test_probes_are_cached_in_memory_and_on_disk_until_the_file_changes(user_envs, hermes_home, monkeypatch):
    path = write_env(user_envs, "evolving", "evolving", fields={"level": "int = Field(default=1, description='Level')"})
    calls = []
    real_probe = probe._run_probe
    monkeypatch.setattr(probe, "_run_probe", lambda env: calls.append(env.file) or real_probe(env))
    # Three dashboard workers ask at once: one real probe serves them all.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        views = list(pool.map(lambda _: get_config("evolving"), range(3)))
    assert all(rows(view)["level"]["default"] == 1 for view in views)
    assert len(calls) == 1  # cold: one real probe
    get_config("evolving")
    assert len(calls) == 1  # memory
    assert list(probe_cache_dir().glob("probe-*.json"))
    probe.clear_probe_cache(find_environment("evolving"))  # memory only
    get_config("evolving")
    assert len(calls) == 1  # disk
    # Another process (a second client) gets it from disk too: fast, no atroposlib import.
    code = (
        "import time, sys; t=time.perf_counter(); from hermes_rl.core.envs.drafts import get_config; "
        "v=get_config('evolving'); print(round(time.perf_counter()-t, 3), 'atroposlib' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, env={**os.environ}, timeout=60
    )
    seconds, imported = out.stdout.split()
    assert imported == "False", out.stderr
    assert float(seconds) < 3.0

    write_env(
        user_envs,
        "evolving",
        "evolving",
        fields={
            "level": "int = Field(default=5, description='Level')",
            "flavour": "str = Field(default='plain', description='Flavour')",
        },
    )
    bump_mtime(path)
    fields = rows(get_config("evolving"))
    assert len(calls) == 2  # the change was noticed and probed again
    assert fields["level"]["default"] == 5 and fields["flavour"]["default"] == "plain"


def test_homes_sharing_a_probe_cache_folder_probe_an_environment_once(tmp_path, monkeypatch):
    from hermes_rl.core.base.paths import PROBE_CACHE_ENV

    envs = tmp_path / "shared_envs"
    envs.mkdir()
    write_env(envs, "shared_one", "shared_one", fields={"level": "int = Field(default=3, description='Level')"})
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(envs))
    monkeypatch.delenv(PROBE_CACHE_ENV)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "alone"))
    assert probe_cache_dir() == tmp_path / "alone" / "rl" / "cache"  # the default: inside the home

    monkeypatch.setenv(PROBE_CACHE_ENV, str(tmp_path / "machine_cache"))
    calls = []
    real_probe = probe._run_probe
    monkeypatch.setattr(probe, "_run_probe", lambda env: calls.append(env.file) or real_probe(env))
    for home in ("first", "second"):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / home))
        probe.clear_probe_cache()  # a new client process: nothing in memory
        assert rows(get_config("shared_one"))["level"]["default"] == 3
    assert len(calls) == 1  # the second home read the first one's result
    assert list((tmp_path / "machine_cache").glob("probe-*.json"))
    assert not (tmp_path / "second" / "rl" / "cache").exists()


# --- edits and drafts -------------------------------------------------------------------------


def share_probe_on_disk(env_name: str) -> None:
    """Write this session's probe result into this test's $HERMES_HOME cache, as a first client would
    have, so a second client process reads it instead of importing atroposlib again."""
    env = find_environment(env_name)
    probe._remember(env, probe._signature(env), probe.probe_config(env))


def test_set_field_coerces_cli_text_and_persists_for_every_client(fixture_envs, hermes_home):
    share_probe_on_disk("fixture_basic")
    result = set_field("max_operand", "12", "fixture_basic")
    assert result["value"] == 12 and result["previous"] == 9 and result["modified"]
    set_fields(
        {
            "shuffle": "false",
            "temperature": "0.25",
            "difficulty": "HARD",
            "seed": "none",
            "stop_words": '["###"]',
            "group_size": "4",
        },
        "fixture_basic",
    )
    text = draft_file(hermes_home, "fixture_basic").read_text()
    assert "max_operand: 12" in text
    code = (
        "import json; from hermes_rl.core.envs.drafts import get_config; "
        "print(json.dumps({r['name']: [r['value'], r['modified']] for r in get_config('fixture_basic').editable}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, env={**os.environ}, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["max_operand"] == [12, True] and seen["shuffle"] == [False, True]
    assert seen["temperature"] == [0.25, True] and seen["difficulty"] == ["hard", True]
    assert seen["stop_words"] == [["###"], True] and seen["group_size"] == [4, True]
    assert seen["seed"] == [None, False]
    assert seen["batch_size"] == [PROFILE_VALUES["local"]["editable_defaults"]["batch_size"], False]


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("group_size", "1", "group_size must be >= 2"),
        ("group_size", "eight", "group_size must be an integer"),
        ("batch_size", "4", "batch_size (4) must be at least group_size (8)"),
        ("max_operand", "100", "max_operand must be <= 99"),
        ("temperature", "0", "temperature must be > 0"),
        ("steps_per_eval", "0", "steps_per_eval must be >= 1"),
        ("shuffle", "sometimes", "shuffle must be true or false"),
        ("answer_format", "latex", "answer_format must be one of plain, boxed"),
        ("prompt_prefix", "two\nlines", "prompt_prefix must be one line"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(fixture_envs, hermes_home, field, value, expected):
    with pytest.raises(BadInput) as caught:
        set_field(field, value, "fixture_basic")
    assert expected in caught.value.message
    assert not draft_file(hermes_home, "fixture_basic").exists()


def test_unknown_field_lists_the_valid_ones(fixture_envs):
    with pytest.raises(BadInput) as caught:
        set_field("max_opernad", "3", "fixture_basic")
    assert "unknown field 'max_opernad'" in caught.value.message
    assert caught.value.hint.startswith("did you mean max_operand?")
    assert "group_size" in caught.value.hint and "stop_words" in caught.value.hint


def test_locked_field_shows_its_value_why_and_how_to_change_it(fixture_envs):
    with pytest.raises(BadInput) as caught:
        set_field("max_token_length", "64", "fixture_basic")
    locked_at = PROFILE_VALUES["local"]["locked"]["max_token_length"]
    assert f"max_token_length is locked at {locked_at} by the local profile" in caught.value.message
    assert "backend" in caught.value.message and "infrastructure" not in caught.value.message
    # the hint says how: another profile, or a derived one
    assert "--profile" in caught.value.hint and "hermes-rl profile new NAME --from local" in caught.value.hint
    assert get_config("fixture_basic").locked_hint == caught.value.hint


def test_training_hyperparameters_are_per_run_values(fixture_envs, hermes_home):
    """learning_rate, total_steps and lora_rank are a draft's values and `start --set` overrides, recorded
    in the run's config.yaml; the profile only gives their defaults."""
    set_field("learning_rate", "3e-4", "fixture_basic")
    view = rows(get_config("fixture_basic"))
    assert view["learning_rate"]["value"] == 3e-4 and view["learning_rate"]["modified"]
    env, profile = find_environment("fixture_basic"), get_profile("local")
    values = resolve_run_values(env, profile, {"total_steps": "20", "lora_rank": "4"})
    cfg = build_run_config(env, profile, values, PORTS, RUN_ID)
    assert (cfg["tinker"]["learning_rate"], cfg["tinker"]["lora_rank"], cfg["env"]["total_steps"]) == (3e-4, 4, 20)
    assert "lora_rank" not in cfg["env"] and "learning_rate" not in cfg["env"]
    # compare shows what two runs' training values were
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.runs.compare import config_differences

    for run_id, rate in (("aaaa0001", "1e-4"), ("bbbb0002", "5e-4")):
        one = build_run_config(env, profile, resolve_run_values(env, profile, {"learning_rate": rate}), PORTS, run_id)
        run_dir(run_id).mkdir(parents=True)
        (run_dir(run_id) / "config.yaml").write_text(run_config_yaml(one))
    assert config_differences(["aaaa0001", "bbbb0002"]) == [
        {"key": "tinker.learning_rate", "values": {"aaaa0001": 1e-4, "bbbb0002": 5e-4}}
    ]
    with pytest.raises(BadInput, match="learning_rate must be <= 1"):
        resolve_run_values(env, profile, {"learning_rate": "3"})
    with pytest.raises(BadInput, match="learning_rate must be > 0"):
        set_field("learning_rate", "0", "fixture_basic")


def test_set_fields_is_all_or_nothing(fixture_envs, hermes_home):
    set_field("max_operand", "20", "fixture_basic")
    with pytest.raises(BadInput):
        set_fields({"max_operand": "30", "shuffle": "perhaps"}, "fixture_basic")
    assert rows(get_config("fixture_basic"))["max_operand"]["value"] == 20
    # Fields that only make sense together can be set together.
    set_fields({"group_size": "64", "batch_size": "128"}, "fixture_basic")
    assert rows(get_config("fixture_basic"))["group_size"]["value"] == 64


def test_reset_draft_restores_defaults(fixture_envs, hermes_home):
    set_field("max_operand", "3", "fixture_basic")
    reset_draft("fixture_basic")
    assert not draft_file(hermes_home, "fixture_basic").exists()
    assert rows(get_config("fixture_basic"))["max_operand"]["value"] == 9


@pytest.mark.parametrize(
    "content, expected",
    [
        ("max_operand: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: &a ['x','x','x']\nb: &b [*a,*a,*a]\nc: [*b,*b,*b]\n", "anchors and aliases"),
        ("max_operand: 3\n" + "# padding\n" * 40_000, "too large"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
    ids=["bad-yaml", "not-a-mapping", "alias-bomb", "too-large", "binary"],
)
def test_a_corrupt_draft_never_crashes_a_client_and_is_kept(fixture_envs, hermes_home, content, expected):
    path = draft_file(hermes_home, "fixture_basic")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    view = get_config("fixture_basic")
    assert any(expected in warning and str(path) in warning for warning in view.warnings)
    assert rows(view)["max_operand"]["value"] == 9  # defaults
    assert path.exists()  # reported, not deleted
    # The next edit keeps the old file aside and starts a fresh draft.
    result = set_field("max_operand", "4", "fixture_basic")
    assert any("moved to" in notice for notice in result["notices"])
    assert list(path.parent.glob(path.name + ".corrupt-*"))
    assert rows(get_config("fixture_basic"))["max_operand"]["value"] == 4


def test_bad_values_inside_a_draft_fall_back_field_by_field(fixture_envs, hermes_home):
    path = draft_file(hermes_home, "fixture_basic")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("max_operand: lots\nshuffle: false\nmax_token_length: 64\nvanished_field: 1\n")
    view = get_config("fixture_basic")
    fields = rows(view)
    assert fields["max_operand"]["value"] == 9 and fields["shuffle"]["value"] is False
    joined = " | ".join(view.warnings)
    assert "max_operand must be an integer" in joined and "max_token_length is locked" in joined
    assert "'vanished_field' is not a field" in joined


def _editor(env_dir: str, home: str, slot: int, rounds: int, queue) -> None:
    os.environ["HERMES_HOME"], os.environ["HERMES_RL_ENV_PATH"] = home, env_dir
    try:
        for value in range(rounds):
            set_field(f"slot_{slot:02d}", str(slot * 100 + value), "fixture_many")
        queue.put(("ok", slot))
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put(("error", f"{slot}: {exc!r}"))


def _reader(env_dir: str, home: str, done, queue) -> None:
    os.environ["HERMES_HOME"], os.environ["HERMES_RL_ENV_PATH"] = home, env_dir
    reads, problems = 0, []
    while not done.is_set() or reads == 0:
        view = get_config("fixture_many")
        problems += view.warnings
        reads += 1
        time.sleep(0.005)  # a client refreshing, not a busy loop starving the editors
    queue.put(("reader", reads, problems))


@pytest.mark.timeout(300)
def test_concurrent_editors_never_corrupt_or_lose_a_draft(fixture_envs, hermes_home):
    editors, rounds = 30, 4
    get_config("fixture_many")  # probe once; forked editors inherit the cache
    ctx = multiprocessing.get_context("fork")
    queue, done = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_editor, args=(str(fixture_envs), str(hermes_home), slot, rounds, queue))
        for slot in range(editors)
    ]
    readers = [ctx.Process(target=_reader, args=(str(fixture_envs), str(hermes_home), done, queue)) for _ in range(2)]
    for proc in readers + procs:
        proc.start()
    results = [queue.get(timeout=240) for _ in procs]
    done.set()
    results += [queue.get(timeout=60) for _ in readers]
    procs += readers
    for proc in procs:
        proc.join(timeout=30)
    assert [r for r in results if r[0] == "error"] == []
    readers = [r for r in results if r[0] == "reader"]
    assert all(reads > 0 and problems == [] for _, reads, problems in readers)
    draft = yaml.safe_load(draft_file(hermes_home, "fixture_many").read_text())
    assert draft == {f"slot_{slot:02d}": slot * 100 + rounds - 1 for slot in range(editors)}


# --- selection --------------------------------------------------------------------------------


def test_selection_is_shared_and_used_by_default(fixture_envs, hermes_home):
    assert current_selection() == {"environment": None, "profile": None}
    result = select_environment("fixture_basic", "local")
    assert result["environment"] == fixture_id("fixture_basic")
    assert current_selection() == {"environment": fixture_id("fixture_basic"), "profile": "local"}
    assert get_config().environment == fixture_id("fixture_basic")
    set_field("max_operand", "5")  # no env given: the selection
    assert rows(get_config("fixture_basic"))["max_operand"]["value"] == 5
    select_environment("fixture_child")  # no profile given: the earlier choice stays
    assert current_selection() == {"environment": fixture_id("fixture_child"), "profile": "local"}


def test_selecting_something_that_does_not_exist_fails_and_keeps_the_old_selection(fixture_envs):
    select_environment("fixture_basic")
    with pytest.raises(NotFound):
        select_environment("nope")
    with pytest.raises(NotFound):
        select_environment("fixture_basic", "nope")
    with pytest.raises(BadInput):
        select_environment("broken_syntax")
    assert current_selection()["environment"] == fixture_id("fixture_basic")


def test_a_corrupt_selection_file_is_reported_not_fatal(fixture_envs, hermes_home):
    path = hermes_home / "rl" / "current.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("environment: [oops\n")
    selection = current_selection()
    assert selection["environment"] is None and "current.yaml" in selection["warning"]
    path.write_text("environment: 42\n")
    assert "environment" in current_selection()["warning"]


# --- the run's config.yaml --------------------------------------------------------------------


def test_run_config_has_the_tinker_atropos_shape(fixture_envs, hermes_home):
    env, profile = find_environment("fixture_basic"), get_profile("local")
    set_field("max_operand", "7", "fixture_basic")
    values = resolve_run_values(env, profile, {"group_size": "4", "batch_size": "16"})
    assert rows(get_config("fixture_basic"))["group_size"]["value"] == 8  # overrides are not saved
    assert values["wandb_name"].startswith("fixture_basic-") and "{" not in values["wandb_name"]
    cfg = build_run_config(env, profile, values, PORTS, RUN_ID)

    run_folder = hermes_home / "rl" / "runs" / RUN_ID
    assert list(cfg)[:3] == ["env", "openai", "tinker"]
    e = cfg["env"]
    assert (e["group_size"], e["batch_size"], e["max_operand"]) == (4, 16, 7)
    assert e["rollout_server_url"] == "http://127.0.0.1:18000"
    assert e["tokenizer_name"] == profile.locked["tokenizer_name"].value
    assert (e["max_token_length"], e["total_steps"]) == (
        profile.locked["max_token_length"].value,
        profile.editable_defaults["total_steps"],
    )
    assert {"use_wandb", "wandb_name", "steps_per_eval", "ensure_scores_are_not_same", "max_num_workers"} <= set(e)
    assert e["env_metrics_path"] == str(run_folder / "env_metrics.jsonl")
    assert isinstance(cfg["openai"], list) and len(cfg["openai"]) == 1
    server = cfg["openai"][0]
    assert server["base_url"] == "http://127.0.0.1:18001/v1" and server["api_key"] == "$HERMES_RL_ENDPOINT_KEY"
    assert {"model_name", "server_type", "timeout", "num_requests_for_eval", "weight"} <= set(server)
    t = cfg["tinker"]
    assert t["checkpoint_dir"] == str(run_folder / "checkpoints")
    assert (t["lora_rank"], t["learning_rate"]) == (
        profile.editable_defaults["lora_rank"],
        profile.editable_defaults["learning_rate"],
    ) and t["wandb_run_name"] == e["wandb_name"]
    assert cfg["backend"] == {
        "kind": "local",
        "base_url": "http://127.0.0.1:18002",
        "model_dir": profile.locked["base_model"].value,
    }
    assert cfg["hermes"]["metrics_path"] == str(run_folder / "metrics.jsonl")
    assert cfg["hermes"]["run_id"] == RUN_ID and cfg["hermes"]["profile"] == "local"
    assert yaml.safe_load(run_config_yaml(cfg)) == cfg


def test_run_config_for_tinker_cloud_never_contains_a_secret(fixture_envs, monkeypatch):
    secret = "tml-very-secret-value-123"
    monkeypatch.setenv("TINKER_API_KEY", secret)
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-456789")
    env, profile = find_environment("fixture_basic"), get_profile("tinker")
    cfg = build_run_config(env, profile, resolve_run_values(env, profile), {"api": 1, "inference": 2}, RUN_ID)
    text = run_config_yaml(cfg)
    assert secret not in text and "wandb-secret" not in text
    assert cfg["backend"] == {"kind": "tinker", "base_url": None, "model_dir": None}
    assert cfg["tinker"]["base_model"] == "Qwen/Qwen3-8B"
    with pytest.raises(BadInput, match="secret"):
        set_field("wandb_name", secret, "fixture_basic")
    with pytest.raises(BadInput, match="locked"):
        build_run_config(env, profile, {"base_model": "x"}, {"api": 1, "inference": 2}, RUN_ID)
    with pytest.raises(BadInput, match="port"):
        build_run_config(env, profile, {}, {"api": "x", "inference": 2}, RUN_ID)
    with pytest.raises(BadInput, match="run id"):
        build_run_config(env, profile, {}, {"api": 1, "inference": 2}, "../../etc")


SERVE_CAPTURE = textwrap.dedent('''
    """Run each environment's real `serve --config` CLI; capture what it would build the env with."""
    import importlib.util, json, sys

    class Captured(BaseException):
        pass

    for file, class_name, config_path in json.loads(sys.argv[1]):
        sys.path.insert(0, str(__import__("pathlib").Path(file).parent))
        spec = importlib.util.spec_from_file_location("env_" + class_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # pydantic resolves postponed annotations through it
        spec.loader.exec_module(module)
        cls = getattr(module, class_name)

        def capture(self, config, server_configs, slurm=False, testing=False):
            servers = server_configs if isinstance(server_configs, list) else [server_configs]
            print("CAPTURED " + json.dumps({"class": class_name, "env": config.model_dump(mode="json"),
                  "servers": [s.model_dump(mode="json") for s in servers],
                  "server_type": type(server_configs).__name__, "slurm": slurm, "testing": testing}), flush=True)
            raise Captured()

        cls.__init__ = capture
        cls.__abstractmethods__ = frozenset()  # fixtures need not implement the rollout methods
        sys.argv = [file, "serve", "--config", config_path]
        try:
            cls.cli()
        except (Captured, SystemExit):
            pass
''')


def test_run_config_loads_unchanged_in_atroposlib_serve(fixture_envs, hermes_home, tmp_path):
    """The env section and the openai list reach the environment through atroposlib's own CLI."""
    targets = [("fixture_basic", "local")]
    if (PROJECT_ROOT / "environments" / "toy_addition.py").exists():
        targets.append(("toy_addition", "local"))
    jobs, expected = [], {}
    for name, profile_name in targets:
        env, profile = find_environment(name), get_profile(profile_name)
        overrides = {"group_size": "4", "batch_size": "12"}
        if name == "fixture_basic":
            overrides.update(difficulty="hard", stop_words='["END"]')
        cfg = build_run_config(env, profile, resolve_run_values(env, profile, overrides), PORTS, RUN_ID)
        path = tmp_path / f"{name}.yaml"
        path.write_text(run_config_yaml(cfg))
        jobs.append((env.file, env.class_name, str(path)))
        expected[env.class_name] = cfg
    script = tmp_path / "serve_capture.py"
    script.write_text(SERVE_CAPTURE)
    out = subprocess.run(
        [sys.executable, str(script), json.dumps(jobs)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    captured = [
        json.loads(line[len("CAPTURED ") :]) for line in out.stdout.splitlines() if line.startswith("CAPTURED ")
    ]
    assert len(captured) == len(jobs), out.stdout[-2000:] + out.stderr[-3000:]
    for got in captured:
        cfg = expected[got["class"]]
        for key in (
            "group_size",
            "batch_size",
            "tokenizer_name",
            "rollout_server_url",
            "max_token_length",
            "total_steps",
            "wandb_name",
            "use_wandb",
            "steps_per_eval",
            "ensure_scores_are_not_same",
        ):
            assert got["env"][key] == cfg["env"][key], key
        assert got["server_type"] == "list" and len(got["servers"]) == 1  # the YAML list reached the env
        server = got["servers"][0]
        assert server["base_url"] == "http://127.0.0.1:18001/v1"
        assert server["model_name"] == cfg["openai"][0]["model_name"] and server["api_key"] == "$HERMES_RL_ENDPOINT_KEY"
        assert server["timeout"] == cfg["openai"][0]["timeout"]
        if got["class"] == "BasicEnv":
            assert got["env"]["difficulty"] == "hard" and got["env"]["stop_words"] == ["END"]
