"""The trainer's side of the Atropos trajectory API (run-api): register, then pull scored batches."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

log = logging.getLogger("trainer")

REGISTER_WAIT_S = 60
UNREACHABLE_AFTER = 50  # failed polls in a row (~10 s of a dead run-api): the run cannot go on


class RunApi:
    def __init__(self, url: str, poll_s: float, poll_max_s: float):
        self.url = url
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._early_batch: list[dict] | None = None

    async def register(self, payload: dict) -> None:
        """Register, then take one (empty) /batch: run-api only lets environments register once the trainer
        has asked for a batch. A batch that answer carries is the first next_batch returns."""
        deadline = time.time() + REGISTER_WAIT_S
        while True:
            try:
                async with self.http.post(f"{self.url}/register", json=payload) as resp:
                    resp.raise_for_status()
                    await resp.json()
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                if time.time() > deadline:
                    raise RuntimeError(
                        f"run-api at {self.url} did not accept /register within {REGISTER_WAIT_S} s: {exc}"
                    ) from exc
                await asyncio.sleep(0.2)
        data = await self._get_json("/batch")
        if data.get("batch"):
            self._early_batch = data["batch"]

    async def _get_json(self, path: str) -> dict:
        async with self.http.get(f"{self.url}{path}") as resp:
            resp.raise_for_status()
            return await resp.json()

    async def next_batch(self) -> list[dict]:
        """The next scored batch, polling with back-off (poll_s, ×1.5, up to poll_max_s) while there is none."""
        if self._early_batch:
            batch, self._early_batch = self._early_batch, None
            return batch
        failures = 0
        interval = self.poll_s
        while True:
            try:
                data = await self._get_json("/batch")
                failures = 0
            except (TimeoutError, aiohttp.ClientError) as exc:
                failures += 1
                if failures >= UNREACHABLE_AFTER:
                    raise RuntimeError(f"run-api at {self.url} unreachable: {exc}") from exc
                await asyncio.sleep(0.2)
                continue
            batch = data.get("batch")
            if batch:
                return batch
            await asyncio.sleep(interval)
            interval = min(interval * 1.5, self.poll_max_s)

    async def close(self) -> None:
        await self.http.close()
