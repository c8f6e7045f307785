"""A digest of a run's metrics files, kept beside them (.metrics_digest.json) and extended as they grow,
so that a view of a long run reads what its screen needs and never all rows: a chart a downsampled
series that keeps every block's extremes, a results summary the first/best/last of each metric and a
few rows read back at their byte offsets, an export the key names before it streams the rows.

Per file, rows are grouped in blocks of BLOCK_ROWS: each block keeps the byte offset and step of its
first row and, per numeric metric, the step and value of its minimum and its maximum; per metric the
file keeps its first, last and best (largest) value and their steps. Environment rows also count under
`KEY@ENVIRONMENT`. Like the readers (metrics.py), a digest reads only what was appended since it was
last taken; a file truncated, replaced or rewritten is digested again from its start: besides its
inode and size, a digest keeps a checksum of the first and of the last 4 KB it read (a rewrite of the
same length or longer is a new file; one that kept both is not told apart). The files stay the truth:
the digest is a cache, rebuilt when missing, unreadable, of another version or holding a value of the
wrong type (checked field by field as it is read back); it is read without following a symlink and
written whole (atomic rename); when its folder is not writable it is kept in memory only.

A long build (COLUMNAR_BYTES or more to digest: a run copied in, or left by a dead trainer) reads the file
READ_BYTES at a time as columns (polars' NDJSON reader, which the `train` extra installs) and folds
each block with one group-by, near the speed of reading the bytes (bench/bench_digest.py). A chunk the
columns cannot hold as its rows do (blank or garbage lines, NaN, null, text or bools among numbers, a step
that is not a whole number) is read line by line instead, as a short update always is: each line parsed by
orjson (the standard parser only for what orjson refuses: NaN, Infinity, invalid UTF-8, garbage) and each
block folded a key at a time over its rows. Both ways hold the same digest (tests/test_scale.py). A build
says how it goes through REPORT_PROGRESS (the CLI prints a line on stderr once it has taken a second).
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import functools
import importlib.util
import json
import math
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from itertools import accumulate, compress, repeat
from operator import is_not
from pathlib import Path
from typing import Any

import orjson

from ..base.fsutil import atomic_write_text, open_regular, parse_jsonl_line, regular_fd

DIGEST_FILE = ".metrics_digest.json"
VERSION = 4  # 4: the content checksums (head, tail)
FINGERPRINT_BYTES = 4096
BLOCK_ROWS = 256
FILES = ("metrics.jsonl", "env_metrics.jsonl")
_SKIP = {"step", "time", "source", "env", "environment"}
_NUMBER_TYPES = {int, float}
_FLOAT_MAX = sys.float_info.max
# what one read of a metrics file takes (a digest is built a chunk at a time): larger chunks read as columns are
# no faster (1,000,000 rows: 1.72 s at 4 MB, 1.62 s at 32 MB) and hold more memory (133 MB and 234 MB at peak)
READ_BYTES = 1 << 22
COLUMNAR_BYTES = 8 << 20  # from this many new bytes an update reads columns (below, polars' import costs more)
_COLUMN_TYPES = ("Int64", "Float64", "Null")  # what a metric column may be read as (else: line by line)

# progress(done, total): bytes of a digest being built, called once per chunk read
Progress = Callable[[int, int], None]
# Who is told how a long build goes (the CLI prints a line on stderr); None: nobody.
REPORT_PROGRESS: contextvars.ContextVar[Callable[[Path, int, int], None] | None] = contextvars.ContextVar(
    "metrics_digest_progress", default=None
)


def _finite(value) -> float | None:
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int:
        return float(value) if -_FLOAT_MAX <= value <= _FLOAT_MAX else None
    return None


def _chunks(path: Path, start: int, progress: Progress | None, total: int, columnar: bool) -> Iterator[tuple]:
    """Per chunk read from byte offset `start`: the start offsets of its complete lines that hold a row, those
    rows (a list of dicts; with `columnar`, a polars DataFrame where the columns hold them as the rows do), and
    the end offset of the last of them (as fsutil.iter_jsonl_spans reads them; a partial last line is left for
    later, a line that holds no row is skipped)."""
    try:
        handle = open_regular(path)
    except OSError:
        return
    with handle:
        handle.seek(start)
        offset, carry = start, b""
        while chunk := handle.read(READ_BYTES):
            body = carry + chunk if carry else chunk
            del chunk  # a long build's memory is a few chunks, whatever the file's size
            cut = body.rfind(b"\n") + 1
            body, carry = body[:cut], body[cut:]  # the writer has not finished the rest (or the next chunk holds it)
            if not body:
                continue
            frame = _frame(body, offset) if columnar else None
            if frame is not None:
                yield frame[0], frame[1], offset + len(body)
            else:
                yield from _rows(body.split(b"\n")[:-1], offset)
            offset += len(body)
            if progress is not None:
                progress(offset - start, total)


def _rows(lines: list[bytes], offset: int) -> Iterator[tuple[list, list, int]]:
    """(start offsets, rows, end offset) of the lines that hold a row, the first line starting at `offset`."""
    starts = list(accumulate(map((1).__add__, map(len, lines)), initial=offset))
    try:
        rows = list(map(orjson.loads, lines))  # strict JSON, as nearly every line is
    except orjson.JSONDecodeError:
        rows = list(map(parse_jsonl_line, lines))  # NaN, Infinity, invalid UTF-8, garbage: line by line
    if set(map(type, rows)) != {dict}:
        rows = [row if type(row) is dict else None for row in rows]
    if None in rows:
        kept = [i for i, row in enumerate(rows) if row is not None]
        if kept:
            yield [starts[i] for i in kept], [rows[i] for i in kept], starts[kept[-1] + 1]
    elif rows:
        yield starts[:-1], rows, starts[-1]


@functools.cache
def _columns_readable() -> bool:
    """Whether polars and numpy are installed (the `train` extra brings them; a view-only install reads rows)."""
    return all(importlib.util.find_spec(name) is not None for name in ("polars", "numpy"))


def _frame(body: bytes, offset: int) -> tuple[Any, Any] | None:
    """(line start offsets, DataFrame) of complete lines `body` (starting at `offset`), when its columns hold
    exactly what the rows hold: a row per line, a whole-number step in each, every metric a number or absent,
    an environment a name. None otherwise (the chunk is then read line by line)."""
    import numpy as np  # noqa: PLC0415 - optional (the train extra), and only for a long build
    import polars as pl  # noqa: PLC0415 - optional (the train extra), and only for a long build

    keys_written = body.count(b'":')  # a key per `"name":` (a text value that holds one: line by line)
    frame = None
    for infer in (100, None):  # the columns of the first rows; all rows' when a later row has a key more
        try:
            frame = pl.read_ndjson(body, infer_schema_length=infer)
        except Exception:  # noqa: BLE001 - garbage, NaN, invalid UTF-8, a mix no column type holds: line by line
            return None
        # a key the columns do not hold (the reader drops it), or written null, leaves this short
        if sum(frame.count().row(0)) == keys_written:
            break
    else:
        return None
    data = np.frombuffer(body, dtype=np.uint8)
    step = 1 << 20  # newlines found a megabyte at a time: no temporary as large as the chunk
    ends = np.concatenate([np.flatnonzero(data[i : i + step] == 10) + i for i in range(0, len(data), step)])
    if frame.height != len(ends) or frame.height == 0:  # a blank line (skipped by the reader)
        return None
    schema = frame.schema
    if str(schema.get("step")) != "Int64" or frame["step"].null_count():
        return None
    for name, dtype in schema.items():
        kind = str(dtype)
        if name == "environment":
            if kind not in ("String", "Null"):
                return None
        elif name not in ("source", "env") and kind not in _COLUMN_TYPES:
            return None
    starts = np.concatenate(([0], ends[:-1] + 1)) + offset
    return starts, frame


def _empty_file() -> dict:
    # derived: the KEY@ENVIRONMENT names made here (a metric's own name may hold an @ too)
    return {
        "inode": None,
        "offset": 0,
        "rows": 0,
        "blocks": [],
        "keys": {},
        "environments": [],
        "derived": [],
        "ordered": True,
        "last_step": None,
        "head": None,  # checksums of the first and the last FINGERPRINT_BYTES before `offset`
        "tail": None,
    }


def _int(value) -> bool:
    return type(value) is int and value >= -(2**63) and value < 2**63


def _num(value) -> bool:
    return type(value) is int or (type(value) is float and math.isfinite(value))


def _pairs(value, width: int) -> bool:
    """[step, value, step, value, …] of `width` items."""
    return (
        type(value) is list
        and len(value) == width
        and all(_int(v) if i % 2 == 0 else _num(v) for i, v in enumerate(value))
    )


def _block(value) -> bool:
    return (
        type(value) is list
        and len(value) == 5
        and all(_int(value[i]) for i in (0, 1, 2, 4))
        and type(value[3]) is dict
        and all(type(k) is str and _pairs(v, 4) for k, v in value[3].items())
    )


def _checked(state: object) -> dict:
    """A stored file digest whose every field has its type (as strictly as run.json is read back), else
    an empty one: the file is digested again, and no reader meets a wrong value."""
    if type(state) is not dict or set(state) != set(_empty_file()):
        return _empty_file()
    checks = (
        _int(state["offset"]) and state["offset"] >= 0 and _int(state["rows"]),
        state["inode"] is None or (type(state["inode"]) is list and len(state["inode"]) == 2),
        state["inode"] is None or all(_int(v) for v in state["inode"]),
        type(state["blocks"]) is list and all(_block(b) for b in state["blocks"]),
        type(state["keys"]) is dict,
        all(type(k) is str and _pairs(v, 2 if k == "time" else 6) for k, v in state["keys"].items()),
        type(state["environments"]) is list and all(type(e) is str for e in state["environments"]),
        type(state["derived"]) is list and all(type(e) is str for e in state["derived"]),
        type(state["ordered"]) is bool and (state["last_step"] is None or _int(state["last_step"])),
        all(state[k] is None or _int(state[k]) for k in ("head", "tail")),
    )
    return state if all(checks) else _empty_file()


def _fingerprint(path: Path, offset: int) -> tuple[int, int] | None:
    """crc32 of the file's first and last FINGERPRINT_BYTES before `offset`; None when unreadable."""
    try:
        fd = regular_fd(path)
    except OSError:
        return None
    try:
        head = os.pread(fd, min(offset, FINGERPRINT_BYTES), 0)
        start = max(0, offset - FINGERPRINT_BYTES)
        tail = os.pread(fd, offset - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    return zlib.crc32(head), zlib.crc32(tail)


class _FileDigest:
    """The digest of one JSONL file (a plain dict, as stored), extended by `update`."""

    def __init__(self, path: Path, state: dict):
        self.path = path
        self.state = state

    def update(self, progress: Progress | None = None) -> bool:
        """Digest what was appended; True when anything changed. `progress(done, total)` (bytes of this
        update) is called as it goes, a chunk at a time."""
        state = self.state
        try:
            st = os.stat(self.path)
        except OSError:
            if state["offset"]:
                self.state = _empty_file()
                return True
            return False
        inode = [st.st_dev, st.st_ino]
        if state["inode"] not in (None, inode) or st.st_size < state["offset"] or not self._same_content():
            state = self.state = _empty_file()  # truncated, replaced or rewritten: its rows before are gone
        state["inode"] = inode
        if st.st_size == state["offset"]:
            return False
        blocks, keys, environments = state["blocks"], state["keys"], state["environments"]
        block = blocks[-1] if blocks and blocks[-1][4] < BLOCK_ROWS else None
        rows, ordered, last_step = state["rows"], state["ordered"], state["last_step"]
        derived = set(state["derived"])
        began = state["offset"]
        columnar = st.st_size - began >= COLUMNAR_BYTES and _columns_readable()
        for starts, chunk, end in _chunks(self.path, began, progress, st.st_size - began, columnar):
            state["offset"] = end
            if type(chunk) is not list:  # columns
                state["rows"], state["last_step"] = rows, last_step
                state["ordered"] = ordered
                _fold_frame(state, starts, chunk, derived)
                rows, ordered, last_step = state["rows"], state["ordered"], state["last_step"]
                block = blocks[-1] if blocks and blocks[-1][4] < BLOCK_ROWS else None
                continue
            starts, steps, chunk = _with_steps(starts, chunk)
            if not chunk:
                continue
            rows += len(chunk)
            if (last_step is not None and steps[0] < last_step) or any(map(int.__gt__, steps, steps[1:])):
                ordered = False  # a step written again (a resumed writer): exports merge in memory
            last_step = steps[-1]
            for environment in dict.fromkeys(map(dict.get, chunk, repeat("environment"))):
                if type(environment) is str and environment and environment not in environments:
                    environments.append(environment)
            index = 0
            while index < len(chunk):
                if block is None:  # offset, first step, last step, {key: extremes}, rows
                    block = [starts[index], steps[index], steps[index], {}, 0]
                    blocks.append(block)
                take = min(len(chunk) - index, BLOCK_ROWS - block[4])
                some_steps = steps[index : index + take]
                block[2] = max(block[2], *some_steps)
                block[4] += take
                _fold(block[3], keys, some_steps, chunk[index : index + take], derived)
                if block[4] >= BLOCK_ROWS:
                    block = None
                index += take
        state["rows"], state["ordered"], state["last_step"] = rows, ordered, last_step
        state["derived"] = sorted(derived)
        state["head"], state["tail"] = _fingerprint(self.path, state["offset"]) or (None, None)
        return True

    def _same_content(self) -> bool:
        """Whether the file still holds what was digested: its first and last 4 KB read before are the same."""
        offset = self.state["offset"]
        if not offset:
            return True
        return _fingerprint(self.path, offset) == (self.state["head"], self.state["tail"])


def _fold_frame(state: dict, starts, frame, derived: set[str]) -> None:
    """Fold a chunk read as columns (_frame) into a file's digest as _fold folds rows: blocks continued and
    started, each block's extremes and the file's per-key summaries, environments, order, the last time."""
    import numpy as np  # noqa: PLC0415 - optional (the train extra), and only for a long build
    import polars as pl  # noqa: PLC0415 - optional (the train extra), and only for a long build

    steps = frame["step"].to_numpy()
    count = len(steps)
    if (state["last_step"] is not None and steps[0] < state["last_step"]) or bool((np.diff(steps) < 0).any()):
        state["ordered"] = False
    state["rows"] += count
    state["last_step"] = int(steps[-1])
    blocks, keys = state["blocks"], state["keys"]
    open_block = blocks[-1] if blocks and blocks[-1][4] < BLOCK_ROWS else None
    ids = (np.arange(count) + (open_block[4] if open_block else 0)) // BLOCK_ROWS
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), count]
    chunk_blocks = []  # per block id of this chunk (ids start at 0), its block
    for low, high in zip(cuts, cuts[1:]):
        block = open_block if low == 0 and open_block is not None else None
        if block is None:  # offset, first step, last step, {key: extremes}, rows
            block = [int(starts[low]), int(steps[low]), int(steps[low]), {}, 0]
            blocks.append(block)
        block[2] = max(block[2], int(steps[low:high].max()))
        block[4] += high - low
        chunk_blocks.append(block)

    def finite(name: str):  # the column as floats, null where it is not a finite number
        value = pl.col(name).cast(pl.Float64)
        return pl.when(value.is_finite()).then(value).alias(name)

    if "time" in frame.schema and str(frame.schema["time"]) in _COLUMN_TYPES:
        times = frame.select(pl.col("step"), finite("time")).drop_nulls()
        if times.height:
            keys["time"] = [int(times["step"][-1]), float(times["time"][-1])]
    names = [n for n, t in frame.schema.items() if n not in _SKIP and str(t) != "Null"]
    columns = frame.select(pl.Series("block", ids), pl.col("step"), *map(finite, names))
    _fold_groups(columns, names, chunk_blocks, keys, "")
    if "environment" in frame.schema and str(frame.schema["environment"]) == "String":
        named = frame["environment"].drop_nulls().unique(maintain_order=True).to_list()
        for environment in [e for e in named if e]:
            if environment not in state["environments"]:
                state["environments"].append(environment)
            own = columns.filter(frame["environment"] == environment)
            derived.update(_fold_groups(own, names, chunk_blocks, keys, f"@{environment}"))


