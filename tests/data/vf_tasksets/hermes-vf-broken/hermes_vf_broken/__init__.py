"""A taskset whose module fails to import (hermes-rl's tests)."""

import hermes_vf_no_such_module  # noqa: F401
import verifiers.v1 as vf  # noqa: F401
