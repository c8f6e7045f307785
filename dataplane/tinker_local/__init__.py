"""A local server speaking the Tinker protocol over a tiny locally built model (see __main__ for the CLI)."""

import os

# OpenMP's default wait policy keeps idle threads spinning. On a shared CPU (run-api, the trainer and the
# environments beside this server) a spinning thread takes the core its working sibling needs: at load 7
# on 2 cores one batch-8 decoding matmul took 41 ms spinning and 1 ms passive. Read when torch loads, so set
# here, before any module of this package imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
