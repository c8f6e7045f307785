"""An environment is found, named and loaded the same way whatever else is configured: ids that depend
only on their own root and path (old ids still work), "did you mean" for a name that is not there,
one loader for the config probe and the run (relative imports inside a package), a fit check against
the profile model's context before anything starts, and restarts only where they can help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.envs import discovery

ENV_SOURCE = """
from atroposlib.envs.base import BaseEnv


class {cls}(BaseEnv):
    name = "{name}"
"""


def _env_file(path: Path, name: str, cls: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ENV_SOURCE.format(name=name, cls=cls))
    return path


@pytest.fixture
def two_roots(tmp_path, monkeypatch):
    """A tinker-atropos checkout holding gsm8k, and an Atropos-like tree whose environments folder
    holds two more of that name (configured or not, by the test)."""
    checkout = tmp_path / "tinker-atropos"
    _env_file(checkout / "tinker_atropos" / "environments" / "gsm8k_tinker.py", "gsm8k", "GSM8kTinkerEnv")
    atropos = tmp_path / "atropos" / "environments"
    _env_file(atropos / "gsm8k_server.py", "gsm8k", "GSM8kEnv")
    _env_file(atropos / "community" / "gsm8k_server.py", "gsm8k", "GSM8kCommunityEnv")
    monkeypatch.setenv(discovery.TINKER_ATROPOS_VAR, str(checkout))
    monkeypatch.delenv(discovery.ENV_PATH_VAR, raising=False)
    discovery.clear_cache()
    yield atropos
    discovery.clear_cache()


def _ids(name: str = "gsm8k") -> dict[str, str]:
    discovery.clear_cache()
    return {env.file: env.id for env in discovery.discover_environments() if env.name == name}


def test_ids_stay_the_same_with_and_without_a_second_root(two_roots, monkeypatch):
    alone = _ids()
    tinker_file = next(f for f in alone if "tinker_atropos" in f)
    assert alone[tinker_file] == "gsm8k@tinker-atropos"
    monkeypatch.setenv(discovery.ENV_PATH_VAR, str(two_roots))
    both = _ids()
    assert both[tinker_file] == "gsm8k@tinker-atropos"  # unchanged by the new root
    assert {k: v for k, v in both.items() if k in alone} == alone
    theirs = sorted(v for k, v in both.items() if k not in alone)
    # an `environments` folder is named by its parent; two of one name in one root by their paths
    assert theirs == ["gsm8k@atropos.community.gsm8k_server", "gsm8k@atropos.gsm8k_server"]
    # another root, with a gsm8k of its own, changes none of them
    other = two_roots.parent.parent / "other"
    _env_file(other / "gsm8k_main.py", "gsm8k", "OtherGSM8k")
    monkeypatch.setenv(discovery.ENV_PATH_VAR, os.pathsep.join([str(two_roots), str(other)]))
    three = _ids()
    assert {k: v for k, v in three.items() if k in both} == both
    assert three[str(other / "gsm8k_main.py")] == "gsm8k@other"


def test_an_id_saved_before_migrates_in_the_selection_and_the_draft(two_roots, monkeypatch, hermes_home):
    from hermes_rl.core.envs import drafts

    monkeypatch.setenv(discovery.ENV_PATH_VAR, str(two_roots))
    discovery.clear_cache()
    # what the shortest-unique scheme once saved for the checkout's gsm8k with both roots configured
    old = "gsm8k@gsm8k_tinker"
    (hermes_home / "rl").mkdir(parents=True, exist_ok=True)
    (hermes_home / "rl" / "current.yaml").write_text(f"environment: {old}\nprofile: null\n")
    (hermes_home / "rl" / "drafts").mkdir(parents=True, exist_ok=True)
    (hermes_home / "rl" / "drafts" / f"{old}.yaml").write_text("group_size: 4\n")
    env = discovery.find_environment(old)
    assert env.id == "gsm8k@tinker-atropos" and old in env.aliases
    draft = drafts._read_draft(drafts._draft_id(env))[0]
    assert draft == {"group_size": 4}  # the edit made under the old id is kept
    assert (hermes_home / "rl" / "drafts" / "gsm8k@tinker-atropos.yaml").exists()
    assert not (hermes_home / "rl" / "drafts" / f"{old}.yaml").exists()
    drafts._resolve(None, "local")
    assert "gsm8k@tinker-atropos" in (hermes_home / "rl" / "current.yaml").read_text()


def test_an_unknown_name_gets_did_you_mean_not_the_whole_list(two_roots, monkeypatch):
    monkeypatch.setenv(discovery.ENV_PATH_VAR, str(two_roots))
    discovery.clear_cache()
    with pytest.raises(NotFound) as caught:
        discovery.find_environment("gsm8k_server")
    hint = caught.value.hint
    assert hint.startswith("did you mean ") and "gsm8k@atropos.gsm8k_server" in hint, hint
    assert "`hermes-rl envs` lists all" in hint and len(hint) < 400
    with pytest.raises(NotFound) as nothing:
        discovery.find_environment("zzzz_qqqq")
    assert nothing.value.hint.startswith("`hermes-rl envs` lists all")


# -- one loader: a package with relative imports configures and starts, or fails the same way in both ---

PACKAGE_ENV = '''
"""Toy addition from inside a package, reaching its helpers by a relative import."""

from hermes_rl.environments.toy_addition import ToyAdditionEnv

from .{helper} import GREETING


class RelativeEnv(ToyAdditionEnv):
    name = "{name}"
    greeting = GREETING


if __name__ == "__main__":
    RelativeEnv.cli()
'''


def _package(root: Path, name: str, helper: str) -> Path:
    package = root / f"{name}_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text('GREETING = "hello"\n')
    (package / "env.py").write_text(textwrap.dedent(PACKAGE_ENV.format(name=name, helper=helper)).lstrip())
    return package / "env.py"


def _launch_env_file(env, *args: str) -> subprocess.CompletedProcess:
    """The env file as the run's `env` process starts it (argv, import root, working folder)."""
    from hermes_rl.core.envs.profiles import get_profile
    from hermes_rl.core.runs.training import training_pipeline

    spec = next(s for s in training_pipeline("0badc0de", get_profile("local"), env) if s.name == "env")
    argv = [a for a in spec.argv if a not in ("--config", "{run_dir}/config.yaml")]
    argv = argv[: argv.index("serve")] + list(args)
    child_env = {**os.environ, **{k: v for k, v in spec.env.items() if "{" not in v}}
    return subprocess.run(argv, cwd=spec.cwd, env=child_env, capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(300)
def test_a_package_with_relative_imports_configures_and_starts(tmp_path, monkeypatch, hermes_home):
    from hermes_rl.core.base.failures import exception_line
    from hermes_rl.core.envs import drafts

    root = tmp_path / "extra"
    _package(root, "relative_ok", "helpers")
    _package(root, "relative_bad", "missing_helpers")
    monkeypatch.setenv(discovery.ENV_PATH_VAR, str(root))
    discovery.clear_cache()

    good = discovery.find_environment("relative_ok")
    assert "group_size" in drafts.get_config("relative_ok", "local").values()  # the probe imported it
    started = _launch_env_file(good, "serve", "--help")
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    assert "usage" in (started.stdout + started.stderr).lower()

    bad = discovery.find_environment("relative_bad")
    with pytest.raises(BadInput) as probed:
        drafts.get_config("relative_bad", "local")
    failed = _launch_env_file(bad, "serve", "--help")
    assert failed.returncode != 0
    line = exception_line(failed.stdout + failed.stderr)
    assert line == "ModuleNotFoundError: No module named 'relative_bad_pkg.missing_helpers'", line
    assert line in str(probed.value)  # the probe says what the run would say


@pytest.mark.timeout(300)
def test_a_package_holding_a_module_of_its_own_name_still_imports_as_the_package(tmp_path, monkeypatch):
    """`mathpkg/` holding `mathpkg.py` beside `env.py` (a layout of the public tree: infinimath): the run
    imports `mathpkg.env` with the package's parent first on sys.path, as `python -m mathpkg.env` would;
    the file's own folder first would make `import mathpkg` find the module and every relative import fail."""
    from hermes_rl.core.envs import drafts

    root = tmp_path / "extra"
    env_file = _package(root, "shadowed", "helpers")
    package = env_file.parent
    (package / f"{package.name}.py").write_text("# a module named like its package\nVALUE = 1\n")
    monkeypatch.setenv(discovery.ENV_PATH_VAR, str(root))
    discovery.clear_cache()

    assert "group_size" in drafts.get_config("shadowed", "local").values()  # the probe imported it
    started = _launch_env_file(discovery.find_environment("shadowed"), "serve", "--help")
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]


