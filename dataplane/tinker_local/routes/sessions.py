"""Sessions: created, kept alive by heartbeats, finished (their models released), listed and looked up."""

from __future__ import annotations

import logging
import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..context import RequestError, ServerContext, body_json, int_param

log = logging.getLogger("tinker_local")


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()
    sessions = ctx.sessions

    @routes.post("/api/v1/create_session")
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

    @routes.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        data = await body_json(request)
        session = sessions.get(str(data.get("session_id")))
        if session is None:
            raise RequestError(f"unknown session {data.get('session_id')!r}", status=404)
        if session["finished"]:
            raise RequestError("the session has finished", status=410)
        session["heartbeat"] = time.time()
        return {"type": "session_heartbeat"}

    @routes.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str, request: Request):
        data = await body_json(request)
        session = sessions.get(session_id)
        if session is None:
            raise RequestError(f"unknown session {session_id!r}", status=404)
        session["finished"] = data.get("reason") or {"type": "success"}
        log.info("session %s finished (%s)", session_id, session["finished"].get("type"))
        ready = await ctx.model_state()
        ctx.submit("release_session", lambda: ready.drop_models(lambda model: model.session_id == session_id))
        return Response(status_code=200, content=b"null", media_type="application/json")

    @routes.get("/api/v1/sessions")
    async def list_sessions(request: Request) -> dict:
        newest = sorted(sessions, key=lambda session_id: sessions[session_id]["created"], reverse=True)
        offset, limit = int_param(request, "offset", 0), int_param(request, "limit", 20)
        return {"sessions": newest[offset : offset + limit]}

    @routes.get("/api/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> dict:
        session = sessions.get(session_id)
        if session is None:
            raise RequestError(f"unknown session {session_id!r}", status=404)
        ready = await ctx.model_state()
        with ready.lock:
            runs = [model_id for model_id, model in ready.models.items() if model.session_id == session_id]
            samplers = [sampler_id for sampler_id in ready.samplers if sampler_id.startswith(f"{session_id}:")]
        return {"training_run_ids": runs, "sampler_ids": samplers, "user_metadata": session["user_metadata"] or None}

    return routes
