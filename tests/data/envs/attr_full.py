"""Fixture: BaseEnv spelled as a full attribute path."""

import atroposlib.envs.base


class AttrFullEnv(atroposlib.envs.base.BaseEnv):
    """Inherits atroposlib.envs.base.BaseEnv."""
