"""A decoding step's layers in C++ (decode_layers.cpp): the same ATen ops as the Python code, in the same
order, so the results are bit-equal, without Python's cost per op: ~2–3 ms of SmolLM2's 21–26 ms step
(docs/benchmarks.md has the figures).

torch's cpp_extension builds the file once per machine (~9 s on 2 cores; the C++ compiler and ninja it
needs), in a background thread that loading a real model (WORTH_BUILDING_PARAMETERS) starts; until it is
ready, and wherever it cannot be built, decoding runs the Python ops. HERMES_RL_NATIVE_DECODE=0 keeps to
Python.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import sysconfig
import threading
import time
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("decode_layers.cpp")
SWITCH = "HERMES_RL_NATIVE_DECODE"
# Below this a decoding step takes well under a millisecond (the tiny model's 0.45 ms, 0.34 in C++): the
# build's ~9 s of CPU, beside a run on a small machine, would not pay for itself.
WORTH_BUILDING_PARAMETERS = 10_000_000
BUILD_NICENESS = 5

log = logging.getLogger("tinker_local")


class _Build:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.state = "idle"  # idle, building, ready, unavailable
        self.reason = ""
        self.seconds = 0.0


_build = _Build()


def start() -> None:
    """Begin loading the C++ step (building it if this machine has no build yet), once per process."""
    with _build.lock:
        if _build.state != "idle":
            return
        if os.environ.get(SWITCH, "1") == "0":
            _finish("unavailable", f"{SWITCH}=0")
            log.info("decoding runs its layers from Python: %s", _build.reason)
            return
        _build.state = "building"
    threading.Thread(target=_load, name="native-decode-build", daemon=True).start()


def wait(timeout: float) -> bool:
    """Whether the C++ step is ready, after waiting up to `timeout` seconds for its build."""
    _build.done.wait(timeout)
    return _build.state == "ready"


def status() -> dict:
    """Its state, why it is unavailable, and how long loading it took (the log says the same)."""
    return {"state": _build.state, "reason": _build.reason, "build_s": round(_build.seconds, 1)}


def op():  # noqa: ANN201 - a torch.ops overload packet
    """torch.ops.hermes_rl_decode.decode_hidden once it is ready, else None."""
    return torch.ops.hermes_rl_decode.decode_hidden if _build.state == "ready" else None


def _finish(state: str, reason: str = "") -> None:
    _build.state, _build.reason = state, reason
    _build.done.set()


def _load() -> None:
    started = time.monotonic()
    # This thread and the compiler it starts yield to the run's processes (nice is per thread on Linux
    # only: elsewhere it would slow the whole server).
    if sys.platform.startswith("linux"):
        os.nice(BUILD_NICENESS)
    try:
        import fcntl  # noqa: PLC0415 - POSIX only: elsewhere the build is unavailable, the engine still loads

        from torch.utils import cpp_extension  # noqa: PLC0415 - only the build thread needs it

        source = SOURCE.read_text()
        # The torch version is in the name: an extension built against another torch must not load.
        digest = hashlib.sha256((source + torch.__version__).encode()).hexdigest()[:12]
        name = f"hermes_rl_decode_{digest}"
        root = os.environ.get("TORCH_EXTENSIONS_DIR") or str(Path.home() / ".cache" / "torch_extensions")
        directory = Path(root) / name
        directory.mkdir(parents=True, exist_ok=True)
        if shutil.which("ninja") is None:  # the ninja package's binary is beside this interpreter's scripts
            scripts = sysconfig.get_path("scripts")
            if (Path(scripts) / "ninja").exists():
                os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
        # torch's own lock is a file that outlives a process killed mid-build (a run's server stopped while
        # it built), and torch waits on it forever; a flock dies with its holder. Whoever holds this one
        # knows no live process is building, so a torch lock left there is stale.
        with (directory / "hermes-rl.lock").open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            (directory / "lock").unlink(missing_ok=True)
            cpp_extension.load_inline(
                name,
                cpp_sources=[source],
                is_python_module=False,
                no_implicit_headers=True,  # the file includes what it uses: not torch/extension.h's pybind11
                extra_cflags=["-O2"],
                build_directory=str(directory),
            )
    except Exception as exc:  # noqa: BLE001 - any failure leaves decoding on the Python ops, and says why
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
        # a compiler's first error says why; ninja's last line only that the build stopped
        reason = next(
            (line for line in lines if "error" in line.lower() and "building extension" not in line.lower()), lines[-1]
        )
        _build.seconds = time.monotonic() - started
        _finish("unavailable", reason[:300])
        log.info("decoding runs its layers from Python: %s", _build.reason)
        return
    _build.seconds = time.monotonic() - started
    _finish("ready")
    log.info("decoding runs its layers in C++ (loaded in %.1f s)", _build.seconds)
