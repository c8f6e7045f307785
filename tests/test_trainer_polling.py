"""The trainer's wait for a batch: an empty /batch is retried at once at first and then ever less often,
so a slow environment does not make the trainer and run-api trade 50 requests a second; a batch that
comes is still taken within the longest interval."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer

from hermes_rl.dataplane.trainer.run_api import RunApi
from hermes_rl.dataplane.trainer.settings import TrainerSettings


def settings(api_url: str) -> TrainerSettings:
    return TrainerSettings(
        config_path=Path("config.yaml"),
        run_dir=Path("."),
        backend="local",
        base_url=None,
        base_model="tiny",
        api_url=api_url,
        inference_host="127.0.0.1",
        inference_port=0,
        batch_size=1,
        group_size=2,
        total_steps=1,
        max_token_length=16,
        max_token_trainer_length=64,
        lora_rank=1,
        learning_rate=1e-4,
    )


def test_an_empty_batch_is_polled_less_and_less_often_and_a_batch_is_still_taken_promptly():
    polls: list[float] = []
    ready_at: list[float] = []

    async def batch(_request):
        polls.append(time.monotonic())
        return web.json_response({"batch": [{"tokens": [[1]]}] if ready_at else None})

    async def go():
        app = web.Application()
        app.router.add_get("/batch", batch)
        async with TestServer(app) as server:
            s = settings(str(server.make_url("")).rstrip("/"))
            api = RunApi(s.api_url, s.batch_poll_s, s.batch_poll_max_s)  # as the trainer makes it
            try:
                waiting = asyncio.create_task(api.next_batch())
                await asyncio.sleep(4.0)
                ready_at.append(time.monotonic())
                got = await asyncio.wait_for(waiting, 5)
                return got, time.monotonic()
            finally:
                await api.close()

    got, taken_at = asyncio.run(go())
    assert got == [{"tokens": [[1]]}]
    empty = [t for t in polls if t < ready_at[0]]
    assert polls[1] - polls[0] < 0.1  # a batch that comes at once is not waited for
    # 4 s of nothing: a fixed 20 ms interval would have asked ~200 times.
    assert len(empty) <= 4.0 / settings("").batch_poll_max_s + 10, len(empty)
    assert taken_at - ready_at[0] <= settings("").batch_poll_max_s + 0.2