def _fold_groups(columns, names: list[str], chunk_blocks: list, keys: dict, suffix: str) -> list[str]:
    """Per block of `columns` (block, step, then a column per name: a finite float or null), each name's
    extremes and ends merged as _fold_columns merges them (the first of each minimum and maximum; the first
    value of the lowest step, the last of the highest); the names (KEY+suffix) folded in."""
    import polars as pl  # noqa: PLC0415 - optional (the train extra), and only for a long build

    step = pl.col("step")
    aggregations = []
    for index, name in enumerate(names):
        value = pl.col(name)
        held = step.filter(value.is_not_null())
        aggregations += [
            step.get(value.arg_min()).alias(f"{index}:low_step"),
            value.min().alias(f"{index}:low"),
            step.get(value.arg_max()).alias(f"{index}:high_step"),
            value.max().alias(f"{index}:high"),
            held.min().alias(f"{index}:first_step"),
            value.filter(value.is_not_null() & (step == held.min())).first().alias(f"{index}:first"),
            held.max().alias(f"{index}:last_step"),
            value.filter(value.is_not_null() & (step == held.max())).last().alias(f"{index}:last"),
        ]
    grouped = columns.group_by("block", maintain_order=True).agg(aggregations).to_dict(as_series=False)
    folded: dict[str, None] = {}
    for index, name in enumerate(names):
        key = sys.intern(name + suffix)
        summary = [grouped[f"{index}:{field}"] for field in ("low_step", "low", "high_step", "high")]
        ends = [grouped[f"{index}:{field}"] for field in ("first_step", "first", "last_step", "last")]
        for row, block_id in enumerate(grouped["block"]):
            if summary[1][row] is None:  # no number of this key in the block
                continue
            folded[key] = None
            _merge(
                chunk_blocks[block_id][3],
                keys,
                key,
                tuple(part[row] for part in summary),
                tuple(part[row] for part in ends),
            )
    return list(folded)


