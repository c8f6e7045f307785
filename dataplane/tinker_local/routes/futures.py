"""Futures: retrieve_future long-polls a queued job (answering `try_again` while it is pending) and
returns its result — protobuf for forward_backward and samples, JSON otherwise — or {"error",
"category"}, which the SDK raises as RequestFailedError; cancel_future drops a job still queued."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..context import JOB_RETENTION_S, RequestError, ServerContext, body_json

# The SDK waits up to 45 s for a retrieve_future answer and logs a WARNING for every try_again, so a
# request that runs long (a forward_backward queued behind an environment's sampling) is answered once
# per 40 s of it, not twice.
LONG_POLL_S = 40.0


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()

    @routes.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        data = await body_json(request)
        job = ctx.jobs.get(str(data.get("request_id")))
        if job is None:
            raise RequestError(
                f"unknown request id {data.get('request_id')!r} (results are kept "
                f"{JOB_RETENTION_S:.0f} s after they finish)",
                status=404,
            )
        if not job.done.is_set():
            try:
                await asyncio.wait_for(job.done.wait(), LONG_POLL_S)
            except TimeoutError:
                return {"type": "try_again", "request_id": job.job_id, "queue_state": "active"}
        if job.error is not None:
            return {"error": job.error[0], "category": job.error[1]}
        if isinstance(job.result, bytes):
            return Response(content=job.result, media_type="application/x-protobuf")
        return job.result

    @routes.post("/api/v1/cancel_future")
    async def cancel_future(request: Request):
        data = await body_json(request)
        job = ctx.jobs.get(str(data.get("request_id")))
        if job is not None and not job.done.is_set():
            ctx.worker.cancel(job)
        return Response(status_code=200, content=b"null", media_type="application/json")

    return routes
