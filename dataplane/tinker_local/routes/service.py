"""Endpoints about the server itself: readiness (/healthz, open without a key), the SDK's client
config and feature flags, the API key's exchange for a JWT, telemetry (accepted, dropped) and the
served model's capabilities."""

from __future__ import annotations

import time

from fastapi import APIRouter

from ..auth import TOKEN_PATH, Credential
from ..context import ServerContext

# The SDK's feature flags, answered to /client/config: the API key exchanged for a JWT (as on Tinker
# cloud, so RestClient.whoami() has its claims: tinker_local.auth), fwd/bwd chunks of one call sent
# in order, per-request retrieve_future polling.
CLIENT_CONFIG = {
    "pjwt_auth_enabled": True,
    "credential_default_source": "api_key",
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
    "sample_no_retries": False,
}


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()

    @routes.get("/healthz")
    @routes.get("/api/v1/healthz")
    async def healthz() -> dict:
        worker = ctx.worker
        busy_since = worker.busy_since if worker else None
        return {
            "status": "ok",
            "model_loaded": bool(worker and worker.ready.is_set()),
            "queue_depth": worker.queue_depth() if worker else 0,
            "worker_busy_s": round(time.monotonic() - busy_since, 3) if busy_since else 0.0,
            # sampling: rows decoding now; batches started, requests that joined one mid-decode, most rows a step
            "sampling": dict(worker.sampling) if worker else None,
            # device and dtype once the model is loaded
            "model": worker.model_state.lm.describe() if worker and worker.ready.is_set() else None,
        }

    @routes.post("/api/v1/client/config")
    async def client_config() -> dict:
        return CLIENT_CONFIG

    @routes.post("/api/v1/client/dynamic_config")
    async def client_dynamic_config() -> dict:
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @routes.post("/api/v1/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}

    @routes.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict:
        ready = await ctx.model_state()
        return {
            "supported_models": [
                {
                    "model_name": str(ctx.model_dir),
                    "max_context_length": ctx.model_spec.context_length,
                    "trainable": True,
                    "sampleable": True,
                    **ready.lm.describe(),
                }
            ]
        }

    return routes


def auth_router(credential: Credential) -> APIRouter:
    """The SDK's credential exchange: the API key (checked by auth.RequireCredential) for a JWT."""
    routes = APIRouter()

    @routes.post(TOKEN_PATH)
    async def auth_token() -> dict:
        return {"jwt": credential.mint()}

    return routes