def _with_steps(starts: list, rows: list) -> tuple[list, list, list]:
    """(starts, steps, rows) of the rows whose `step` is a whole number (a float step that is finite counts as
    its int); the others are not rows of the digest."""
    steps = list(map(dict.get, rows, repeat("step")))
    if set(map(type, steps)) == {int}:
        return starts, steps, rows
    kept = []
    for index, step in enumerate(steps):
        if type(step) is float and math.isfinite(step):
            steps[index] = int(step)
        if type(steps[index]) is int:
            kept.append(index)
    return [starts[i] for i in kept], [steps[i] for i in kept], [rows[i] for i in kept]


def _fold(extremes: dict, keys: dict, steps: list[int], rows: list[dict], derived: set[str]) -> None:
    """Fold rows, in file order, into a block's extremes and the file's per-key summaries, a key at a time over
    the rows (the columns), as row by row would: per key, the first minimum and the first maximum of the
    block; the file's first (lowest step, earliest), last (highest step, latest) and best (largest, earliest)
    value. Environment rows count under `KEY@ENVIRONMENT` too."""
    for step, row in zip(reversed(steps), reversed(rows)):
        if "time" in row and _finite(row["time"]) is not None:
            keys["time"] = [step, row["time"]]
            break
    _fold_columns(extremes, keys, steps, rows)
    environments = list(map(dict.get, rows, repeat("environment")))
    if environments.count(None) == len(environments):
        return
    for environment in dict.fromkeys(environments):
        if type(environment) is str and environment:
            own = [i for i, e in enumerate(environments) if e == environment]
            suffix = f"@{environment}"
            derived.update(_fold_columns(extremes, keys, [steps[i] for i in own], [rows[i] for i in own], suffix))


