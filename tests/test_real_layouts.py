"""Environments as users bring them (tests/fixtures_layouts.py): found recursively, told apart by id,
imported from the root their author intended, configured, and — when they cannot run — saying why."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.failures import describe_failure
from hermes_rl.core.envs import discovery, probe
from hermes_rl.core.envs.discovery import discover_environments, find_environment, import_root
from hermes_rl.core.envs.drafts import get_config, select_environment
from tests.fixtures_layouts import write_env


def ids(envs=None):
    """Every environment by its id, and the first of each name by the bare name that selects it."""
    envs = envs if envs is not None else discover_environments()
    out = {}
    for env in envs:
        out.setdefault(env.name, env)
    out.update({env.id: env for env in envs})
    return out


def test_every_folder_below_a_root_is_scanned_and_nothing_it_should_skip(atropos_clone):
    found = ids()
    assert found["chess_deep"].file.endswith("games/board/chess/chess_env.py")  # three folders deep
    assert {"puzzle", "member1", "member2", "family_base"} <= set(found)
    # hidden folders, caches, node_modules, a virtualenv and site-packages are not scanned; the loop ends
    assert not [env for env in found.values() if env.name == "must_not_be_found"]
    assert discovery.discovery_notices() == []


def test_the_depth_limit_is_reported_not_silent(atropos_clone, monkeypatch):
    monkeypatch.setattr(discovery, "MAX_DEPTH", 1)
    discovery.clear_cache()
    found = ids()
    assert "chess_deep" not in found and "puzzle" in found
    (notice,) = [n for n in discovery.discovery_notices() if "environments" in n]
    assert "deeper than 1 levels not scanned" in notice


def test_parses_are_kept_on_disk_so_a_new_process_parses_only_what_changed(atropos_clone, hermes_home):
    discover_environments()
    cache = hermes_home / "rl" / "cache" / "discovery.json"
    assert cache.exists()
    code = (
        "from hermes_rl.core.envs import discovery as d\n"
        "parsed = []\nreal = d._scan_file\n"
        "d._scan_file = lambda p, s: parsed.append(p.name) or real(p, s)\n"
        "envs = d.discover_environments()\nprint(sorted(parsed), len(envs))\n"
    )
    target = atropos_clone / "environments" / "puzzles" / "puzzle_env.py"
    target.write_text(target.read_text() + "\n# edited\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), check=True)
    assert out.stdout.split(" ")[0] == "['puzzle_env.py']", out.stdout  # only the edited file


def test_an_abstract_base_is_marked_and_refused_while_its_subclasses_run(atropos_clone):
    from hermes_rl.core.runs import start_run

    found = ids()
    assert found["family_base"].abstract == "abstract: evaluate, get_next_item not implemented"
    assert found["member1"].abstract is None and found["member2"].abstract is None
    assert found["member1"].base_files == (found["family_base"].file,)
    with pytest.raises(BadInput) as caught:
        start_run("family_base", "local")
    assert "cannot be run" in caught.value.message and "get_next_item" in caught.value.message


def test_same_named_environments_get_distinct_ids_and_each_can_be_selected(checkout, hermes_home):
    found = ids()
    project, theirs = found["gsm8k"], found["gsm8k@tinker-atropos"]
    assert project.source == "project" and theirs.source == "tinker-atropos"
    assert theirs.duplicate_of == project.file  # the bare name means the project's
    assert find_environment("gsm8k") is not None and find_environment("gsm8k").file == project.file
    for ref in ("gsm8k@tinker-atropos", "GSM8kTinkerEnv", theirs.file):
        assert find_environment(ref).file == theirs.file
    assert select_environment("gsm8k@tinker-atropos")["environment"] == "gsm8k@tinker-atropos"
    assert "gsm8k@tinker-atropos" in (hermes_home / "rl" / "current.yaml").read_text()


def test_an_ambiguous_reference_lists_the_candidates(tmp_path, monkeypatch):
    first, second = tmp_path / "one", tmp_path / "two"
    write_env(first / "a.py", "SameEnv", "alpha")
    write_env(second / "b.py", "SameEnv", "beta")
    monkeypatch.setenv("HERMES_RL_ENV_PATH", os.pathsep.join([str(first), str(second)]))
    with pytest.raises(BadInput) as caught:
        find_environment("SameEnv")
    assert "ambiguous" in caught.value.message
    assert "alpha@one (SameEnv in" in caught.value.message and "beta@two (SameEnv in" in caught.value.message


def test_the_tools_and_the_cli_show_duplicates_distinctly(checkout):
    from hermes_rl.core.clients import toolset

    listed = toolset.rl_list_environments()
    rows = [row for row in listed["environments"] if row["name"] == "gsm8k"]
    assert sorted(row["id"] for row in rows) == ["gsm8k", "gsm8k@tinker-atropos"]
    assert {row["id"]: row["bare_name_selects_this"] for row in rows} == {
        "gsm8k": True,
        "gsm8k@tinker-atropos": False,
    }
    chosen = toolset.rl_select_environment("gsm8k@tinker-atropos")
    assert chosen["selected"] == "gsm8k@tinker-atropos"
    out = subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", "envs"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "gsm8k (bare name)" in out and "gsm8k@tinker-atropos" in out


def test_import_roots_follow_the_authors_layout(atropos_clone, checkout, monkeypatch):
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(atropos_clone / "environments"))
    found = ids()
    puzzle = import_root(found["puzzle"])  # imports environments.* and a sibling
    assert puzzle.root == str(atropos_clone) and puzzle.cwd == str(atropos_clone)
    assert puzzle.sys_path == (str(atropos_clone), str(atropos_clone / "environments" / "puzzles"))
    assert import_root(found["chess_deep"]).root.endswith("games/board/chess")  # a loose script: its folder
    theirs = import_root(found["gsm8k@tinker-atropos"])
    assert theirs.root == str(checkout) and theirs.cwd == str(checkout)
    monkeypatch.setenv("PYTHONPATH", "/users/own/path")
    assert theirs.pythonpath(os.environ["PYTHONPATH"]).split(os.pathsep)[-1] == "/users/own/path"


def test_the_run_pipeline_records_the_import_root_and_working_folder(checkout):
    from hermes_rl.core.envs.profiles import resolve_profile
    from hermes_rl.core.runs.training import training_pipeline

    env = find_environment("gsm8k@tinker-atropos")
    specs = {spec.name: spec for spec in training_pipeline("0000abcd", resolve_profile("local")[0], env)}
    assert specs["env"].cwd == str(checkout)
    assert specs["env"].env["PYTHONPATH"].split(os.pathsep)[0] == str(checkout)
    project = {s.name: s for s in training_pipeline("0000abcd", resolve_profile("local")[0], find_environment("gsm8k"))}
    assert project["env"].cwd is None and "PYTHONPATH" not in project["env"].env  # the installed package


@pytest.mark.timeout(240)
def test_configs_load_from_the_intended_root(atropos_clone, checkout, monkeypatch):
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(atropos_clone / "environments"))

    # the checkout's environment reads configs/default.yaml relative to its root and imports its package
    def probed_group_size(ref):
        result = probe.probe_config(find_environment(ref))
        return {row["name"]: row["default"] for row in result["fields"]}["group_size"]

    assert probed_group_size("gsm8k@tinker-atropos") == 7
    # the clone's package environment imports a sibling module and environments.shared.scoring
    assert probed_group_size("puzzle") == 2 + 4
    # and a client's config view of it loads (the profile's group_size wins over the environment's)
    assert get_config("puzzle").to_dict()["environment"] == f"puzzle@{atropos_clone.name}"


@pytest.mark.timeout(240)
def test_a_missing_package_is_named_cached_and_refreshable(user_envs, monkeypatch):
    write_env(user_envs / "needs_pkg.py", "NeedsPkgEnv", "needs_pkg", imports="import hermes_rl_not_installed_pkg\n")
    env = find_environment("needs_pkg")
    with pytest.raises(BadInput) as caught:
        probe.probe_config(env)
    message = caught.value.message
    assert "ModuleNotFoundError: No module named 'hermes_rl_not_installed_pkg'" in message
    assert "pip install hermes-rl-not-installed-pkg" in message
    # cached, on disk too: a new process (no memory cache) answers without probing again
    probe.clear_probe_cache(env)
    monkeypatch.setattr(probe, "_run_probe", lambda env: pytest.fail("probed again"))
    with pytest.raises(BadInput) as again:
        probe.probe_config(env)
    assert again.value.message == message and "--refresh" in again.value.hint
    calls = []
    monkeypatch.setattr(probe, "_run_probe", lambda env: calls.append(env) or {"ok": True, "fields": []})
    assert probe.probe_config(env, refresh=True) == {"ok": True, "fields": []} and len(calls) == 1


def test_failure_lines_name_the_cause():
    missing = (
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "ModuleNotFoundError: No module named 'langdetect'\n"
    )
    assert describe_failure(missing) == (
        "ModuleNotFoundError: No module named 'langdetect' (install the package that provides langdetect: "
        "pip install langdetect)"
    )
    assert "pip install pyyaml" in describe_failure("ModuleNotFoundError: No module named 'yaml'")
    assert "import root" in describe_failure("ModuleNotFoundError: No module named 'tinker_atropos'")
    offline = "ConnectionError: Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)"
    assert "dataset 'openai/gsm8k' cannot be loaded offline (HF_DATASETS_OFFLINE" in describe_failure(offline)
    assert describe_failure("all fine\nno exception here\n") is None


# -- runs: the failure is the run's reason, and a failure a restart repeats is not restarted -------------


def _wait_final(run_id: str, timeout: float) -> dict:
    from hermes_rl.core import runs

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = runs.get_run(run_id, sample=False)
        if run["status"] in ("completed", "failed", "stopped", "lost"):
            return run
        time.sleep(0.3)
    runs.stop_run(run_id, force=True)
    raise AssertionError(f"run {run_id} did not end in {timeout}s")


def _launch_one(tmp_path: Path, script: str, env: dict | None = None) -> dict:
    from hermes_rl.core.daemons.pipeline import ProcessSpec, RestartPolicy
    from hermes_rl.core.runs import launch

    path = tmp_path / "proc.py"
    path.write_text(script)
    spec = ProcessSpec(
        name="env",
        argv=[sys.executable, str(path)],
        env=env or {},
        restart=RestartPolicy(mode="on_failure", max_restarts=2, backoff_s=0.2),
    )
    run = launch([spec], environment="layout", profile="local")
    return _wait_final(run["run_id"], 120)


def test_an_import_error_fails_the_run_with_its_line_and_no_restart(tmp_path):
    run = _launch_one(tmp_path, "import langdetect_not_here\n")
    assert run["status"] == "failed"
    assert run["reason"].startswith(
        "env exited with code 1: ModuleNotFoundError: No module named 'langdetect_not_here' (install"
    ), run["reason"]
    assert "not restarted" in run["reason"]
    (proc,) = run["processes"]
    assert proc["restarts"] == 0


def test_the_same_failure_twice_before_ready_is_not_restarted_a_third_time(tmp_path):
    marker = tmp_path / "attempts"
    script = f"open({str(marker)!r}, 'a').write('x')\nraise RuntimeError('cannot open the database')\n"
    run = _launch_one(tmp_path, script)
    assert "RuntimeError: cannot open the database" in run["reason"]
    assert "failed the same way as the attempt before" in run["reason"]
    assert marker.read_text() == "xx"  # one restart for a failure not yet known to repeat, not two


def test_a_different_failure_is_still_restarted_by_policy(tmp_path):
    marker = tmp_path / "attempts"
    script = (
        f"n = len(open({str(marker)!r}).read()) if __import__('os').path.exists({str(marker)!r}) else 0\n"
        f"open({str(marker)!r}, 'a').write('x')\nraise RuntimeError(f'attempt {{n}}')\n"
    )
    run = _launch_one(tmp_path, script)
    assert marker.read_text() == "xxx" and "RuntimeError: attempt 2" in run["reason"]
    assert "gave up after 2 restarts" in run["reason"]


@pytest.mark.timeout(180)
def test_a_dataset_that_cannot_load_offline_says_so(tmp_path):
    script = "from datasets import load_dataset\nload_dataset('hermes-rl-fixture/not-cached')\n"
    run = _launch_one(tmp_path, script, env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert "Couldn't reach 'hermes-rl-fixture/not-cached' on the Hub" in run["reason"], run["reason"]
    assert "cannot be loaded offline (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set)" in run["reason"]
    assert run["processes"][0]["restarts"] == 0  # offline stays offline: no restart


# -- the real pipeline on the local backend -------------------------------------------------------------


@pytest.fixture
def local_model(tiny_model_dir):
    from tests.fixtures_model import use_tiny_model

    return use_tiny_model(tiny_model_dir, total_steps=400)


@pytest.mark.timeout(420)
def test_a_checkout_environment_trains_from_its_own_root(runnable_checkout, local_model):
    from hermes_rl.core import runs
    from hermes_rl.core.base.fsutil import read_json, read_jsonl
    from hermes_rl.core.base.paths import run_dir

    run = runs.start_run("toy_checkout", "local")
    folder = run_dir(run["run_id"])
    try:
        deadline = time.monotonic() + 360
        while time.monotonic() < deadline:
            state = runs.get_run(run["run_id"], sample=False)
            assert state["status"] not in ("failed", "stopped", "lost"), state.get("reason")
            if (folder / "metrics.jsonl").exists() and read_jsonl(folder / "metrics.jsonl"):
                break
            time.sleep(1)
        else:
            raise AssertionError("the trainer took no step")
    finally:
        runs.stop_run(run["run_id"])
    env_spec = next(spec for spec in read_json(folder / "pipeline.json") if spec["name"] == "env")
    assert env_spec["cwd"] == str(runnable_checkout)
    assert env_spec["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(runnable_checkout)
    # and the status report shows them
    from hermes_rl.core.runs import report

    env_status = next(p for p in report.status_report(run["run_id"])["processes"] if p["name"] == "env")
    assert env_status["cwd"] == str(runnable_checkout) and env_status["import_path"][0] == str(runnable_checkout)


@pytest.mark.timeout(300)
def test_a_checkout_environment_gets_past_its_imports_and_fails_on_the_offline_dataset(runnable_checkout, local_model):
    from hermes_rl.core import runs

    run = runs.start_run("hub_dataset", "local")
    final = _wait_final(run["run_id"], 240)
    assert final["status"] == "failed"
    assert "Couldn't reach 'hermes-rl-fixture/gsm8k-like' on the Hub" in final["reason"], final["reason"]
    assert "cannot be loaded offline" in final["reason"]
    assert "ModuleNotFoundError" not in final["reason"]
    assert next(p for p in final["processes"] if p["name"] == "env")["restarts"] == 0
