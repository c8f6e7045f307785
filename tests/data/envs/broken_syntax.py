"""Fixture: a file that does not parse."""

from atroposlib.envs.base import BaseEnv


class BrokenEnv(BaseEnv:
    name = "fixture_broken"
