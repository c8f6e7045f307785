"""Billing usage as Tinker cloud reports it (GET /api/v1/billing/usage/events, read by the SDK's
AdminClient.get_billing_usage): the tokens this server processed, per session and UTC hour
(tinker_local.billing_events). Every caller holding the server's key may read it: there is one local principal."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..billing_events import parse_window
from ..context import ServerContext, user_errors


def router(ctx: ServerContext) -> APIRouter:
    routes = APIRouter()

    @routes.get("/api/v1/billing/usage/events")
    async def billing_usage_events(request: Request) -> dict:
        params = request.query_params
        start, end = await user_errors(lambda: parse_window(params.get("starting_on"), params.get("ending_before")))
        ready = await ctx.model_state()
        return ready.usage.events(start, end, ctx.sessions)

    return routes
