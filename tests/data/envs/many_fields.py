"""Fixture: thirty independent int fields, so concurrent editors can each own one (lost updates show)."""

from pydantic import create_model

from atroposlib.envs.base import BaseEnv, BaseEnvConfig

ManyConfig = create_model(
    "ManyConfig", __base__=BaseEnvConfig, **{f"slot_{i:02d}": (int, -1) for i in range(30)}
)


class ManyFieldsEnv(BaseEnv):
    name = "fixture_many"
    env_config_cls = ManyConfig

    @classmethod
    def config_init(cls):
        return ManyConfig(), []
