"""The run summary index: $HERMES_HOME/rl/index.sqlite, one row per finished run holding what
store.list_runs computed for it, so that a fresh process lists thousands of runs without reading
their metrics (a run's summary parses the tails of its metrics files and audits them: milliseconds
each, seconds for thousands).

The run folders stay the truth. A row is used only while the run's files have the signature (size,
mtime) it was computed from; otherwise the run is summarised again and the row replaced. A row whose
run folder is gone is dropped. Only runs in a final state are kept (a live run's summary changes
every step, and its lost/stall fields every second). The index is a cache: a missing, corrupt or
foreign file is deleted and rebuilt from the folders, a locked one (another process writing) is
skipped for this call, and an unwritable one makes listing only slower, never wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import zlib
from collections.abc import Sequence
from pathlib import Path

INDEX_FILE = "index.sqlite"
SCHEMA_VERSION = 1  # bump when what a row means changes: an older index is rebuilt (so is one of other keys)
_BUSY_TIMEOUT_S = 0.5


class SummaryIndex:
    """Persisted {run_id: (signature, summary)} of one runs folder's finished runs. A summary is stored
    as the JSON list of its values in `keys`' order (half the bytes of a JSON object, so a fresh process
    decodes 10,000 of them in half the time); an index written for other keys is rebuilt."""

    def __init__(self, path: str | os.PathLike, keys: Sequence[str]):
        self.path = Path(path)
        self.keys = tuple(keys)
        self.version = zlib.crc32(f"{SCHEMA_VERSION}:{','.join(self.keys)}".encode()) & 0x7FFFFFFF

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != self.version:
                db.execute("DROP TABLE IF EXISTS runs")
                db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, sig TEXT NOT NULL, summary TEXT NOT NULL)")
                db.execute(f"PRAGMA user_version = {self.version}")
        except BaseException:
            db.close()
            raise
        return db

    def _reset(self) -> None:
        """A corrupt index (or something else at its path) is removed, to be rebuilt."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}{suffix}")

    def load(self) -> dict[str, tuple[str, dict]]:
        """Every row: {run_id: (signature, summary)}; {} when the index is absent, unreadable or locked."""
        for attempt in range(2):
            try:
                if not self.path.exists():
                    return {}
                db = self._connect()
                try:
                    rows = db.execute("SELECT run_id, sig, summary FROM runs").fetchall()
                finally:
                    db.close()
                return self._decode(rows)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc) or attempt:
                    return {}
                self._reset()
            except sqlite3.DatabaseError:  # "file is not a database", a torn page
                if attempt:
                    return {}
                self._reset()
        return {}

    def _decode(self, rows: list[tuple[str, str, str]]) -> dict[str, tuple[str, dict]]:
        keys, width = self.keys, len(self.keys)
        try:  # one decode of every row at once: a third of the time of one call per row
            values = json.loads("[" + ",".join(text for _id, _sig, text in rows) + "]")
        except ValueError:  # a damaged row: decode one by one, and such a row is only a miss
            values = [_loads(text) for _id, _sig, text in rows]
        if len(values) != len(rows):
            values = [_loads(text) for _id, _sig, text in rows]
        return {
            run_id: (sig, dict(zip(keys, value, strict=True)))
            for (run_id, sig, _text), value in zip(rows, values, strict=True)
            if isinstance(value, list) and len(value) == width
        }

    def _encode(self, summary: dict) -> str:
        return json.dumps([summary.get(key) for key in self.keys], separators=(",", ":"))

    def save(self, changed: dict[str, tuple[str, dict]], gone: set[str] | frozenset[str] = frozenset()) -> bool:
        """Write the changed rows and drop those of runs now gone; False when it could not (the caller
        goes on without: the next listing tries again)."""
        if not changed and not gone:
            return True
        for attempt in range(2):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                db = self._connect()
                try:
                    db.execute("BEGIN IMMEDIATE")
                    db.executemany(
                        "INSERT OR REPLACE INTO runs (run_id, sig, summary) VALUES (?, ?, ?)",
                        [(run_id, sig, self._encode(summary)) for run_id, (sig, summary) in changed.items()],
                    )
                    db.executemany("DELETE FROM runs WHERE run_id = ?", [(run_id,) for run_id in gone])
                    db.execute("COMMIT")
                finally:
                    db.close()
                with contextlib.suppress(OSError):
                    os.chmod(self.path, 0o600)
                return True
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc) or attempt:
                    return False
                self._reset()
            except (sqlite3.DatabaseError, OSError, TypeError, ValueError):
                if attempt:
                    return False
                self._reset()
        return False


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None
