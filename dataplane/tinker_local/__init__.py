"""A local server speaking the Tinker protocol over a tiny locally built model (see __main__ for the CLI)."""

import os

# OpenMP's default wait policy keeps idle threads spinning. On a shared CPU (run-api, the trainer and the
# environments beside this server) a thread that spins without bound takes the core its working sibling
# needs (beside 4 busy processes on 2 cores one batch-8 decoding matmul took 12 ms spinning, 0.5 ms
# passive); sleeping at once (PASSIVE) costs a wake-up per parallel region instead: sampling 8 x 32
# SmolLM2 tokens took 2.5 s passive, 1.6 s with a bounded spin on the idle machine (bench/
# bench_omp_wait.py, docs/benchmarks.md). A run's server mostly decodes while the rest of the run waits
# for it, so the bounded spin. Read when torch loads, hence here, before any module of this package
# imports torch; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
