"""The run's metrics digest (core.readers.metrics_digest) kept current while the trainer writes, so the
first look at a long run (the dashboard's charts, `results`, the report) reads a digest that is at most
EVERY_S behind instead of building one from every row on disk (~10 s for a million rows on 2 cores).
The digest stays a cache: any reader extends it from the files, and a failure here never stops training."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hermes_rl.core.readers.metrics_digest import MetricsDigest

log = logging.getLogger(__name__)

EVERY_S = 30.0


class DigestKeeper:
    def __init__(self, run_dir: Path, every_s: float = EVERY_S):
        self.run_dir = run_dir
        self.every_s = every_s
        self._digest = None  # loaded on the first update: what an earlier trainer (a resume) digested stays
        self._last = time.monotonic()
        self._failed = False

    def tick(self) -> None:
        """After a metrics row: the digest extended when EVERY_S have passed since the last time."""
        if time.monotonic() - self._last >= self.every_s:
            self.update()

    def update(self) -> None:
        self._last = time.monotonic()
        if self._failed:
            return
        try:
            if self._digest is None:
                self._digest = MetricsDigest(self.run_dir)
            self._digest.update()
        except Exception as exc:  # readers build it themselves; training goes on
            self._failed = True
            log.warning("metrics digest not kept (readers will build it): %s", exc)
