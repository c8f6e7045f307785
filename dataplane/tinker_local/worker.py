"""The server's one worker thread: every request that touches the model is a Job, run in arrival order,
its result settled on the event loop for retrieve_future to return. Sample jobs are batched
continuously: a sample job starts a batch (model_state.sample_batch, batch.py) with the queued sample jobs
for the same weights, and between decoding steps the sample jobs that arrived since join it, as long
as no other kind of job is queued ahead of them; each is answered when its last sample finishes. The
event loop never runs torch, so heartbeats and polls answer while a long request runs."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .wire import UserError

log = logging.getLogger("tinker_local")


@dataclass
class Job:
    job_id: str
    kind: str
    run: Callable[[], Any] | None  # for "sample" jobs the payload below is used instead
    payload: Any = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: Any = None  # bytes (protobuf) or a JSON-able dict
    error: tuple[str, str] | None = None  # (message, category)
    finished_at: float | None = None
    submitted_at: float = field(default_factory=time.monotonic)


class Worker:
    """One thread running jobs in arrival order; sample jobs are batched continuously."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        load_model_state: Callable[[], Any],
        on_fatal: Callable[[str], None],
        before_job: Callable[[], None] | None = None,
    ):
        self._loop = loop
        self._before_job = before_job  # the server's thread choice
        self._load_model_state = load_model_state
        self._on_fatal = on_fatal
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self.model_state = None
        self.ready = asyncio.Event()
        self.busy_since: float | None = None
        # sampling: rows decoding now; batches so far, requests that joined one mid-decode, most rows in a step
        self.sampling = {"rows": 0, "batches": 0, "joined": 0, "most_rows": 0}
        self._thread = threading.Thread(target=self._main, name="tinker-local-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> bool:
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
        self._finish(job, error=("cancelled by the client", "user"))
        return True

    def queue_depth(self) -> int:
        return len(self._queue)

    def _main(self) -> None:
        try:
            started = time.time()
            self.model_state = self._load_model_state()
            log.info("model loaded in %.1fs", time.time() - started)
            self._loop.call_soon_threadsafe(self.ready.set)
        except Exception as exc:  # the server is useless without its model
            log.error("could not load the model: %s", exc, exc_info=True)
            self._on_fatal(f"could not load the model: {exc}")
            return
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                job = self._queue.popleft()
            self.busy_since = time.monotonic()
            try:
                if self._before_job is not None:
                    self._before_job()
                if job.kind == "sample":
                    self._sample(job)
                else:
                    self._run(job)
            finally:
                self.busy_since = None

    def _run(self, job: Job) -> None:
        try:
            self._finish(job, result=job.run())  # type: ignore[misc]
        except Exception as exc:
            self._fail([job], exc)

    def _fail(self, jobs: list[Job], exc: Exception) -> None:
        if isinstance(exc, UserError):
            for job in jobs:
                self._finish(job, error=(str(exc), "user"))
            return
        if jobs:
            log.error("%s failed: %s\n%s", jobs[0].kind, exc, traceback.format_exc())
        for job in jobs:
            self._finish(job, error=(f"tinker-local {job.kind} failed: {type(exc).__name__}: {exc}", "server"))

    def _sample(self, first: Job) -> None:
        """Decode `first` with the queued sample jobs for the same weights, adding those that arrive
        between steps, until every one is answered."""
        try:
            batch = self.model_state.sample_batch(first.payload[0])
            batch.admit(*first.payload)
            batch.add([(first, *first.payload)])
        except Exception as exc:
            self._fail([first], exc)
            return
        self.sampling["batches"] += 1
        self.sampling["rows"] = batch.rows
        self.sampling["most_rows"] = max(self.sampling["most_rows"], batch.most_rows)
        while batch.rows:
            joining = self._joining(batch)
            if joining:
                joined = batch.joined
                try:
                    batch.add([(job, *job.payload) for job in joining])
                except Exception as exc:  # those requests fail; the batch goes on without them
                    self._fail(joining, exc)
                self.sampling["joined"] += batch.joined - joined
                self.sampling["most_rows"] = max(self.sampling["most_rows"], batch.most_rows)
            try:
                done = batch.step()
            except Exception as exc:
                self._fail(batch.tokens(), exc)
                break
            for job, result in done:
                self._finish(job, result=result)
            self.sampling["rows"] = batch.rows
        self.sampling["rows"] = 0

    def _joining(self, batch) -> list[Job]:
        """The queued sample jobs that may join the batch: those ahead of any other kind of job, for the
        same weights, while they fit (backend order among sample jobs is free: they do not touch each other)."""
        joining: list[Job] = []
        with self._cond:
            for job in self._queue:
                if job.kind != "sample":
                    break
                if batch.admit(*job.payload):
                    joining.append(job)
            for job in joining:
                self._queue.remove(job)
        return joining

    def _finish(self, job: Job, result: Any = None, error: tuple[str, str] | None = None) -> None:
        def settle() -> None:
            job.result, job.error, job.finished_at = result, error, time.monotonic()
            job.done.set()

        self._loop.call_soon_threadsafe(settle)
