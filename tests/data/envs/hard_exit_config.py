"""Fixture: config_init kills its own process without a word (no JSON comes back)."""

import os

from atroposlib.envs.base import BaseEnv


class HardExitEnv(BaseEnv):
    name = "fixture_hard_exit"

    @classmethod
    def config_init(cls):
        os._exit(7)
