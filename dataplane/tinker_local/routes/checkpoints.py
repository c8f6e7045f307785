"""The REST catalog, as the SDK's RestClient reads it: training runs, their checkpoints, one
checkpoint's deletion, TTL, publishing and file URLs, and a checkpoint's weights info
(tinker_local.catalog derives every answer from the checkpoint folders and the live models)."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import catalog
from ..checkpoints import SERVER_FILES
from ..context import RequestError, ServerContext, body_json, catalog_call, int_param

log = logging.getLogger("tinker_local")


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()
    _listings(routes, ctx)
    _one_checkpoint(routes, ctx)
    return routes


def _listings(routes: APIRouter, ctx: ServerContext) -> None:
    """Training runs, checkpoints (of a run or all) and weights info."""

    def live_models(ready) -> list:
        with ready.lock:
            return list(ready.models.values())

    @routes.get("/api/v1/training_runs")
    async def list_training_runs(request: Request) -> dict:
        ready = await ctx.model_state()
        live = live_models(ready)
        runs = await catalog_call(lambda: catalog.training_runs(ready.checkpoint_dir, live))
        page, cursor = await catalog_call(
            lambda: catalog.paged(runs, int_param(request, "limit", 20), int_param(request, "offset", 0))
        )
        return {"training_runs": page, "cursor": cursor}

    @routes.get("/api/v1/training_runs/{model_id}")
    async def get_training_run(model_id: str) -> dict:
        ready = await ctx.model_state()
        live = live_models(ready)
        for run in catalog.training_runs(ready.checkpoint_dir, live):
            if run["training_run_id"] == model_id:
                return run
        raise RequestError(f"unknown training run {model_id!r}: no live model and no checkpoints", status=404)

    @routes.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def list_run_checkpoints(model_id: str) -> dict:
        ready = await ctx.model_state()
        return {"checkpoints": catalog.list_checkpoints(ready.checkpoint_dir, model_id), "cursor": None}

    @routes.get("/api/v1/checkpoints")
    async def list_user_checkpoints(request: Request) -> dict:
        ready = await ctx.model_state()
        records = catalog.list_checkpoints(ready.checkpoint_dir)
        page, cursor = await catalog_call(
            lambda: catalog.paged(records, int_param(request, "limit", 100), int_param(request, "offset", 0))
        )
        return {"checkpoints": page, "cursor": cursor}

    @routes.post("/api/v1/weights_info")
    async def get_weights_info(request: Request) -> dict:
        data = await body_json(request)
        ready = await ctx.model_state()
        return await catalog_call(lambda: catalog.weights_info(ready, str(data.get("tinker_path") or "")))


def _one_checkpoint(routes: APIRouter, ctx: ServerContext) -> None:
    """/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}[suffix]: delete, TTL, publish, URLs."""

    def checkpoint_route(suffix: str, method: str):
        return routes.api_route(
            f"/api/v1/training_runs/{{model_id}}/checkpoints/{{kind}}/{{name}}{suffix}", methods=[method]
        )

    @checkpoint_route("", "DELETE")
    async def delete_checkpoint(model_id: str, kind: str, name: str):
        ready = await ctx.model_state()

        def delete():
            catalog.delete_checkpoint(ready.checkpoint_dir, model_id, kind, name)
            with ready.lock:
                ready._loaded.pop(f"tinker://{model_id}/{kind}/{name}", None)

        await catalog_call(delete)
        log.info("deleted checkpoint tinker://%s/%s/%s", model_id, kind, name)
        return Response(status_code=200, content=b"null", media_type="application/json")

    @checkpoint_route("/ttl", "PUT")
    async def set_checkpoint_ttl(model_id: str, kind: str, name: str, request: Request):
        data = await body_json(request)
        ready = await ctx.model_state()
        await catalog_call(lambda: catalog.set_ttl(ready.checkpoint_dir, model_id, kind, name, data.get("ttl_seconds")))
        return Response(status_code=200, content=b"null", media_type="application/json")

    async def set_public(model_id: str, kind: str, name: str, public: bool):
        ready = await ctx.model_state()
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
        """file:// URLs of the export's files (not the server's state.json and meta.json): the files are
        on this machine already."""
        ready = await ctx.model_state()
        folder = await catalog_call(lambda: catalog.find_checkpoint(ready.checkpoint_dir, model_id, kind, name))
        files = {
            p.name: p.resolve().as_uri()
            for p in sorted(folder.iterdir())
            if p.is_file() and p.suffix != ".tmp" and p.name not in SERVER_FILES
        }
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 10 * 365 * 86400))
        return {"urls": files, "expires": expires}
