"""The server's one worker thread: every request that touches the model is a Job, run in arrival order
(consecutive sample jobs batched), its result settled on the event loop for retrieve_future to return.
The event loop never runs torch, so heartbeats and polls answer while a long request runs."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .wire import UserError

log = logging.getLogger("tinker_local")

SAMPLE_BATCH_ROWS = 512  # consecutive sample requests are batched up to this many sequences


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
    """One thread running jobs in arrival order; a run of consecutive sample jobs is batched."""

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
                jobs = [self._queue.popleft()]
                if jobs[0].kind == "sample":
                    rows = jobs[0].payload[1].num_samples
                    while self._queue and self._queue[0].kind == "sample" and rows < SAMPLE_BATCH_ROWS:
                        rows += self._queue[0].payload[1].num_samples
                        jobs.append(self._queue.popleft())
            self.busy_since = time.monotonic()
            try:
                if self._before_job is not None:
                    self._before_job()
                self._run(jobs)
            finally:
                self.busy_since = None

    def _run(self, jobs: list[Job]) -> None:
        try:
            if jobs[0].kind == "sample":
                results = self.model_state.sample([job.payload for job in jobs])
                for job, result in zip(jobs, results, strict=True):
                    self._finish(job, result=result)
            else:
                self._finish(jobs[0], result=jobs[0].run())
        except UserError as exc:
            for job in jobs:
                self._finish(job, error=(str(exc), "user"))
        except Exception as exc:
            log.error("%s failed: %s\n%s", jobs[0].kind, exc, traceback.format_exc())
            for job in jobs:
                self._finish(job, error=(f"tinker-local {job.kind} failed: {type(exc).__name__}: {exc}", "server"))

    def _finish(self, job: Job, result: Any = None, error: tuple[str, str] | None = None) -> None:
        def settle() -> None:
            job.result, job.error, job.finished_at = result, error, time.monotonic()
            job.done.set()

        self._loop.call_soon_threadsafe(settle)
