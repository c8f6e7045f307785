"""Fixtures for discovery / profiles / config tests: the fixture environment folder and helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV_FIXTURES = Path(__file__).resolve().parent / "data" / "envs"


def fixture_id(name: str) -> str:
    """The id of a fixture environment: an extra root's environments are `name@ROOT`, and the root
    tests/data/envs is named by its parent folder (`envs` says nothing)."""
    return f"{name}@data"


@pytest.fixture
def fixture_envs(monkeypatch) -> Path:
    """Scan tests/data/envs as an extra environment folder (HERMES_RL_ENV_PATH)."""
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(ENV_FIXTURES))
    monkeypatch.delenv("HERMES_RL_TINKER_ATROPOS", raising=False)
    return ENV_FIXTURES


@pytest.fixture
def user_envs(hermes_home) -> Path:
    """$HERMES_HOME/rl/environments, created empty."""
    path = hermes_home / "rl" / "environments"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bump_mtime(path: Path) -> None:
    """Make a change visible even on filesystems with coarse mtimes."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


ENV_TEMPLATE = '''"""{doc}"""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from pydantic import Field


class {cls}Config(BaseEnvConfig):
{fields}


class {cls}(BaseEnv):
    """{doc}"""

    name = "{name}"
    env_config_cls = {cls}Config

    @classmethod
    def config_init(cls) -> tuple[{cls}Config, list]:
        return {cls}Config(), []
'''


def write_env(
    folder: Path,
    stem: str,
    name: str,
    cls: str = "GenEnv",
    doc: str = "Generated environment",
    fields: dict[str, str] | None = None,
) -> Path:
    """Write a real (atroposlib) environment file; `fields` maps name -> 'int = Field(default=1, ...)'."""
    fields = fields or {"level": "int = Field(default=1, description='Level')"}
    body = "\n".join(f"    {key}: {spec}" for key, spec in fields.items())
    path = folder / f"{stem}.py"
    path.write_text(ENV_TEMPLATE.format(doc=doc, cls=cls, name=name, fields=body))
    return path


@pytest.fixture(scope="session")
def warm_probes(tmp_path_factory) -> dict:
    """Probe the fixture and project environments once per session, in ONE subprocess
    (core.envs.probe.warm_config_cache), so each test does not pay the atroposlib import again."""
    from hermes_rl.core.envs import discovery, probe

    saved = {key: os.environ.get(key) for key in ("HERMES_HOME", "HERMES_RL_ENV_PATH")}
    os.environ["HERMES_HOME"] = str(tmp_path_factory.mktemp("warm_home"))
    os.environ["HERMES_RL_ENV_PATH"] = str(ENV_FIXTURES)
    try:
        wanted = {"fixture_basic", "fixture_child", "fixture_many", "toy_addition", "gsm8k"}
        envs = [
            env
            for env in discovery.discover_environments()
            if env.name in wanted and env.error is None and env.duplicate_of is None
        ]
        return probe.warm_config_cache(envs)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
