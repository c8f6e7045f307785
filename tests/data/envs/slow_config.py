"""Fixture: config_init never finishes in time (the probe must time out, not hang the caller)."""

import time

from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class SlowEnv(BaseEnv):
    name = "fixture_slow"

    @classmethod
    def config_init(cls):
        time.sleep(600)
        return BaseEnvConfig(), []
