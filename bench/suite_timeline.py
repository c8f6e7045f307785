"""A pytest plugin for bench_suite.py: when each test phase of each xdist worker started and ended.

    .venv/bin/python bench/bench_suite.py --timeline FILE -n 3      (loads this with -p bench.suite_timeline)

Appends one JSON line per phase (worker, test id, phase, start, end: wall-clock seconds; cpu: the
worker's own CPU seconds in it, not its children's) and one per worker for its session start and end,
to the file named by $HERMES_RL_SUITE_TIMELINE; nothing without it.
"""

from __future__ import annotations

import json
import os
import time

import pytest

_PATH = os.environ.get("HERMES_RL_SUITE_TIMELINE")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


def _write(**record) -> None:
    if _PATH:
        with open(_PATH, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"worker": _WORKER, **record}) + "\n")


def pytest_sessionstart(session) -> None:
    _write(event="session_start", time=time.time())


def pytest_sessionfinish(session) -> None:
    _write(event="session_end", time=time.time())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    started, cpu = time.time(), time.process_time()
    yield
    _write(
        event="phase", test=item.nodeid, phase="setup", start=started, end=time.time(), cpu=time.process_time() - cpu
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    started, cpu = time.time(), time.process_time()
    yield
    _write(event="phase", test=item.nodeid, phase="call", start=started, end=time.time(), cpu=time.process_time() - cpu)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    started, cpu = time.time(), time.process_time()
    yield
    _write(
        event="phase", test=item.nodeid, phase="teardown", start=started, end=time.time(), cpu=time.process_time() - cpu
    )
