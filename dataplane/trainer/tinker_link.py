"""What the trainer knows of its Tinker server beyond the training client: whether it answers, the session
it used and that session's usage report (dataplane.cloud_usage), and where the local server put a
checkpoint. None of it is fatal: a run does not need it."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from urllib.parse import urlsplit

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import tinker_checkpoint_subpath

from .. import cloud_usage
from .settings import TrainerSettings

log = logging.getLogger("trainer")


async def reachable(base_url: str | None, timeout: float = 0.5) -> bool:
    """Whether the configured Tinker server (backend.base_url) accepts a TCP connection within
    `timeout`; True when none is configured (the SDK's default, Tinker cloud, is not probed)."""
    if not base_url:
        return True
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), timeout)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


def record_session(settings: TrainerSettings, training_client) -> None:
    """The Tinker session's id in tinker_session.json: where Tinker's own usage report is looked up."""
    try:
        session_id = training_client.holder.get_session_id()
        cloud_usage.record_session(settings.run_dir, session_id, settings.base_url, local=settings.backend == "local")
    except Exception as exc:
        log.warning("could not record the Tinker session id: %s", exc)


async def read_local_usage(settings: TrainerSettings) -> None:
    """On the local backend, the server's usage report (cloud_usage.json) while the server still runs:
    it ends with the run and its key is never stored."""
    if settings.backend != "local":
        return
    check = functools.partial(
        cloud_usage.check,
        settings.run_dir,
        base_url=settings.base_url,
        api_key=os.environ.get("TINKER_API_KEY"),
        timeout_s=5.0,
    )
    try:
        await asyncio.get_running_loop().run_in_executor(None, check)
    except Exception as exc:
        log.warning("could not read the local server's usage report: %s", exc)


def local_checkpoint_path(settings: TrainerSettings, tinker_path: str | None) -> str | None:
    """Where the local server put a checkpoint: its tinker:// path under the run's checkpoint folder, by
    the server's layout (paths.tinker_checkpoint_subpath)."""
    if settings.backend != "local" or not tinker_path:
        return None
    try:
        folder = settings.checkpoint_dir / tinker_checkpoint_subpath(tinker_path)
    except BadInput:
        return None
    return str(folder) if folder.is_dir() else None
