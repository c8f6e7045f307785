"""python -m hermes_rl.tui: the same as `hermes-rl`."""

import sys

from hermes_rl.tui.launcher import main

sys.exit(main())