def _fold_columns(extremes: dict, keys: dict, steps: list[int], rows: list[dict], suffix: str = "") -> list[str]:
    """The numeric keys of `rows` folded in (named KEY+suffix); the names."""
    names: list[str] = []
    every = set().union(*map(dict.keys, rows))
    ends = _ends(steps)  # for the keys every row holds (most)
    for key in [*rows[0], *sorted(every - rows[0].keys())]:  # the first row's order, then the others' names
        if key in _SKIP:
            continue
        own_steps, values = steps, list[Any](map(dict.get, rows, repeat(key)))  # numbers after the checks
        if None in values:  # rows without it (an eval every N steps)
            present = list(map(is_not, values, repeat(None)))
            own_steps, values = list(compress(steps, present)), list(compress(values, present))
            if not values:
                continue
        numbers = set(map(type, values)) <= _NUMBER_TYPES  # no bool, text, null or object among them
        if numbers:
            low, high = min(values), max(values)
        if not numbers or not -_FLOAT_MAX <= low <= high <= _FLOAT_MAX:
            pairs = [(step, value) for step, raw in zip(own_steps, values) if (value := _finite(raw)) is not None]
            if not pairs:
                continue
            own_steps, values = [p[0] for p in pairs], [p[1] for p in pairs]
            low, high = min(values), max(values)
        name = sys.intern(key + suffix)
        names.append(name)
        first_step, at_first, last_step, at_last = ends if own_steps is steps else _ends(own_steps)
        _merge(
            extremes,
            keys,
            name,
            (own_steps[values.index(low)], float(low), own_steps[values.index(high)], float(high)),  # the first of each
            (first_step, float(values[at_first]), last_step, float(values[at_last])),
        )
    return names


