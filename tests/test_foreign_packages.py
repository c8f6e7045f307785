"""A user's own `environments` package (the public Atropos repository has one) stays theirs: hermes-rl
installs only hermes_rl.*, injects nothing into PYTHONPATH, and a real run's environment imports the
user's package while the user's PYTHONPATH reaches every process of the run unchanged."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import PROJECT_ROOT, models_dir, profiles_dir, run_dir, user_environments_dir
from hermes_rl.core.base.states import FINAL

USER_ENV = '''"""Toy addition, from a user's folder, with a helper from the user's own `environments` package."""
from environments.game_environments import ORIGIN
from hermes_rl.environments.toy_addition import ToyAdditionEnv

print(f"user environments package: {ORIGIN}", flush=True)


class ForeignToyEnv(ToyAdditionEnv):
    name = "foreign_toy"


if __name__ == "__main__":
    ForeignToyEnv.cli()
'''


def _foreign_package(root: Path) -> Path:
    package = root / "environments" / "game_environments"
    package.mkdir(parents=True)
    (root / "environments" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("import pathlib\nORIGIN = str(pathlib.Path(__file__).resolve())\n")
    return package / "__init__.py"


def _environ(pid: int) -> dict[str, str] | None:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return None


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_run_environment_imports_the_users_own_environments_package(tiny_model_dir, tmp_path, monkeypatch):
    origin = _foreign_package(tmp_path / "theirs")
    user_pythonpath = f"{tmp_path / 'theirs'}:{tmp_path / 'elsewhere'}"
    monkeypatch.setenv("PYTHONPATH", user_pythonpath)
    user_environments_dir().mkdir(parents=True)
    (user_environments_dir() / "foreign_toy.py").write_text(USER_ENV)
    models_dir().mkdir(parents=True)
    (models_dir() / "tiny-toy").symlink_to(Path(tiny_model_dir).resolve())
    profiles_dir().mkdir(parents=True)
    (profiles_dir() / "local.yaml").write_text("total_steps: 3\n")

    run = runs.start_run("foreign_toy", "local", {"steps_per_eval": 100})
    run_id = run["run_id"]
    seen_env: dict[str, dict[str, str]] = {}
    deadline = time.monotonic() + 360
    try:
        while time.monotonic() < deadline:
            view = runs.get_run(run_id, sample=False)
            for proc in view["processes"]:
                if proc.get("alive") and proc["name"] not in seen_env:
                    environ = _environ(proc["pid"])
                    if environ is not None:
                        seen_env[proc["name"]] = environ
            if view["status"] in FINAL:
                break
            time.sleep(0.2)
    finally:
        if runs.get_run(run_id, sample=False)["status"] not in FINAL:
            runs.stop_run(run_id, wait=20)
    final = runs.get_run(run_id, sample=False)
    env_log = Path(final["logs"]["env"]).read_text(errors="replace")
    assert final["status"] == "completed", (final.get("reason"), env_log[-3000:])
    assert [row["step"] for row in read_jsonl(run_dir(run_id) / "metrics.jsonl")] == [1, 2, 3]

    # The environment imported the user's package, not anything of ours.
    assert f"user environments package: {origin}" in env_log
    # Every process of the run got the user's PYTHONPATH as it was, nothing of the project's added; the
    # environment also gets its own import root (here its folder) before it, as its author intended.
    assert {"api", "trainer", "env"} <= set(seen_env), sorted(seen_env)
    for name, environ in seen_env.items():
        expected = user_pythonpath if name != "env" else f"{user_environments_dir()}:{user_pythonpath}"
        assert environ.get("PYTHONPATH") == expected, (name, environ.get("PYTHONPATH"))
        assert str(PROJECT_ROOT) not in environ.get("PYTHONPATH", ""), name
