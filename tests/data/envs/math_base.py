"""Fixture: a shared base class that other environment files inherit from."""

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class MathConfig(BaseEnvConfig):
    num_few_shot: int = Field(default=2, ge=0, description="Worked examples in the prompt")


class MathBase(BaseEnv):
    """Common math environment plumbing."""

    env_config_cls = MathConfig

    @classmethod
    def config_init(cls):
        return MathConfig(), []
