"""`python -m hermes_rl.core.clients.cli`: the CLI without the dashboard (tests and scripts use it)."""

import sys

from . import main

if __name__ == "__main__":  # importing this module (a walk over every module) runs nothing
    sys.exit(main())
