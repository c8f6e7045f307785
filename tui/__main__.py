"""python -m hermes_rl.tui: the same as `hermes-rl`."""

import sys

from .launcher import main

sys.exit(main())
