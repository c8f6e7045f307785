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

It is opened like a state file (fsutil.regular_fd): SQLite's own open follows a symlink, so the path is
first checked without following one — a regular file whose SQLite header carries this index's
application id and version — and after SQLite opened it the path must still be that file. Anything
else at the path (a link, a FIFO, another program's database, an older index) is never opened by
SQLite: a fresh index is made beside it and renamed over it, whole. A sidecar (`-journal`, `-wal`)
that is not a regular file is removed before SQLite could write through it. Rows read back are
checked by the caller's `valid` (store.py: each field's type), so one wrong row is a miss, not an
error in every listing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from ..base.fsutil import regular_fd

INDEX_FILE = "index.sqlite"
SCHEMA_VERSION = 1  # bump when what a row means changes: an older index is rebuilt (so is one of other keys)
_BUSY_TIMEOUT_S = 0.5
APPLICATION_ID = 0x48524C49  # "HRLI" in SQLite's header: this file is a hermes-rl run index
_SQLITE_HEADER = b"SQLite format 3\x00"
_SIDECARS = ("-journal", "-wal", "-shm")


class _Moved(sqlite3.OperationalError):
    """The index path changed between its check and SQLite's open: skipped for this call, like a busy one."""


class SummaryIndex:
    """Persisted {run_id: (signature, summary)} of one runs folder's finished runs. A summary is stored
    as the JSON list of its values in `keys`' order (half the bytes of a JSON object, so a fresh process
    decodes 10,000 of them in half the time); an index written for other keys is rebuilt."""

    def __init__(self, path: str | os.PathLike, keys: Sequence[str], valid: Callable[[str, dict], bool] | None = None):
        self.path = Path(path)
        self.keys = tuple(keys)
        self.valid = valid  # a decoded row's check (its run id, its summary): a row failing it is a miss
        self.version = zlib.crc32(f"{SCHEMA_VERSION}:{','.join(self.keys)}".encode()) & 0x7FFFFFFF

    def _ours(self) -> tuple[int, int] | None:
        """(device, inode) of the index when its path is a regular file (a symlink is not followed) whose
        SQLite header names this index and version; None for anything else or nothing there."""
        try:
            fd = regular_fd(self.path, follow=False)
        except OSError:  # missing, a symlink (ELOOP), a FIFO, a folder
            return None
        try:
            head, st = os.pread(fd, 100, 0), os.fstat(fd)
        finally:
            os.close(fd)
        if len(head) < 100 or not head.startswith(_SQLITE_HEADER):
            return None
        if (int.from_bytes(head[60:64], "big"), int.from_bytes(head[68:72], "big")) != (self.version, APPLICATION_ID):
            return None
        return st.st_dev, st.st_ino

    def _connect(self, create: bool = True) -> sqlite3.Connection | None:
        """A connection to this index (None without one and not `create`); anything else at its path is
        replaced whole by a fresh index first, never opened by SQLite."""
        identity = self._ours()
        if identity is None:
            if not create:
                return None
            self._reset()
            identity = self._ours()
            if identity is None:
                raise _Moved("the index was replaced while it was made")
        for suffix in _SIDECARS:  # SQLite writes its journal through a link planted there
            with contextlib.suppress(OSError):
                if not stat.S_ISREG(os.lstat(f"{self.path}{suffix}").st_mode):
                    os.unlink(f"{self.path}{suffix}")
        db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            st = os.lstat(self.path)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != identity:
                raise _Moved("the index was replaced while it was opened")
        except BaseException:
            db.close()
            raise
        return db

    def _reset(self) -> None:
        """A fresh, empty index made beside the path and renamed over whatever is there (a corrupt index,
        another program's database, a link): replaced whole, never changed in place."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)  # 0600
        os.close(fd)
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, sig TEXT NOT NULL, summary TEXT NOT NULL)")
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {self.version}")
            finally:
                db.close()
            for suffix in _SIDECARS:  # the old file's journal must not be played into the new one
                with contextlib.suppress(OSError):
                    os.unlink(f"{self.path}{suffix}")
            os.replace(tmp, self.path)
        finally:
            for name in (tmp, f"{tmp}-journal"):
                with contextlib.suppress(OSError):
                    os.unlink(name)

    def load(self) -> dict[str, tuple[str, dict]]:
        """Every valid row: {run_id: (signature, summary)}; {} when the index is absent, not ours,
        unreadable or locked (a listing then summarises the runs and saves a fresh index)."""
        for attempt in range(2):
            try:
                db = self._connect(create=False)
                if db is None:
                    return {}
                try:
                    rows = db.execute("SELECT run_id, sig, summary FROM runs").fetchall()
                finally:
                    db.close()
                return self._decode(rows)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc) or isinstance(exc, _Moved) or attempt:
                    return {}
                self._replace_quietly()
            except sqlite3.DatabaseError:  # "file is not a database", a torn page
                if attempt:
                    return {}
                self._replace_quietly()
        return {}

    def _replace_quietly(self) -> None:
        with contextlib.suppress(OSError, sqlite3.Error):
            self._reset()

    def _decode(self, rows: list[tuple[str, str, str]]) -> dict[str, tuple[str, dict]]:
        keys, width = self.keys, len(self.keys)
        try:  # one decode of every row at once: a third of the time of one call per row
            values = json.loads("[" + ",".join(text for _id, _sig, text in rows) + "]")
        except ValueError:  # a damaged row: decode one by one, and such a row is only a miss
            values = [_loads(text) for _id, _sig, text in rows]
        if len(values) != len(rows):
            values = [_loads(text) for _id, _sig, text in rows]
        out = {}
        for (run_id, sig, _text), value in zip(rows, values, strict=True):
            if (
                not (isinstance(run_id, str) and isinstance(sig, str) and isinstance(value, list))
                or len(value) != width
            ):
                continue
            summary = dict(zip(keys, value, strict=True))
            if self.valid is None or self.valid(run_id, summary):
                out[run_id] = (sig, summary)
        return out

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
                assert db is not None  # made when missing
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
                return True  # made 0600 (mkstemp), never chmod'ed through a path
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc) or isinstance(exc, _Moved) or attempt:
                    return False
                self._replace_quietly()
            except (sqlite3.DatabaseError, OSError, TypeError, ValueError):
                if attempt:
                    return False
                self._replace_quietly()
        return False


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None
