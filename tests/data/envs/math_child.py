"""Fixture: an environment that reaches BaseEnv only through math_base.MathBase (another scanned file)."""

from math_base import MathBase


class ChildMathEnv(MathBase):
    """Math through a scanned parent class."""

    name = "fixture_child"
