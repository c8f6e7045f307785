"""Small file primitives: atomic writes, appends of whole lines, tolerant JSONL reads."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import math
import os
import signal
import stat
import tempfile
import weakref
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

from .errors import BadInput, HermesError
from .paths import make_private_dirs

_WRITABLE_HINT = "check that $HERMES_HOME is writable and not full"


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> os.stat_result:
    """Write to a temp file in the same folder, fsync, then rename: readers see old or new, never half.

    Returns the written file's stat, taken before the rename: a stat after it could already see another
    program's change (the rename keeps inode, mtime and size)."""
    path = Path(path)
    try:
        make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise HermesError(f"cannot write {path}: {exc.strerror}", hint=_WRITABLE_HINT) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            written = os.fstat(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise HermesError(f"cannot write {path}: {exc.strerror}", hint=_WRITABLE_HINT) from exc
    return written


_FILE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


class NotRegularFile(OSError):
    """A state file that is a FIFO, socket, device or folder: reading it could block forever or never end."""


_MODES = {  # open() mode -> (flags, the fdopen mode)
    "r": (os.O_RDONLY, "r"),
    "rb": (os.O_RDONLY, "rb"),
    "a": (os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a"),
    "ab": (os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab"),
    "w": (os.O_WRONLY | os.O_CREAT, "w"),
    "wb": (os.O_WRONLY | os.O_CREAT, "wb"),
}


def regular_fd(
    path: str | os.PathLike, flags: int = os.O_RDONLY, *, follow: bool = True, truncate: bool = False
) -> int:
    """The one way a state file is opened: a descriptor on a regular file, got without ever blocking.

    O_NONBLOCK makes opening a FIFO return at once (a plain open() waits for a writer, or a reader, that
    never comes); fstat on the opened descriptor then refuses anything but a regular file, so a file
    swapped between a check and the open cannot slip through; only then is O_NONBLOCK cleared (and a
    file opened for writing truncated, when asked). `follow=False` adds O_NOFOLLOW: a writer never writes
    through a symlink planted in its file's place. Files are created 0600. Raises OSError
    (NotRegularFile naming the kind)."""
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags & ~os.O_TRUNC, 0o600)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            what = _FILE_KINDS.get(kind, "not a regular file")
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({what})", str(path))
        os.set_blocking(fd, True)
        if truncate or flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_regular(
    path: str | os.PathLike, mode: str = "rb", encoding: str | None = None, *, follow: bool | None = None
) -> IO[Any]:
    """open() for state files: a regular file only, opened without blocking (see regular_fd).

    Modes r, rb, a, ab, w, wb (w truncates once the file is known to be regular). Writers do not follow
    a symlink in the file's place unless `follow` says so; readers do (a home or a config file may be a
    link; the callers that must not follow check the resolved path)."""
    if mode not in _MODES:
        raise ValueError(f"open_regular: unsupported mode {mode!r}")
    flags, fdmode = _MODES[mode]
    writes = flags != os.O_RDONLY
    fd = regular_fd(path, flags, follow=not writes if follow is None else follow, truncate=mode in ("w", "wb"))
    try:
        if "b" in mode:
            return os.fdopen(fd, fdmode)
        return os.fdopen(fd, fdmode, encoding=encoding or "utf-8")
    except BaseException:
        os.close(fd)
        raise


def open_append_fd(path: str | os.PathLike, access: int = os.O_WRONLY) -> int:
    """An O_APPEND descriptor (created 0600) on a regular file, opened without blocking: a FIFO planted
    in a log's or a JSONL file's place fails at once (ENXIO without a reader, else NotRegularFile)."""
    return regular_fd(path, access | os.O_APPEND | os.O_CREAT)


def write_regular_text(path: str | os.PathLike, text: str) -> None:
    """Write a whole small file in place (created 0600), refusing a FIFO, device or symlink there."""
    with open_regular(path, "w") as handle:
        handle.write(text)


def read_regular_bytes(path: str | os.PathLike, limit: int | None = None, *, follow: bool = True) -> bytes:
    """The bytes of a regular file (at most `limit`); OSError for anything else (see open_regular).
    `follow=False`: a symlink in its place is refused too (ELOOP) — what hermes-rl's own caches and
    indexes are read with, since only hermes-rl writes them and never as a link."""
    with open_regular(path, follow=follow) as handle:
        return handle.read() if limit is None else handle.read(limit)


def read_regular_text(
    path: str | os.PathLike, limit: int | None = None, errors: str = "strict", *, follow: bool = True
) -> str:
    return read_regular_bytes(path, limit, follow=follow).decode("utf-8", errors=errors)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def dumps(obj: Any, **kwargs: Any) -> str:
    return json.dumps(obj, default=_json_default, **kwargs)


def atomic_write_json(path: Path, obj: Any) -> os.stat_result:
    return atomic_write_text(path, dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(read_regular_text(path))


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one line with a single write(2) on an O_APPEND fd, so concurrent writers never interleave.

    Never a partial line: a write the disk cuts short (full, quota, file size limit) is taken back and
    its error raised. Never glued: after a line some writer left partial, the new one starts on a line
    of its own."""
    line = (dumps(obj) + "\n").encode("utf-8")
    path = Path(path)
    fd = open_append_fd(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = 0
        try:
            while written < len(line):  # a short write is retried once more: that raises the disk's error
                count = os.write(fd, line[written:])
                if not count:
                    raise OSError(errno.EIO, "write wrote nothing")
                written += count
        except OSError:
            if written:
                os.ftruncate(fd, max(0, os.fstat(fd).st_size - written))
            raise
    finally:
        os.close(fd)


def parse_jsonl_line(line: bytes | str) -> dict | None:
    """One JSON object, or None for a partial, garbage or non-object line. NaN/inf become None values.
    orjson reads the strict JSON nearly every line is (several times faster); what it refuses (NaN, Infinity,
    invalid UTF-8, garbage) is read by the standard parser."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _parse_jsonl_line(line)
    return obj if type(obj) is dict else None  # orjson never gives NaN or an infinity


def _parse_jsonl_line(line: bytes | str) -> dict | None:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line or not line.startswith("{") or not line.endswith("}"):
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    for key, value in list(obj.items()):
        if isinstance(value, float) and not math.isfinite(value):
            obj[key] = None
    return obj


def iter_jsonl(path: Path, start: int = 0) -> Iterator[tuple[int, dict]]:
    """Yield (end_offset, obj) for complete lines from byte offset `start`; a partial last line is left for later."""
    for _line_start, end, obj in iter_jsonl_spans(path, start):
        yield end, obj


def iter_jsonl_spans(path: Path, start: int = 0) -> Iterator[tuple[int, int, dict]]:
    """Yield (start_offset, end_offset, obj) for complete lines from byte offset `start` (a reader can
    keep the offsets and read a line back later); a partial last line is left for later."""
    try:
        handle = open_regular(path)
    except OSError:
        return
    with handle:
        handle.seek(start)
        offset = start
        for raw in handle:
            if not raw.endswith(b"\n"):
                break  # partial last line: the writer has not finished it
            line_start, offset = offset, offset + len(raw)
            obj = parse_jsonl_line(raw)
            if obj is not None:
                yield line_start, offset, obj


def last_jsonl_row(
    path: str | os.PathLike, max_scan: int = 1 << 20, where: Callable[[dict], bool] | None = None
) -> dict | None:
    """The last complete, parseable JSON object line of a file (that `where` accepts), read backwards
    from its end.

    A partial last line (the writer is mid-write) and garbage lines are skipped. At most max_scan
    bytes from the end are read: O(line size), not O(file size), so listing many runs stays cheap.
    """
    accept = where or (lambda _row: True)
    try:
        handle = open_regular(path)
    except OSError:
        return None
    with handle:
        end = handle.seek(0, os.SEEK_END)
        floor = max(0, end - max_scan)
        position = end
        pending: bytes | None = None  # a line whose end is read but whose start is not yet; None: no newline seen
        while position > floor:
            size = min(8192, position - floor)
            position -= size
            handle.seek(position)
            parts = handle.read(size).split(b"\n")
            if len(parts) == 1:
                if pending is not None:
                    pending = parts[0] + pending
                continue  # no newline in this block
            # parts[0] continues an earlier line; after the block's last newline comes either the
            # partial last line (skipped) or the start of the pending line.
            whole = parts[1:-1] if pending is None else parts[1:-1] + [parts[-1] + pending]
            for raw in reversed(whole):
                row = parse_jsonl_line(raw)
                if row is not None and accept(row):
                    return row
            pending = parts[0]
        if position == 0 and pending is not None:
            row = parse_jsonl_line(pending)  # the file's first line, now known to be whole
            return row if row is not None and accept(row) else None
        return None


def first_jsonl_row(path: str | os.PathLike, where: Callable[[dict], bool], max_scan: int = 1 << 20) -> dict | None:
    """The first complete JSON object line that `where` accepts, within the file's first max_scan bytes."""
    for end, row in iter_jsonl(Path(path)):
        if where(row):
            return row
        if end >= max_scan:
            break
    return None


def read_jsonl(path: Path) -> list[dict]:
    return [obj for _, obj in iter_jsonl(path)]


# --- locks and guarded YAML (shared by drafts, current selection and profile overrides) ---

YAML_MAX_BYTES = 256 * 1024


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive fcntl lock on `path` + ".lock" for a read-modify-write; released when the block ends.

    A sidecar lock file, so the locked file itself can still be replaced atomically by rename.
    """
    lock_path = Path(str(path) + ".lock")
    try:
        make_private_dirs(lock_path.parent)
        fd = regular_fd(lock_path, os.O_RDWR | os.O_CREAT)  # a FIFO there fails, never blocks
    except OSError as exc:
        raise HermesError(
            f"cannot write {path}: {exc.strerror}", hint="check that $HERMES_HOME is a writable folder and not full"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the fd releases the lock


@functools.lru_cache(maxsize=1)
def _no_alias_loader() -> type:
    """yaml.SafeLoader that refuses anchors and aliases: a few lines of YAML never need them, and
    they are how a tiny file expands into billions of nodes (an alias bomb)."""
    import yaml  # noqa: PLC0415 - PyYAML only where YAML is read or written

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise yaml.YAMLError(f"anchors and aliases are not allowed (line {event.start_mark.line + 1})")
            return super().compose_node(parent, index)

    return NoAliasLoader


def read_yaml(path: Path, *, max_bytes: int = YAML_MAX_BYTES, what: str = "file") -> Any:
    """yaml.safe_load with guards: size cap, no anchors/aliases (alias bombs), no runaway nesting.

    Returns None for a missing or empty file; raises BadInput naming the file for anything unreadable.
    """
    import yaml  # noqa: PLC0415 - light, but only the config paths need it

    path = Path(path)
    try:
        raw = read_regular_bytes(path, max_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror}", hint="fix or delete the file") from exc
    if len(raw) > max_bytes:
        raise BadInput(
            f"{what} {path} is too large (over {max_bytes} bytes)",
            hint="this file should be a few lines of YAML; fix or delete it",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})", hint="fix or delete the file"
        ) from exc
    if "\0" in text:
        raise BadInput(f"{what} {path} contains NUL bytes", hint="fix or delete the file")

    loader = _no_alias_loader()(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise BadInput(f"{what} {path} is not valid YAML: {detail}", hint="fix or delete the file") from exc
    except RecursionError as exc:
        raise BadInput(f"{what} {path} is nested too deeply", hint="fix or delete the file") from exc
    finally:
        loader.dispose()


def epoch_seconds(value: Any) -> float | None:
    """A state-file time as epoch seconds: run.json holds epoch floats, older or foreign files ISO strings."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def temporary_directories() -> list[tuple[weakref.finalize, tempfile.TemporaryDirectory]]:
    """The TemporaryDirectory objects of this process whose folders are still to be removed, each with the
    finalizer that removes it (at exit, or when the object is collected). Through weakref.finalize's
    registry, which has no public API: W&B makes one when imported and one per table it logs."""
    found = []
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        owner = finalizer.peek()
        if owner and isinstance(owner[0], tempfile.TemporaryDirectory):
            found.append((finalizer, owner[0]))
    return found


def remove_temporary_directories() -> None:
    """Remove the folders of this process's TemporaryDirectory objects now: for a process about to end
    without a normal exit's clean-up (os._exit, a signal)."""
    for finalizer, _folder in temporary_directories():
        with contextlib.suppress(Exception):
            finalizer()


def leave_no_temporary_folders_on_sigterm() -> None:
    """A run's processes are stopped with SIGTERM, whose default action skips a normal exit's clean-up:
    the folders of its TemporaryDirectory objects stayed in /tmp (W&B's: two per process, and one per
    rollouts table an environment logs, hundreds in a long run). On SIGTERM remove them, then end by
    SIGTERM as before (the supervisor reports it the same). A program that handles SIGTERM itself
    replaces this; uvicorn's servers raise it again once they have shut down, which comes back here."""

    def on_sigterm(signum, _frame) -> None:
        signal.signal(signum, signal.SIG_DFL)
        remove_temporary_directories()
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
