"""Why public environments cannot train offline, reproduced by environments of our own: each is refused
at start, or its run fails as soon as its environment has started (docs/benchmarks.md has the times),
with the reason in the run's status.

The classes (from trying the public Atropos tree on the smollm2 profile): config_init builds its server
config without a server_type; setup downloads a data file from the internet; setup finds none of its
data and raises its own error. A missing package and a hub dataset offline are in test_real_layouts."""

from __future__ import annotations

import time

import pytest

from hermes_rl.core.base.errors import BadInput

NO_SERVER_TYPE = '''"""Builds its server config field by field and leaves server_type unset."""
from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig


class NoServerTypeEnv(BaseEnv):
    name = "no_server_type"

    @classmethod
    def config_init(cls):
        server = APIServerConfig(model_name="m", base_url="http://127.0.0.1:9/v1", api_key="x", server_type=None)
        return BaseEnvConfig(tokenizer_name="tok", group_size=2), [server]

    async def get_next_item(self):
        return None

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    NoServerTypeEnv.cli()
'''

# Both train like the project's toy task once their setup succeeds, which offline it does not.
DOWNLOADS_AT_SETUP = '''"""Fetches its data file over the network in setup."""
import urllib.request

from hermes_rl.environments.toy_addition import ToyAdditionEnv


class DownloadsAtSetupEnv(ToyAdditionEnv):
    name = "downloads_at_setup"

    async def setup(self):
        urllib.request.urlretrieve("http://data.hermes-rl-fixture.invalid/tables.tar.bz2", "tables.tar.bz2")


if __name__ == "__main__":
    DownloadsAtSetupEnv.cli()
'''

NO_DATA_AT_SETUP = '''"""Looks for its data files in setup and raises its own error when none is there."""
from hermes_rl.environments.toy_addition import ToyAdditionEnv


class NoDataAtSetupEnv(ToyAdditionEnv):
    name = "no_data_at_setup"

    async def setup(self):
        found = []
        if not found:
            raise ValueError("none of the 3 configured data sources could be read")


if __name__ == "__main__":
    NoDataAtSetupEnv.cli()
'''


@pytest.fixture
def failing_envs(tmp_path, monkeypatch):
    from hermes_rl.core.envs import discovery

    folder = tmp_path / "envs"
    folder.mkdir()
    for name, text in (
        ("no_server_type", NO_SERVER_TYPE),
        ("downloads_at_setup", DOWNLOADS_AT_SETUP),
        ("no_data_at_setup", NO_DATA_AT_SETUP),
    ):
        (folder / f"{name}.py").write_text(text)
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(folder))
    discovery.clear_cache()
    return folder


def test_a_config_without_a_server_type_is_refused_at_start_naming_the_field(failing_envs, tiny_model_dir):
    from hermes_rl.core import runs
    from tests.fixtures_model import use_tiny_model

    use_tiny_model(tiny_model_dir)
    with pytest.raises(BadInput) as refused:
        runs.start_run("no_server_type", "local")
    message = refused.value.message
    assert "config_init() failed" in message and "server_type" in message, message
    assert runs.list_runs() == []  # nothing was started


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("downloads_at_setup", "URLError: <urlopen error"),
        ("no_data_at_setup", "ValueError: none of the 3 configured data sources could be read"),
    ],
)
def test_setup_that_needs_what_is_not_here_fails_the_run_naming_why_without_retrying_it(
    failing_envs, tiny_model_dir, name, reason
):
    from hermes_rl.core import runs
    from tests.fixtures_model import use_tiny_model

    use_tiny_model(tiny_model_dir)
    started = time.monotonic()
    run = runs.start_run(name, "local")
    state = runs.get_run(run["run_id"], sample=False)
    while state["status"] not in ("failed", "stopped", "lost", "completed"):
        if time.monotonic() - started > 500:
            runs.stop_run(run["run_id"], force=True)
            raise AssertionError(f"{name}: the run did not end")
        time.sleep(0.5)
        state = runs.get_run(run["run_id"], sample=False)
    assert state["status"] == "failed", state
    assert reason in state["reason"], state["reason"]
    # one restart for a failure not yet known to repeat; the same failure again ends the run
    assert "not restarted: it failed the same way" in state["reason"], state["reason"]
    assert next(p for p in state["processes"] if p["name"] == "env")["restarts"] <= 1