def _ends(steps: list[int]) -> tuple[int, int, int, int]:
    """(lowest step, its first index, highest step, its last index): where a key's first and last values are."""
    low, high = min(steps), max(steps)
    return low, steps.index(low), high, len(steps) - 1 - steps[::-1].index(high)


def _merge(extremes: dict, keys: dict, key: str, block: tuple, ends: tuple) -> None:
    """A block's (min step, min, max step, max) and (first step, its value, last step, its value) of `key`
    merged into what earlier rows left, with the comparisons of a row-by-row fold."""
    low_step, low, high_step, high = block
    held = extremes.get(key)
    if held is None:
        extremes[key] = [low_step, low, high_step, high]
    else:
        if low < held[1]:
            held[0], held[1] = low_step, low
        if high > held[3]:
            held[2], held[3] = high_step, high
    first_step, first, last_step, last = ends
    summary = keys.get(key)
    if summary is None:
        keys[key] = [first_step, first, last_step, last, high_step, high]  # first, last, best (largest)
        return
    if first_step < summary[0]:
        summary[0], summary[1] = first_step, first
    if last_step >= summary[2]:
        summary[2], summary[3] = last_step, last
    if high > summary[5]:
        summary[4], summary[5] = high_step, high


class MetricsDigest:
    """The digest of a run folder's metrics.jsonl and env_metrics.jsonl; `update()` then read."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / DIGEST_FILE
        stored = self._load()
        self.files = [_FileDigest(self.folder / name, _checked(stored.get(name))) for name in FILES]
        self._total = 0  # new bytes of both files at the start of an update (what its progress counts to)

    def _load(self) -> dict:
        try:
            with open_regular(self.path, follow=False) as handle:  # a cache: never read through a link
                stored = json.loads(handle.read())
        except (OSError, ValueError):
            return {}
        if not isinstance(stored, dict) or stored.get("version") != VERSION or stored.get("block_rows") != BLOCK_ROWS:
            return {}
        return stored

    def update(self) -> MetricsDigest:
        changed = []
        progress = self._progress()
        for index, digest in enumerate(self.files):
            told = progress(index) if progress is not None else None
            try:
                changed.append(digest.update(told))
            except (TypeError, ValueError, KeyError, IndexError, AttributeError):  # a damaged digest: again
                digest.state = _empty_file()
                changed.append(digest.update(told))
        reporter = REPORT_PROGRESS.get()
        if progress is not None and reporter is not None and self._total:
            reporter(self.folder, self._total, self._total)  # done
        if any(changed):
            stored: dict[str, object] = {"version": VERSION, "block_rows": BLOCK_ROWS}
            stored.update({name: f.state for name, f in zip(FILES, self.files, strict=True)})
            # a cache: a folder the reader cannot write (another user's run) keeps it in memory only
            with contextlib.suppress(Exception):
                atomic_write_text(self.path, json.dumps(stored, separators=(",", ":")))
        return self

    def _progress(self) -> Callable[[int], Progress] | None:
        """Per file (by its index), what its update tells REPORT_PROGRESS's reporter: the bytes digested so far
        of both files' new bytes, and their total."""
        reporter = REPORT_PROGRESS.get()
        if reporter is None:
            return None
        total = self._total = 0
        for digest in self.files:
            with contextlib.suppress(OSError):
                total += max(0, os.stat(digest.path).st_size - digest.state["offset"])
        self._total = total
        done = [0] * len(self.files)
        if total:
            reporter(self.folder, 0, total)  # the build's start

        def for_file(index: int) -> Progress:
            def progress(file_done: int, _file_total: int) -> None:
                done[index] = file_done
                reporter(self.folder, sum(done), total)

            return progress

        return for_file

    @property
    def trainer(self) -> dict:
        return self.files[0].state

    @property
    def env(self) -> dict:
        return self.files[1].state

    def ordered(self) -> bool:
        """Whether both files list their steps in order (never a step lower than the one before)."""
        return bool(self.trainer["ordered"] and self.env["ordered"])

    def environments(self) -> list[str]:
        return list(self.env["environments"])

    def keys(self) -> list[str]:
        """Numeric metric keys of both files (`KEY@ENVIRONMENT` only when rows name several environments)."""
        several = len(self.environments()) > 1
        out: set[str] = set()
        for state in (self.trainer, self.env):
            derived = set(state["derived"])
            out.update(k for k in state["keys"] if k != "time" and (several or k not in derived))
        return sorted(out)

    def steps_done(self) -> int | None:
        lasts = [b[-1][2] for b in (self.trainer["blocks"], self.env["blocks"]) if b]
        return max(lasts) if lasts else None

    def key_summary(self, key: str) -> dict | None:
        """{first, best, best_step, last, last_step} of one metric over both files (best: the largest)."""
        found = [s["keys"][key] for s in (self.trainer, self.env) if key in s["keys"]]
        if not found:
            return None
        first = min(((f[0], f[1]) for f in found), key=lambda x: x[0])
        last = max(((f[2], f[3]) for f in found), key=lambda x: x[0])
        best = max(((f[4], f[5]) for f in found), key=lambda x: x[1])
        return {"first": first[1], "best": best[1], "best_step": best[0], "last": last[1], "last_step": last[0]}

    def final(self) -> dict:
        """The latest value of every metric (an environment's over the trainer's at the same step), plus
        step and time: what metrics.run_metrics_summary gives over every row."""
        latest: dict[str, tuple[int, int, float]] = {}
        for phase, state in enumerate((self.trainer, self.env)):
            derived = set(state["derived"])
            for key, summary in state["keys"].items():
                if key == "time" or key in derived:  # the merged keys only, as run_metrics_summary's
                    continue
                old = latest.get(key)
                if old is None or (summary[2], phase) >= old[:2]:
                    latest[key] = (summary[2], phase, summary[3])
        out: dict = {key: value for key, (_s, _p, value) in latest.items()}
        steps = self.steps_done()
        if steps is not None:
            out["step"] = steps
            time_of = self.trainer["keys"].get("time") or self.env["keys"].get("time")
            if time_of and time_of[0] == steps:
                out["time"] = time_of[1]
        return out

    def series(self, key: str, points: int = 600) -> list[tuple[int, float]]:
        """A downsampled (step, value) series of `key` in at most about `points` points: the blocks are
        grouped in points/2 buckets and each keeps the step and value of its minimum and its maximum,
        so no spike or dip of the whole series is lost however long the run."""
        state = self.env if key not in self.trainer["keys"] else self.trainer
        blocks = [b for b in state["blocks"] if key in b[3]]
        if not blocks:
            return []
        buckets = max(1, points // 2)
        per = max(1, math.ceil(len(blocks) / buckets))
        out: list[tuple[int, float]] = []
        for index in range(0, len(blocks), per):
            group = [b[3][key] for b in blocks[index : index + per]]
            low = min(group, key=lambda e: e[1])
            high = max(group, key=lambda e: e[3])
            pair = sorted({(low[0], low[1]), (high[2], high[3])})
            out.extend(pair)
        first_step, first, last_step, last = state["keys"][key][:4]
        if out[0][0] != first_step:  # where the series starts and ends, whatever its extremes
            out.insert(0, (first_step, first))
        if out[-1][0] != last_step:
            out.append((last_step, last))
        return out

    def rows_near(self, targets: list[int]) -> list[dict]:
        """Merged rows (trainer and environment row of one step): per target step, the first row at or
        after it, read from its block's offset (at most BLOCK_ROWS lines each): a sampled history
        without reading all rows."""
        anchor = FILES[0] if self.trainer["blocks"] else FILES[1]
        blocks = (self.trainer if anchor == FILES[0] else self.env)["blocks"]
        if not blocks:
            return []
        starts = [b[1] for b in blocks]
        chosen: dict[int, dict] = {}
        for target in targets:
            block = blocks[max(0, bisect.bisect_right(starts, target) - 1)]
            found = _read_step(self.folder / anchor, block[0], max(target, block[1]), BLOCK_ROWS, at_least=True)
            if found is not None:
                chosen.setdefault(found["step"], found)
        out = []
        for step, found in sorted(chosen.items()):
            row = dict(found)
            env_block = _block_of(self.env["blocks"], step) if anchor == FILES[0] else None
            if env_block is not None:
                for found in _rows_of_step(self.folder / FILES[1], env_block[0], step, 2 * BLOCK_ROWS):
                    for key, value in found.items():  # every environment's row of the step, in file order
                        if key != "step" and not (key == "time" and "time" in row):
                            row[key] = value
            out.append(row)
        return out


def _block_of(blocks: list, step: int) -> list | None:
    index = bisect.bisect_right([b[1] for b in blocks], step) - 1
    return blocks[index] if 0 <= index < len(blocks) and blocks[index][2] >= step else None


def _rows_of_step(path: Path, offset: int, step: int, limit: int) -> list[dict]:
    """The rows of `step` among the `limit` lines from `offset` (several environments log one each)."""
    out: list[dict] = []
    try:
        with open_regular(path) as handle:
            handle.seek(offset)
            for _ in range(limit):
                line = handle.readline()
                if not line.endswith(b"\n"):
                    break
                row = parse_jsonl_line(line)
                if row is None or type(row.get("step")) is not int:
                    continue
                if row["step"] == step:
                    out.append(row)
                elif out and row["step"] > step:
                    break
    except OSError:
        return out
    return out


def _read_step(path: Path, offset: int, step: int, limit: int, at_least: bool = False) -> dict | None:
    """The row of `step` (with `at_least`: the first at or after it, else the last read) among the
    `limit` lines from `offset`; None when not there."""
    last = None
    try:
        with open_regular(path) as handle:
            handle.seek(offset)
            for _ in range(limit):
                line = handle.readline()
                if not line.endswith(b"\n"):
                    return None
                row = parse_jsonl_line(line)
                if row is None or type(row.get("step")) is not int:
                    continue
                if row["step"] == step or (at_least and row["step"] > step):
                    return row
                last = row
    except OSError:
        return None
    return last if at_least else None
