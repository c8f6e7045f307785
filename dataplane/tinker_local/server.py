"""HTTP side of the local Tinker server: the app the official `tinker` SDK talks to, its credential
check, and the model's threads. The endpoints live in routes/ by area over one ServerContext
(context.py); work that touches the model runs on one worker thread (worker.py), so the event loop
answers heartbeats and polls while a long request runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from hermes_rl.core.base.secrets import LOCAL_TINKER_KEY_ENV as CREDENTIAL_ENV

from .auth import Credential, RequireCredential
from .context import NO_RETRY, RequestError, ServerContext
from .model_config import read_model_config
from .routes import billing, checkpoints, futures, sampling, service, sessions, training
from .worker import Worker

log = logging.getLogger("tinker_local")

SMALL_MODEL_PARAMETERS = 10_000_000  # below this a model runs on one thread


def check_api_key(api_key: object) -> str | None:
    """Why `api_key` cannot be the server's credential, or None. The tinker SDK sends only keys
    starting `tml-`; a short one could be guessed."""
    if not isinstance(api_key, str) or not api_key.startswith("tml-") or len(api_key) < 24:
        return f"{CREDENTIAL_ENV} must be set to a key starting tml- of at least 24 characters"
    return None


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def model_threads(parameters: int, requested: int = 0) -> int:
    """Torch's intra-op threads for the model when they are fixed: `requested` when given (--threads,
    $TINKER_LOCAL_THREADS), one for a tiny model (more only spin against each other); 0 for a real one,
    whose threads ThreadFit chooses from the cores other processes leave free."""
    if requested > 0:
        return requested
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1
    return 0


class ThreadFit:
    """Intra-op threads that fit what the machine has free, measured before each job of the model.

    A run's server shares the cores with its trainer, run-api and environments (and other runs): with two
    threads on an oversubscribed 2-core machine OpenMP's barriers made decoding 2-7x slower than one
    thread, while on an idle machine two are faster. So: the cores this process may use, less what other
    processes use — their CPU time over the window since the last choice (the machine's busy time less this
    process's own), or the 1-minute load average less this process's own share where that is more (CPU
    time misses what waits for a core) — rounded, at least one. A window under MIN_WINDOW_S keeps the last
    choice; each change is logged with its measure."""

    MIN_WINDOW_S = 1.0

    def __init__(self, cores: int | None = None):
        import psutil  # noqa: PLC0415 - only a real model's server measures

        self._psutil = psutil
        self.cores = cores or usable_cores()
        self._me = psutil.Process()
        self.threads = 0
        self._mark = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        times = self._psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
        own = self._me.cpu_times()
        return time.monotonic(), busy, own.user + own.system

    def measure(self) -> tuple[float, float] | None:
        """(cores other processes want, the window in seconds) since the last measure; None within
        MIN_WINDOW_S of it."""
        now = self._sample()
        wall = now[0] - self._mark[0]
        if wall < self.MIN_WINDOW_S:
            return None
        own_rate = (now[2] - self._mark[2]) / wall
        others = max(0.0, (now[1] - self._mark[1]) / wall - own_rate)
        try:
            others = max(others, os.getloadavg()[0] - own_rate)
        except OSError:
            pass
        self._mark = now
        return others, wall

    def choose(self) -> int:
        """The thread count to use now (the caller sets it in torch)."""
        measured = self.measure()
        if measured is None and self.threads:
            return self.threads
        others, wall = measured if measured is not None else (0.0, 0.0)
        threads = max(1, min(self.cores, round(self.cores - others)))
        if threads != self.threads:
            log.info(
                "intra-op threads %s%d of %d cores: other processes want %.1f (their CPU use over the last %.1fs, "
                "or the load average less this server's, whichever is more)",
                f"{self.threads} -> " if self.threads else "",
                threads,
                self.cores,
                others,
                wall,
            )
            self.threads = threads
        return threads


def create_app(
    model_dir: Path,
    checkpoint_dir: Path,
    on_fatal: Callable[[str], None],
    api_key: str,
    dtype: str = "auto",
    threads: int = 0,
) -> FastAPI:
    """The server's app. Every endpoint but /healthz requires `api_key` in the X-API-Key header (what
    the tinker SDK sends its TINKER_API_KEY as): any local user can reach a loopback port. `dtype`:
    the compute dtype (engine.choose_dtype); `threads`: torch's intra-op threads (0: model_threads', and
    ThreadFit's choice before each job for a real model)."""
    problem = check_api_key(api_key)
    if problem:
        raise ValueError(problem)
    model_dir = Path(model_dir).resolve()
    ctx = ServerContext(model_dir, read_model_config(model_dir))
    credential = Credential(api_key)

    fixed = model_threads(ctx.model_spec.parameter_estimate(), threads)
    fit = None if fixed else ThreadFit()

    def fit_threads() -> None:
        """Before each job, on the worker thread (torch's threads are set per calling thread)."""
        import torch  # noqa: PLC0415 - torch on the worker thread, as load_model_state

        if fit is None:
            return
        try:
            chosen = fit.choose()
        except Exception as exc:  # a failed measure must not stop the worker: keep the threads as they are
            log.warning("could not measure the free cores: %s", exc)
            return
        if chosen != torch.get_num_threads():
            torch.set_num_threads(chosen)

    def load_model_state():
        import torch  # noqa: PLC0415 - on the worker thread: the app answers /healthz while torch and the model load

        torch.set_num_threads(fixed or usable_cores())  # while loading; a real model's are chosen after
        from .model_state import ModelState  # noqa: PLC0415 - imports torch too: the same reason

        state = ModelState(model_dir, checkpoint_dir, dtype)
        if fit is not None:
            torch.set_num_threads(fit.choose())  # the window measured covers the load
        described = state.lm.describe()
        log.info(
            "serving %s (%s, %.1fM parameters, context %d) on %s in %s, %d intra-op thread(s)%s",
            model_dir.name,
            described["architecture"],
            described["parameters"] / 1e6,
            described["context_length"],
            described["device"],
            described["dtype"],
            torch.get_num_threads(),
            "" if fit is None else f" for now: chosen before each job from what is free of {fit.cores} cores",
        )
        return state

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        ctx.worker = Worker(asyncio.get_running_loop(), load_model_state, on_fatal, before_job=fit_threads)
        ctx.worker.start()
        yield

    app = FastAPI(title="tinker-local", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.add_middleware(RequireCredential, credential=credential)
    _answer_errors(app)
    for area in (service, sessions, training, sampling, futures, checkpoints, billing):
        app.include_router(area.router(ctx))
    app.include_router(service.auth_router(credential))

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def not_implemented(path: str, request: Request):
        raise RequestError(f"tinker-local does not implement {request.method} /{path}", status=404)

    return app


def _answer_errors(app: FastAPI) -> None:
    """A refusal is its RequestError's status; anything unexpected a 400 naming it, never a 5xx."""

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"error": exc.message, "category": exc.category}, status_code=exc.status, headers=NO_RETRY)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Never a 5xx: the SDK retries those for minutes. A bug here should fail fast and loudly.
        log.error("error handling %s: %s\n%s", request.url.path, exc, traceback.format_exc())
        return JSONResponse(
            {"error": f"tinker-local error in {request.url.path}: {type(exc).__name__}: {exc}", "category": "server"},
            status_code=400,
            headers=NO_RETRY,
        )
