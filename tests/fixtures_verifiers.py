"""A venv holding verifiers 0.4 and the test tasksets (tests/data/vf_tasksets), made once per machine.

verifiers cannot share hermes-rl's venv (it needs openai>=2.54 and mcp 2), so its tasksets are served under
an interpreter of their own, as a user's are ($HERMES_RL_ENV_PYTHON). Creating the venv downloads verifiers
from the package index once (minutes); it lives in ~/.cache/hermes-rl/test-venvs (or
$HERMES_RL_TEST_VENVS) and is reused by every later test run. The tasksets are reinstalled (offline, no
build isolation) when their files change. Tests that need it are skipped, saying why, when it cannot be made.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TASKSETS = ROOT / "tests" / "data" / "vf_tasksets"
VERIFIERS = "verifiers==0.4.0"
# verifiers' subprocess runtime prepares its chat program with uv (the program's own packages come from the
# package index once, into uv's cache)
RUNTIME_TOOLS = ("uv",)
VENVS_ENV = "HERMES_RL_TEST_VENVS"


def _tasksets_stamp() -> str:
    digest = hashlib.sha256()
    for path in sorted(TASKSETS.rglob("*")):
        if path.is_file() and "egg-info" not in str(path) and "/build/" not in str(path):
            digest.update(str(path.relative_to(TASKSETS)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _run(argv: list[str], timeout: float) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{' '.join(argv[:4])} failed: {tail[0][:300]}")


def ensure_verifiers_venv() -> Path:
    """The venv's python, made (or updated) under a lock so concurrent test workers share one."""
    base = Path(os.environ.get(VENVS_ENV) or Path.home() / ".cache" / "hermes-rl" / "test-venvs")
    base.mkdir(parents=True, exist_ok=True)
    venv = base / f"verifiers-0.4.0-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], 120)
            _run([str(python), "-m", "pip", "install", "-q", VERIFIERS, "wheel", "setuptools"], 900)
            (venv / ".complete").write_text("ok\n")
        if not all((venv / "bin" / tool).exists() for tool in RUNTIME_TOOLS):
            _run([str(python), "-m", "pip", "install", "-q", *RUNTIME_TOOLS], 600)
        stamp = _tasksets_stamp()
        if (venv / ".tasksets").exists() and (venv / ".tasksets").read_text() == stamp:
            return python
        work = base / "tasksets-build"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(TASKSETS, work, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        packages = sorted(str(p) for p in work.iterdir() if (p / "pyproject.toml").exists())
        pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
        _run(pip + ["--force-reinstall", *packages], 600)
        shutil.rmtree(work, ignore_errors=True)
        (venv / ".tasksets").write_text(stamp)
    return python


@pytest.fixture(scope="session")
def vf_python() -> Path:
    try:
        return ensure_verifiers_venv()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no venv with {VERIFIERS} (it could not be made: {exc})")


@pytest.fixture
def vf_env(vf_python, monkeypatch) -> Path:
    """$HERMES_RL_ENV_PYTHON names the verifiers venv, as a user's set-up does."""
    from hermes_rl.core.envs import verifiers_envs

    monkeypatch.setenv(verifiers_envs.ENV_PYTHON_VAR, str(vf_python))
    verifiers_envs.clear_cache()
    yield vf_python
    verifiers_envs.clear_cache()
