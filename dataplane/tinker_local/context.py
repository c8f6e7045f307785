"""What every route of the local server shares: the worker and the futures it settles, the sessions,
the model's spec, and the helpers that turn a request into a job or a refusal (RequestError).

Work that touches the model (create_model, forward_backward, optim_step, saves, loads, asample)
becomes a future: `submit` queues it to the ONE worker thread in arrival order and returns its id at
once; `retrieve_future` long-polls it. A request refused before queueing is a RequestError, answered
as HTTP `status` with {"error", "category"} and no retry.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request

from .catalog import NotFound
from .model_config import ModelSpec
from .wire import UserError
from .worker import Job, Worker

JOB_RETENTION_S = 600.0  # finished results are kept this long for retries of retrieve_future
NO_RETRY = {"x-should-retry": "false"}


class RequestError(Exception):
    """Rejected before queueing: answered as HTTP `status` with {"error", "category"}."""

    def __init__(self, message: str, status: int = 400, category: str = "user"):
        super().__init__(message)
        self.message, self.status, self.category = message, status, category


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number this server accepts (every number must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range (every number must be finite)")
    return value


async def body_json(request: Request) -> dict:
    """The request's JSON object; NaN, infinities and anything but an object are refused."""
    try:
        data = json.loads(await request.body() or b"{}", parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise RequestError(f"the request body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    return data


def int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    try:
        return default if value is None else int(value)
    except ValueError:
        raise RequestError(f"query parameter {name} must be a whole number, got {value!r}") from None


async def user_errors(call: Callable[[], Any]) -> Any:
    """`call()`, its UserError answered as a 400 RequestError."""
    try:
        return call()
    except UserError as exc:
        raise RequestError(str(exc)) from exc


async def catalog_call(call: Callable[[], Any]) -> Any:
    """`call()` on the checkpoint catalog: NotFound is a 404, any other UserError a 400."""
    try:
        return call()
    except NotFound as exc:
        raise RequestError(str(exc), status=404) from exc
    except UserError as exc:
        raise RequestError(str(exc)) from exc


class ServerContext:
    """One server's shared state. `worker` is set when the app starts (its lifespan)."""

    def __init__(self, model_dir: Path, model_spec: ModelSpec):
        self.model_dir = model_dir
        self.model_spec = model_spec
        self.worker: Worker | None = None
        self.jobs: dict[str, Job] = {}
        self.sessions: dict[str, dict] = {}
        self._counter = itertools.count(1)
        self._last_prune = time.monotonic()

    async def model_state(self):
        """The loaded ModelState, once the worker has loaded the model (waiting for it until then)."""
        worker = self.worker
        if not worker.ready.is_set():
            await worker.ready.wait()
        return worker.model_state

    def prune(self) -> None:
        """Forget results older than JOB_RETENTION_S (checked at most every 10 s: it is a scan)."""
        now = time.monotonic()
        if now - self._last_prune < 10:
            return
        self._last_prune = now
        old = [j for j, job in self.jobs.items() if job.finished_at and now - job.finished_at > JOB_RETENTION_S]
        for job_id in old:
            self.jobs.pop(job_id, None)

    def submit(self, kind: str, run: Callable[[], Any] | None = None, payload: Any = None, **extra) -> dict:
        """Queue a job on the worker; the future's answer: its request_id (and `extra`)."""
        self.prune()
        job = Job(job_id=f"req-{next(self._counter)}-{uuid.uuid4().hex[:6]}", kind=kind, run=run, payload=payload)
        self.jobs[job.job_id] = job
        self.worker.submit(job)
        return {"request_id": job.job_id, **extra}

    def live_session(self, session_id: Any) -> str:
        """The id of a session that exists and has not finished, else a RequestError."""
        session = self.sessions.get(str(session_id))
        if session is None:
            raise RequestError(f"unknown session {session_id!r}: create one with create_session first", status=404)
        if session["finished"]:
            raise RequestError(f"session {session_id!r} has finished")
        return str(session_id)
