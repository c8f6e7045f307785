"""Fixtures: the tiny model (built once per test session) and a running local Tinker server.

    def test_x(tiny_model_dir): ...                 # Path of a built model folder
    def test_y(tinker_local): tinker_local.url ...  # a fresh server for this test; TINKER_* env set

`start_tinker_local(model_dir, checkpoint_dir)` is the same thing as a context manager, and
`tinker_local_module` one server for a whole test module.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_rl.core.daemons.launchers.local import LocalProcess

ROOT = Path(__file__).resolve().parent.parent
READY_PREFIX = "tinker-local ready on "


def shared_tmp_root(tmp_path_factory) -> Path:
    """A temporary folder shared by every pytest-xdist worker of this test run (the workers' base
    folders are its children), or this run's base folder without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model, built once per test run (about 30-80 s on the shared 2-core machine): the first
    xdist worker to ask builds it under ensure_model's lock, the others wait for it and reuse it."""
    from hermes_rl.dataplane.tiny_model import ensure_model

    return ensure_model(shared_tmp_root(tmp_path_factory) / "models" / "tiny-toy")


def use_tiny_model(tiny_model_dir: Path, total_steps: int | None = None) -> Path:
    """Make the session's built model the local profile's model in this test's $HERMES_HOME (a link,
    no rebuild); with total_steps, also shorten the local profile's runs to that many steps."""
    from hermes_rl.core.base.paths import models_dir, profiles_dir

    model = models_dir() / "tiny-toy"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.symlink_to(Path(tiny_model_dir).resolve())
    if total_steps is not None:
        profiles_dir().mkdir(parents=True, exist_ok=True)
        (profiles_dir() / "local.yaml").write_text(f"total_steps: {total_steps}\n")
    return model


@dataclass
class LocalTinker:
    url: str
    process: LocalProcess  # a fork of the worker's warm base where it could be one (process.why_cold: why not)
    model_dir: Path
    checkpoint_dir: Path
    log_path: Path
    api_key: str  # the credential the server was started with ($TINKER_LOCAL_API_KEY)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def env(self) -> dict[str, str]:
        """What a client process needs (the key travels in the environment, never in argv): the SDK
        sends TINKER_API_KEY; the trainer takes the local server's credential from TINKER_LOCAL_API_KEY."""
        return {
            "TINKER_BASE_URL": self.url,
            "TINKER_API_KEY": self.api_key,
            "TINKER_LOCAL_API_KEY": self.api_key,
            "TINKER_TELEMETRY": "0",
        }


@contextlib.contextmanager
def start_tinker_local(model_dir: Path, checkpoint_dir: Path, timeout_s: float = 90.0) -> Iterator[LocalTinker]:
    """Run `python -m hermes_rl.dataplane.tinker_local --port 0` until the block ends; stopped with SIGTERM.
    Started as a run starts its server: forked from a server borrowed from the worker's warm base
    (conftest.warm_probe_server) when the base can be faithful to it, else a fresh process."""
    from hermes_rl.core.daemons.process import WARM_RUNTIME_ONLY_ENV
    from hermes_rl.core.daemons.spawn import end_group
    from hermes_rl.core.daemons.warm.client import WarmStarts
    from hermes_rl.core.runs.training import WARM_TINKER_LOCAL
    from hermes_rl.core.runs.trial import start_logged

    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    log_path = checkpoint_dir.parent / f"tinker_local_{os.getpid()}_{time.monotonic_ns()}.log"
    api_key = "tml-local-" + secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TINKER_LOCAL_API_KEY": api_key}
    env.update(PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")  # as in a run's (runs.training.run_env)
    argv = [sys.executable, "-m", "hermes_rl.dataplane.tinker_local", "--host", "127.0.0.1", "--port", "0"]
    argv += ["--model-dir", str(model_dir), "--checkpoint-dir", str(checkpoint_dir)]
    import_time = {k: v for k, v in env.items() if k not in WARM_RUNTIME_ONLY_ENV}
    warm = WarmStarts(WARM_TINKER_LOCAL, import_time, WARM_RUNTIME_ONLY_ENV, borrow_only=True)
    process = None
    try:
        process = start_logged(argv, env, log_path, str(ROOT), warm if warm.wait_started() == "ready" else None)
        deadline = time.monotonic() + timeout_s
        while True:
            text = log_path.read_text(encoding="utf-8", errors="replace")
            url = [line[len(READY_PREFIX) :].strip() for line in text.splitlines() if line.startswith(READY_PREFIX)]
            if url:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tinker-local did not become ready (exit {process.poll()}):\n{text}")
            time.sleep(0.05)
        yield LocalTinker(url[0], process, Path(model_dir), checkpoint_dir, log_path, api_key)
    finally:
        # pytest shows a teardown's output only for a test that failed: then the server's own account of it
        # (a client once found a live server's port refusing connections; its log says what the server saw)
        with contextlib.suppress(OSError):
            tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
            print(f"tinker-local log ({log_path}), exit {process.poll() if process else None}:", *tail, sep="\n")
        if process is not None and process.poll() is None:
            end_group(process, grace=15.0)
        warm.close()


@pytest.fixture
def tinker_local(tiny_model_dir, tmp_path, monkeypatch) -> Iterator[LocalTinker]:
    """A local Tinker server for one test, with TINKER_BASE_URL / TINKER_API_KEY set for the SDK."""
    with start_tinker_local(tiny_model_dir, tmp_path / "checkpoints") as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


@pytest.fixture(scope="module")
def tinker_local_module(tiny_model_dir, tmp_path_factory) -> Iterator[LocalTinker]:
    """One local Tinker server for a whole test module, its TINKER_* variables set in os.environ while the
    module runs (and put back after): what a module of SDK tests shares."""
    with start_tinker_local(tiny_model_dir, tmp_path_factory.mktemp("tinker") / "checkpoints") as running:
        saved = {name: os.environ.get(name) for name in running.env()}
        os.environ.update(running.env())
        try:
            yield running
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
