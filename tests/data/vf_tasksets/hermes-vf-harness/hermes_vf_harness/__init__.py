"""A verifiers harness package, not a taskset (hermes-rl's tests: listed as what it is)."""

import verifiers.v1 as vf


class EchoHarness(vf.Harness):
    """Plays a taskset by echoing; it has no tasks of its own."""


__all__ = ["EchoHarness"]
