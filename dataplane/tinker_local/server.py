"""HTTP side of the local Tinker server: the endpoints the official `tinker` SDK calls.

Work that touches the model (create_model, forward_backward, optim_step, saves, loads,
asample) becomes a future: it is queued to ONE worker thread in arrival order and its id is
returned at once; `retrieve_future` long-polls it (answering `try_again` while it is
pending) and returns the result — protobuf for forward_backward and samples, JSON otherwise —
or `{"error", "category"}`, which the SDK raises as `RequestFailedError`. The event loop never
runs torch, so heartbeats and polls answer while a long request runs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import itertools
import json
import logging
import math
import os
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from hermes_rl.core.base.secrets import LOCAL_TINKER_KEY_ENV as CREDENTIAL_ENV

log = logging.getLogger("tinker_local")

# The SDK waits up to 45 s for a retrieve_future answer and logs a WARNING for every try_again, so a
# request that runs long (a forward_backward queued behind an environment's sampling) is answered once
# per 40 s of it, not twice.
LONG_POLL_S = 40.0
JOB_RETENTION_S = 600.0  # finished results are kept this long for retries of retrieve_future
SMALL_MODEL_PARAMETERS = 10_000_000  # below this a model runs on one thread
SAMPLE_BATCH_ROWS = 512  # consecutive sample requests are batched up to this many sequences
NO_RETRY = {"x-should-retry": "false"}
OPEN_PATHS = frozenset({"/healthz", "/api/v1/healthz"})  # readiness probes: they change and reveal nothing

# The SDK's feature flags, answered to /client/config: plain API-key auth, no JWT exchange,
# fwd/bwd chunks of one call sent in order, per-request retrieve_future polling.
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "credential_default_source": "api_key",
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
    "sample_no_retries": False,
}


class RequestError(Exception):
    """Rejected before queueing: answered as HTTP `status` with {"error", "category"}."""

    def __init__(self, message: str, status: int = 400, category: str = "user"):
        super().__init__(message)
        self.message, self.status, self.category = message, status, category


@dataclass
class Job:
    job_id: str
    kind: str
    run: Callable[[], Any] | None  # for "sample" jobs the payload below is used instead
    payload: Any = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: Any = None  # bytes (protobuf) or a JSON-able dict
    error: tuple[str, str] | None = None  # (message, category)
    finished_at: float | None = None
    submitted_at: float = field(default_factory=time.monotonic)


class Worker:
    """One thread running jobs in arrival order; a run of consecutive sample jobs is batched."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, load_backend: Callable[[], Any], on_fatal: Callable[[str], None]
    ):
        self._loop = loop
        self._load_backend = load_backend
        self._on_fatal = on_fatal
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self.backend = None
        self.ready = asyncio.Event()
        self.busy_since: float | None = None
        self._thread = threading.Thread(target=self._main, name="tinker-local-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> bool:
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
        self._finish(job, error=("cancelled by the client", "user"))
        return True

    def queue_depth(self) -> int:
        return len(self._queue)

    def _main(self) -> None:
        try:
            started = time.time()
            self.backend = self._load_backend()
            log.info("model loaded in %.1fs", time.time() - started)
            self._loop.call_soon_threadsafe(self.ready.set)
        except Exception as exc:  # the server is useless without its model
            log.error("could not load the model: %s", exc, exc_info=True)
            self._on_fatal(f"could not load the model: {exc}")
            return
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                jobs = [self._queue.popleft()]
                if jobs[0].kind == "sample":
                    rows = jobs[0].payload[1].num_samples
                    while self._queue and self._queue[0].kind == "sample" and rows < SAMPLE_BATCH_ROWS:
                        rows += self._queue[0].payload[1].num_samples
                        jobs.append(self._queue.popleft())
            self.busy_since = time.monotonic()
            try:
                self._run(jobs)
            finally:
                self.busy_since = None

    def _run(self, jobs: list[Job]) -> None:
        from .wire import UserError

        try:
            if jobs[0].kind == "sample":
                results = self.backend.sample([job.payload for job in jobs])
                for job, result in zip(jobs, results, strict=True):
                    self._finish(job, result=result)
            else:
                self._finish(jobs[0], result=jobs[0].run())
        except UserError as exc:
            for job in jobs:
                self._finish(job, error=(str(exc), "user"))
        except Exception as exc:
            log.error("%s failed: %s\n%s", jobs[0].kind, exc, traceback.format_exc())
            for job in jobs:
                self._finish(job, error=(f"tinker-local {job.kind} failed: {type(exc).__name__}: {exc}", "server"))

    def _finish(self, job: Job, result: Any = None, error: tuple[str, str] | None = None) -> None:
        def settle() -> None:
            job.result, job.error, job.finished_at = result, error, time.monotonic()
            job.done.set()

        self._loop.call_soon_threadsafe(settle)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number this server accepts (every number must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range (every number must be finite)")
    return value


def check_api_key(api_key: object) -> str | None:
    """Why `api_key` cannot be the server's credential, or None. The tinker SDK sends only keys
    starting `tml-`; a short one could be guessed."""
    if not isinstance(api_key, str) or not api_key.startswith("tml-") or len(api_key) < 24:
        return f"{CREDENTIAL_ENV} must be set to a key starting tml- of at least 24 characters"
    return None


class RequireCredential:
    """Every request but the readiness probes must carry the server's credential as X-API-Key.

    A plain ASGI middleware: FastAPI's `@app.middleware("http")` wraps every request and response in
    extra tasks and streams, which on a tiny model cost more CPU than the model's own work."""

    def __init__(self, app, expected: bytes):
        self.app = app
        self.expected = expected

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = next((value for name, value in scope["headers"] if name == b"x-api-key"), b"")
            if not hmac.compare_digest(given, self.expected):
                refusal = JSONResponse(
                    {
                        "error": "missing or wrong API key: send this server's credential as X-API-Key",
                        "category": "user",
                    },
                    status_code=401,
                    headers=NO_RETRY,
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


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
    state: dict[str, Worker] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        worker = Worker(asyncio.get_running_loop(), load_backend, on_fatal)
        state["worker"] = worker
        worker.start()
        yield

    app = FastAPI(title="tinker-local", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    app.add_middleware(RequireCredential, expected=api_key.encode())

    jobs: dict[str, Job] = {}
    sessions: dict[str, dict] = {}
    counter = itertools.count(1)
    model_dir = Path(model_dir).resolve()
    from .model_config import read_model_config

    model_spec = read_model_config(model_dir)

    def load_backend():
        import torch

        used = model_threads(model_spec.parameter_estimate(), threads)
        torch.set_num_threads(used)
        from .backend import Backend

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

    async def backend():
        worker = state["worker"]
        if not worker.ready.is_set():
            await worker.ready.wait()
        return worker.backend

    last_prune = [time.monotonic()]

    def prune() -> None:
        """Forget results older than JOB_RETENTION_S (checked at most every 10 s: it is a scan)."""
        now = time.monotonic()
        if now - last_prune[0] < 10:
            return
        last_prune[0] = now
        for job_id in [j for j, job in jobs.items() if job.finished_at and now - job.finished_at > JOB_RETENTION_S]:
            jobs.pop(job_id, None)

    def submit(kind: str, run: Callable[[], Any] | None = None, payload: Any = None, **extra) -> dict:
        prune()
        job = Job(job_id=f"req-{next(counter)}-{uuid.uuid4().hex[:6]}", kind=kind, run=run, payload=payload)
        jobs[job.job_id] = job
        state["worker"].submit(job)
        return {"request_id": job.job_id, **extra}

    async def body_json(request: Request) -> dict:
        try:
            data = json.loads(await request.body() or b"{}", parse_constant=_refuse_constant, parse_float=_finite_float)
        except ValueError as exc:
            raise RequestError(f"the request body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise RequestError("the request body must be a JSON object")
        return data

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

    async def user_errors(call):
        from .wire import UserError

        try:
            return call()
        except UserError as exc:
            raise RequestError(str(exc)) from exc

    # ------------------------------------------------------------------ service

    @app.get("/healthz")
    @app.get("/api/v1/healthz")
    async def healthz() -> dict:
        worker = state.get("worker")
        busy_since = worker.busy_since if worker else None
        return {
            "status": "ok",
            "model_loaded": bool(worker and worker.ready.is_set()),
            "queue_depth": worker.queue_depth() if worker else 0,
            "worker_busy_s": round(time.monotonic() - busy_since, 3) if busy_since else 0.0,
            # device and dtype once the model is loaded
            "model": worker.backend.lm.describe() if worker and worker.ready.is_set() else None,
        }

    @app.post("/api/v1/client/config")
    async def client_config() -> dict:
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def client_dynamic_config() -> dict:
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict:
        ready = await backend()
        return {
            "supported_models": [
                {
                    "model_name": str(model_dir),
                    "max_context_length": model_spec.context_length,
                    "trainable": True,
                    "sampleable": True,
                    **ready.lm.describe(),
                }
            ]
        }

    @app.post("/api/v1/create_session")
    async def create_session(request: Request) -> dict:
        data = await body_json(request)
        session_id = f"local-{uuid.uuid4().hex[:12]}"
        sessions[session_id] = {
            "created": time.time(),
            "heartbeat": time.time(),
            "finished": None,
            "tags": data.get("tags") or [],
            "user_metadata": data.get("user_metadata") or {},
        }
        log.info("session %s started (sdk %s)", session_id, data.get("sdk_version"))
        return {"type": "create_session", "session_id": session_id}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        data = await body_json(request)
        session = sessions.get(str(data.get("session_id")))
        if session is None:
            raise RequestError(f"unknown session {data.get('session_id')!r}", status=404)
        if session["finished"]:
            raise RequestError("the session has finished", status=410)
        session["heartbeat"] = time.time()
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str, request: Request):
        data = await body_json(request)
        session = sessions.get(session_id)
        if session is None:
            raise RequestError(f"unknown session {session_id!r}", status=404)
        session["finished"] = data.get("reason") or {"type": "success"}
        log.info("session %s finished (%s)", session_id, session["finished"].get("type"))
        ready = await backend()
        submit("release_session", lambda: ready.drop_models(lambda model: model.session_id == session_id))
        return Response(status_code=200, content=b"null", media_type="application/json")

    def live_session(session_id: Any) -> str:
        session = sessions.get(str(session_id))
        if session is None:
            raise RequestError(f"unknown session {session_id!r}: create one with create_session first", status=404)
        if session["finished"]:
            raise RequestError(f"session {session_id!r} has finished")
        return str(session_id)

    # ------------------------------------------------------------------ models and training

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict:
        data = await body_json(request)
        live_session(data.get("session_id"))
        ready = await backend()
        return submit("create_model", lambda: ready.create_model(data))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict:
        data = await body_json(request)
        ready = await backend()
        return await user_errors(lambda: ready.info(str(data.get("model_id"))))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict:
        body = await request.body()
        encoding = request.headers.get("content-encoding")
        if "protobuf" not in request.headers.get("content-type", ""):
            raise RequestError("forward_backward expects an application/x-protobuf body (tinker SDK >= 0.38)")
        ready = await backend()

        def run():
            from .wire import decode_forward_backward

            return ready.forward_backward(decode_forward_backward(body, encoding))

        return submit("forward_backward", run)

    def model_operation(name: str) -> None:
        """POST /api/v1/{name}: JSON body in, the backend method of that name queued on the worker."""

        async def handler(request: Request) -> dict:
            data = await body_json(request)
            ready = await backend()
            return submit(name, lambda: getattr(ready, name)(data), model_id=data.get("model_id"))

        app.post(f"/api/v1/{name}", name=name)(handler)

    for operation in (
        "optim_step",
        "unload_model",
        "save_weights_for_sampler",
        "save_weights",
        "save_weights_external",
    ):
        model_operation(operation)

    # ------------------------------------------------------------------ weights

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict:
        data = await body_json(request)
        if data.get("session_id") is not None:
            live_session(data["session_id"])
        ready = await backend()
        return submit("load_weights", lambda: ready.load_weights(data), model_id=data.get("model_id"))

    # ------------------------------------------------------------------ sampling

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict:
        data = await body_json(request)
        live_session(data.get("session_id"))
        ready = await backend()
        return await user_errors(lambda: ready.create_sampling_session(data))

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict:
        ready = await backend()
        try:
            return await user_errors(lambda: ready.sampler_info(sampler_id))
        except RequestError as exc:
            raise RequestError(exc.message, status=404) from exc

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict:
        data = await body_json(request)
        ready = await backend()
        sampler, spec = await user_errors(lambda: ready.parse_sample(data))
        future = submit("sample", payload=(sampler, spec))
        future["sample_sequence_ids"] = [f"{future['request_id']}:{i}" for i in range(spec.num_samples)]
        return future

    # ------------------------------------------------------------------ futures

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        data = await body_json(request)
        job = jobs.get(str(data.get("request_id")))
        if job is None:
            raise RequestError(
                f"unknown request id {data.get('request_id')!r} (results are kept "
                f"{JOB_RETENTION_S:.0f} s after they finish)",
                status=404,
            )
        if not job.done.is_set():
            try:
                await asyncio.wait_for(job.done.wait(), LONG_POLL_S)
            except asyncio.TimeoutError:
                return {"type": "try_again", "request_id": job.job_id, "queue_state": "active"}
        if job.error is not None:
            return {"error": job.error[0], "category": job.error[1]}
        if isinstance(job.result, bytes):
            return Response(content=job.result, media_type="application/x-protobuf")
        return job.result

    @app.post("/api/v1/cancel_future")
    async def cancel_future(request: Request):
        data = await body_json(request)
        job = jobs.get(str(data.get("request_id")))
        if job is not None and not job.done.is_set():
            state["worker"].cancel(job)
        return Response(status_code=200, content=b"null", media_type="application/json")

    # ------------------------------------------------------------------ REST: runs, checkpoints, sessions

    async def catalog_call(call):
        from .catalog import NotFound
        from .wire import UserError

        try:
            return call()
        except NotFound as exc:
            raise RequestError(str(exc), status=404) from exc
        except UserError as exc:
            raise RequestError(str(exc)) from exc

    def int_param(request: Request, name: str, default: int) -> int:
        value = request.query_params.get(name)
        try:
            return default if value is None else int(value)
        except ValueError:
            raise RequestError(f"query parameter {name} must be a whole number, got {value!r}") from None

    @app.get("/api/v1/training_runs")
    async def list_training_runs(request: Request) -> dict:
        from . import catalog

        ready = await backend()
        with ready.lock:
            live = list(ready.models.values())
        runs = await catalog_call(lambda: catalog.training_runs(ready.checkpoint_dir, live))
        page, cursor = await catalog_call(
            lambda: catalog.paged(runs, int_param(request, "limit", 20), int_param(request, "offset", 0))
        )
        return {"training_runs": page, "cursor": cursor}

    @app.get("/api/v1/training_runs/{model_id}")
    async def get_training_run(model_id: str) -> dict:
        from . import catalog

        ready = await backend()
        with ready.lock:
            live = list(ready.models.values())
        for run in catalog.training_runs(ready.checkpoint_dir, live):
            if run["training_run_id"] == model_id:
                return run
        raise RequestError(f"unknown training run {model_id!r}: no live model and no checkpoints", status=404)

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def list_run_checkpoints(model_id: str) -> dict:
        from . import catalog

        ready = await backend()
        return {"checkpoints": catalog.list_checkpoints(ready.checkpoint_dir, model_id), "cursor": None}

    @app.get("/api/v1/checkpoints")
    async def list_user_checkpoints(request: Request) -> dict:
        from . import catalog

        ready = await backend()
        records = catalog.list_checkpoints(ready.checkpoint_dir)
        page, cursor = await catalog_call(
            lambda: catalog.paged(records, int_param(request, "limit", 100), int_param(request, "offset", 0))
        )
        return {"checkpoints": page, "cursor": cursor}

    def checkpoint_route(suffix: str, method: str):
        return app.api_route(
            f"/api/v1/training_runs/{{model_id}}/checkpoints/{{kind}}/{{name}}{suffix}", methods=[method]
        )

    @checkpoint_route("", "DELETE")
    async def delete_checkpoint(model_id: str, kind: str, name: str):
        from . import catalog

        ready = await backend()

        def delete():
            catalog.delete_checkpoint(ready.checkpoint_dir, model_id, kind, name)
            with ready.lock:
                ready._loaded.pop(f"tinker://{model_id}/{kind}/{name}", None)

        await catalog_call(delete)
        log.info("deleted checkpoint tinker://%s/%s/%s", model_id, kind, name)
        return Response(status_code=200, content=b"null", media_type="application/json")

    @checkpoint_route("/ttl", "PUT")
    async def set_checkpoint_ttl(model_id: str, kind: str, name: str, request: Request):
        from . import catalog

        data = await body_json(request)
        ready = await backend()
        await catalog_call(lambda: catalog.set_ttl(ready.checkpoint_dir, model_id, kind, name, data.get("ttl_seconds")))
        return Response(status_code=200, content=b"null", media_type="application/json")

    async def set_public(model_id: str, kind: str, name: str, public: bool):
        from . import catalog

        ready = await backend()
        await catalog_call(lambda: catalog.update_meta(ready.checkpoint_dir, model_id, kind, name, public=public))
        return Response(status_code=200, content=b"null", media_type="application/json")

    @checkpoint_route("/publish", "POST")
    async def publish_checkpoint(model_id: str, kind: str, name: str):
        return await set_public(model_id, kind, name, True)

    @checkpoint_route("/publish", "DELETE")
    async def unpublish_checkpoint(model_id: str, kind: str, name: str):
        return await set_public(model_id, kind, name, False)

    @checkpoint_route("/external_weights_urls", "GET")
    async def external_weights_urls(model_id: str, kind: str, name: str) -> dict:
        """file:// URLs: the files are on this machine already."""
        from . import catalog

        ready = await backend()
        folder = await catalog_call(lambda: catalog.find_checkpoint(ready.checkpoint_dir, model_id, kind, name))
        files = {p.name: p.resolve().as_uri() for p in sorted(folder.iterdir()) if p.is_file() and p.suffix != ".tmp"}
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 10 * 365 * 86400))
        return {"urls": files, "expires": expires}

    @app.post("/api/v1/weights_info")
    async def get_weights_info(request: Request) -> dict:
        from . import catalog

        data = await body_json(request)
        ready = await backend()
        return await catalog_call(lambda: catalog.weights_info(ready, str(data.get("tinker_path") or "")))

    @app.get("/api/v1/sessions")
    async def list_sessions(request: Request) -> dict:
        newest = sorted(sessions, key=lambda session_id: sessions[session_id]["created"], reverse=True)
        offset, limit = int_param(request, "offset", 0), int_param(request, "limit", 20)
        return {"sessions": newest[offset : offset + limit]}

    @app.get("/api/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> dict:
        session = sessions.get(session_id)
        if session is None:
            raise RequestError(f"unknown session {session_id!r}", status=404)
        ready = await backend()
        with ready.lock:
            runs = [model_id for model_id, model in ready.models.items() if model.session_id == session_id]
            samplers = [sampler_id for sampler_id in ready.samplers if sampler_id.startswith(f"{session_id}:")]
        return {"training_run_ids": runs, "sampler_ids": samplers, "user_metadata": session["user_metadata"] or None}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def not_implemented(path: str, request: Request):
        raise RequestError(f"tinker-local does not implement {request.method} /{path}", status=404)

    return app
