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
import traceback
from pathlib import Path
from typing import Callable

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


def model_threads(parameters: int, requested: int = 0) -> int:
    """Torch's intra-op threads for the model: `requested` when given (--threads, $TINKER_LOCAL_THREADS);
    else one for a tiny model (more only spin against each other) and every core this process may use
    for a real one. Where several runs share the cores (a sweep, the test suite) one each is cheaper:
    SmolLM2-135M on 2 cores took ~20% less CPU with 1 thread than with 2 (docs/benchmarks.md)."""
    if requested > 0:
        return requested
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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
    the compute dtype (engine.choose_dtype); `threads`: torch's intra-op threads (0: model_threads')."""
    problem = check_api_key(api_key)
    if problem:
        raise ValueError(problem)
    model_dir = Path(model_dir).resolve()
    ctx = ServerContext(model_dir, read_model_config(model_dir))
    credential = Credential(api_key)

    def load_backend():
        import torch  # on the worker thread: the app answers /healthz while torch and the model load

        used = model_threads(ctx.model_spec.parameter_estimate(), threads)
        torch.set_num_threads(used)
        from .backend import Backend  # imports torch too: the same reason

        backend = Backend(model_dir, checkpoint_dir, dtype)
        described = backend.lm.describe()
        log.info(
            "serving %s (%s, %.1fM parameters, context %d) on %s in %s, %d intra-op thread(s)",
            model_dir.name,
            described["architecture"],
            described["parameters"] / 1e6,
            described["context_length"],
            described["device"],
            described["dtype"],
            used,
        )
        return backend

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        ctx.worker = Worker(asyncio.get_running_loop(), load_backend, on_fatal)
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