# -- fit: what the environment generates against the profile model's context ---------------------------


def test_max_token_length_past_the_models_context_is_refused_naming_both(tmp_path, hermes_home):
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import profiles_dir, runs_dir

    model = tmp_path / "small-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 1024}))
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "small.yaml").write_text(
        f"extends: local\nbase_model: {model}\ntokenizer_name: {model}\nmax_token_length: 2000\n"
    )
    with pytest.raises(BadInput) as refused:
        runs.start_run("toy_addition", "small")
    assert "max_token_length 2000 does not fit the model's context of 1024 tokens" in refused.value.message
    assert "small-model's config.json max_position_embeddings" in refused.value.message
    assert not runs_dir().exists() or not any(runs_dir().iterdir())  # nothing started


# -- restarts only where they help -----------------------------------------------------------------------

OFFLINE_AFTER_A_WHILE = """
import time
time.sleep(3)  # a while in: restarts are judged by what failed, not by how soon
from datasets import load_dataset
load_dataset("hermes-rl-fixture/not-cached-anywhere")
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_offline_dataset_failure_under_cpu_load_is_not_restarted(tmp_path, hermes_home):
    from hermes_rl.core.daemons.pipeline import ProcessSpec, RestartPolicy
    from hermes_rl.core.runs import launch
    from tests.fixtures_core import wait_status

    script = tmp_path / "offline_env.py"
    script.write_text(OFFLINE_AFTER_A_WHILE)
    spec = ProcessSpec(  # no readiness check: it never proves it started, however long it ran
        name="env",
        argv=[sys.executable, str(script)],
        env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
        restart=RestartPolicy(mode="on_failure", max_restarts=2, backoff_s=0.2),
    )
    burn = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", burn]) for _ in range(2)]
    try:
        launched = time.time()
        run = launch([spec], environment="layout", profile="local")
        run = wait_status(run["run_id"], "failed", timeout=200)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print(f"\noffline dataset under load: launch→reason {time.time() - launched:.0f} s")
    assert "cannot be loaded offline" in run["reason"] and "not restarted" in run["reason"], run["reason"]
    assert run["processes"][0]["restarts"] == 0


# -- hints for the ecosystem as it is: atroposlib 0.4.0 is the last release ----------------------------

NEWER_ATROPOS = """
from atroposlib.envs.base import BaseEnv
from atroposlib.envs.base import ScoredDataGroupV2  # a name a later atroposlib might have


class NeedsNewerEnv(BaseEnv):
    name = "needs_newer"
"""


@pytest.mark.timeout(180)
def test_a_name_atroposlib_lacks_is_told_to_need_another_atroposlib(hermes_home):
    from importlib import metadata

    from hermes_rl.core.base.paths import user_environments_dir
    from hermes_rl.core.envs import drafts

    folder = user_environments_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "needs_newer.py").write_text(NEWER_ATROPOS)
    discovery.clear_cache()
    with pytest.raises(BadInput) as caught:
        drafts.get_config("needs_newer", "local")
    text = f"{caught.value.message} {caught.value.hint}"
    version = metadata.version("atroposlib")
    assert "cannot import name 'ScoredDataGroupV2' from 'atroposlib.envs.base'" in text, text
    assert f"needs a different atroposlib than the installed {version}" in text, text
    assert "pip install atroposlib" not in text
