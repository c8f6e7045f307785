"""Every test gets its own $HERMES_HOME; nothing ever reaches a hub or the user's ~/.hermes."""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# The suite runs several pipelines at once on few cores: one model thread per local Tinker server is
# cheaper there than every core each (they would spin against each other).
os.environ.setdefault("TINKER_LOCAL_THREADS", "1")
# Tests never see the developer's real keys.
for _name in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"):
    os.environ.pop(_name, None)

# A test run started as a background job of a non-interactive shell inherits SIGINT ignored, and so would
# every CLI a test starts (exec keeps an ignored signal ignored), so Ctrl-C tests would see it shrugged off.
# A handler (not SIG_IGN) is reset to the default on exec: the children get SIGINT as a terminal sends it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Fixture modules per area: tests/fixtures_*.py
pytest_plugins = sorted(f"tests.{path.stem}" for path in (ROOT / "tests").glob("fixtures_*.py"))


@pytest.fixture(scope="session", autouse=True)
def shared_probe_cache(tmp_path_factory):
    """One config probe cache for the whole test run (every xdist worker, every $HERMES_HOME, and the
    CLIs and supervisors they start): a probe result is keyed by the environment file's path and
    checked against its files, so an environment of the repository is probed once per test run, not
    once per test (each probe imports atroposlib: ~5 s of CPU). Tests that probe their own files
    (under tmp_path) still get fresh probes."""
    from hermes_rl.core.base.paths import PROBE_CACHE_ENV
    from tests.fixtures_model import shared_tmp_root

    saved = os.environ.get(PROBE_CACHE_ENV)
    os.environ[PROBE_CACHE_ENV] = str(shared_tmp_root(tmp_path_factory) / "probe-cache")
    yield
    if saved is None:
        os.environ.pop(PROBE_CACHE_ENV, None)
    else:
        os.environ[PROBE_CACHE_ENV] = saved


@pytest.fixture(scope="session", autouse=True)
def warm_probe_server():
    """A test worker is a long-lived client, as the dashboard is: its config probes fork from one warm
    server that imported atroposlib once (core.envs.probe.keep_warm), instead of importing it afresh for
    every environment a test writes. CLIs and supervisors the tests start still probe cold; the
    supervisors borrow their runs' warm servers from the worker's warm base (core.daemons.warm.base)."""
    from hermes_rl.core.envs import probe
    from hermes_rl.core.runs import training

    probe.keep_warm()
    training.keep_runs_warm()  # the supervisors its tests start fork their runs' warm servers from one base
    yield
    training.keep_runs_warm(False)
    probe.keep_warm(False)


@pytest.fixture(autouse=True)
def hermes_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "hermes_home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


# Tests that run the real pipeline or build on the tiny model are the longest (up to ~90 s each):
# collected first, xdist starts them first, and the short ones fill the workers around them.
PIPELINE_FIXTURES = frozenset({"tiny_model_dir", "tinker_local"})
# What starts real supervisors, environments, config probes (atroposlib in a subprocess) or servers.
PROCESS_FIXTURES = frozenset(
    {
        "arith_env",
        "atropos_clone",
        "checkout",
        "fixture_envs",
        "openai_stub",
        "run_cleanup",
        "run_processes_cleanup",
        "slurm_cluster",
        "runnable_checkout",
        "specs",
        "user_envs",
        "vf_env",
        "vf_python",
        "warm_probes",
    }
)
# Modules whose tests start processes themselves (the CLI as a subprocess, real runs) without those fixtures.
PROCESS_MODULES = frozenset(
    {"test_cli", "test_e2e_local", "test_import_hygiene", "test_packaging", "test_resume", "test_warm_start"}
)


def _starts_a_textual_app(item, uses: set) -> bool:
    """A Pilot or snapshot test: each starts the dashboard (seconds of CPU apiece)."""
    if "snap_compare" in uses:
        return True
    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return "run_test(" in source or "pilot" in source


def pytest_collection_modifyitems(config, items):
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if PIPELINE_FIXTURES & uses:
            item.add_marker(pytest.mark.pipeline)
        if _starts_a_textual_app(item, uses):
            item.add_marker(pytest.mark.tui)
        if "slurm_cluster" in uses:
            item.add_marker(pytest.mark.slurm)
        if "ray_cluster" in uses:
            item.add_marker(pytest.mark.ray)
        heavy = (
            item.get_closest_marker("tui")
            or item.get_closest_marker("pipeline")
            or item.get_closest_marker("slow")
            or item.get_closest_marker("reliability")
            or PROCESS_FIXTURES & uses
            or item.module.__name__.rsplit(".", 1)[-1] in PROCESS_MODULES
        )
        if not heavy:
            item.add_marker(pytest.mark.fast)
    # The pipeline and slow tests first, the longest first (tests/durations.json): xdist's worksteal gives
    # the first worker the front of the list and the others steal from its end, so no long test is left
    # to start near the end of the run. A test missing from the file counts as short.
    durations = _recorded_durations()
    items.sort(
        key=lambda item: (
            (0, -durations.get(item.nodeid, 0.0))
            if item.get_closest_marker("pipeline") or item.get_closest_marker("slow")
            else (1, 0.0)
        )
    )


def _recorded_durations() -> dict[str, float]:
    """Seconds per test id from a passing run (bench/bench_suite.py --save-durations tests/durations.json)."""
    try:
        recorded = json.loads((ROOT / "tests" / "durations.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {k: float(v) for k, v in recorded.items() if isinstance(v, (int, float))}
