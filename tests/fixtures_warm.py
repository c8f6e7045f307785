"""The warm start tests' worker: a module that says what it was started as and whether its imports were
there before it ran (a fork inherits its server's)."""

from __future__ import annotations

import textwrap

import pytest

WORKER = textwrap.dedent(
    """
    import os, sys, time
    import numpy
    print("up", os.environ["HERMES_RL_PROCESS"], os.environ.get("WORKER_SETTING"), flush=True)
    print("numbers", numpy.random.randint(1 << 30), flush=True)
    print("preloaded before main", "numpy" in PRELOADED, flush=True)
    if sys.argv[1:] == ["fail"]:
        raise ValueError("the worker could not read its shard")
    if sys.argv[1:] == ["exit"]:
        sys.exit(3)
    time.sleep(600)
    """
)


@pytest.fixture
def worker_module(tmp_path):
    # PRELOADED: what was imported before this module ran (a fork inherits the server's imports)
    (tmp_path / "warm_worker.py").write_text("import sys\nPRELOADED = set(sys.modules)\n" + WORKER)
    return tmp_path
