"""Fixture: the module kills its own process on import, without a word (no JSON comes back).

The exit comes before the atroposlib import so the test does not pay for that import; discovery
reads the class below from the source all the same.
"""

import os

os._exit(7)

from atroposlib.envs.base import BaseEnv  # noqa: E402


class HardExitEnv(BaseEnv):
    name = "fixture_hard_exit"
