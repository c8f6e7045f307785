"""Sampling: sessions over a base model, a snapshot or a saved checkpoint, and asample (queued on the
worker, whose running batch it joins)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..context import RequestError, ServerContext, body_json, user_errors


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()

    @routes.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict:
        data = await body_json(request)
        ctx.live_session(data.get("session_id"))
        ready = await ctx.model_state()
        return await user_errors(lambda: ready.create_sampling_session(data))

    @routes.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict:
        ready = await ctx.model_state()
        try:
            return await user_errors(lambda: ready.sampler_info(sampler_id))
        except RequestError as exc:
            raise RequestError(exc.message, status=404) from exc

    @routes.post("/api/v1/asample")
    async def asample(request: Request) -> dict:
        data = await body_json(request)
        ready = await ctx.model_state()
        sampler, spec = await user_errors(lambda: ready.parse_sample(data))
        future = ctx.submit("sample", payload=(sampler, spec))
        future["sample_sequence_ids"] = [f"{future['request_id']}:{i}" for i in range(spec.num_samples)]
        return future

    return routes
