"""Training models: created, described, trained (forward_backward, optim_step), saved, loaded and
unloaded. Everything that touches the model is queued on the worker and answered as a future."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..context import RequestError, ServerContext, body_json, user_errors
from ..wire import decode_forward_backward

# POST /api/v1/{name}: a JSON body in, the model state's method of that name queued on the worker.
MODEL_OPERATIONS = ("optim_step", "unload_model", "save_weights_for_sampler", "save_weights", "save_weights_external")


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()

    @routes.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict:
        data = await body_json(request)
        ctx.live_session(data.get("session_id"))
        ready = await ctx.model_state()
        return ctx.submit("create_model", lambda: ready.create_model(data))

    @routes.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict:
        data = await body_json(request)
        ready = await ctx.model_state()
        return await user_errors(lambda: ready.info(str(data.get("model_id"))))

    @routes.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict:
        body = await request.body()
        encoding = request.headers.get("content-encoding")
        if "protobuf" not in request.headers.get("content-type", ""):
            raise RequestError("forward_backward expects an application/x-protobuf body (tinker SDK >= 0.38)")
        ready = await ctx.model_state()
        return ctx.submit("forward_backward", lambda: ready.forward_backward(decode_forward_backward(body, encoding)))

    def model_operation(name: str) -> None:
        async def handler(request: Request) -> dict:
            data = await body_json(request)
            ready = await ctx.model_state()
            return ctx.submit(name, lambda: getattr(ready, name)(data), model_id=data.get("model_id"))

        routes.post(f"/api/v1/{name}", name=name)(handler)

    for operation in MODEL_OPERATIONS:
        model_operation(operation)

    @routes.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict:
        data = await body_json(request)
        if data.get("session_id") is not None:
            ctx.live_session(data["session_id"])
        ready = await ctx.model_state()
        return ctx.submit("load_weights", lambda: ready.load_weights(data), model_id=data.get("model_id"))

    return routes
