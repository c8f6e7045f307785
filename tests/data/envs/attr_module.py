"""Fixture: BaseEnv through a module alias, plus an aliased import of the class."""

from atroposlib.envs import base
from atroposlib.envs.base import BaseEnv as AtroposEnv


class AttrModuleEnv(base.BaseEnv):
    name = "fixture_attr_module"


class AliasEnv(AtroposEnv):
    name = "fixture_alias"
