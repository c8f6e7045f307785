"""Process logs read the Toolong way: index line offsets, read lines lazily, follow the file.

A `LogReader` never holds a log in memory. It keeps a sparse index (the byte offset of every
`STRIDE`-th line, in an `array('Q')`), a small cache of decoded blocks, and the state needed to
follow a growing file: rotation (the path now names another inode) and truncation (the file got
shorter) both restart the index at the new file's start. A large file is opened at its tail: only
the last `TAIL_BYTES` are indexed at first, and `load_earlier()` extends the index backwards on
demand, so a 1 GB log shows its last lines at once. When no line starts inside that window (one
huge last line), the reader shows that line's end, capped and marked with a leading "… ".

Lines keep their ANSI colour codes (SGR: the dashboard renders them, a terminal shows them); every
other control sequence (OSC titles and hyperlinks, DCS, RIS `ESC c`, cursor movement, clears, mode
switches) is removed by `sanitize_terminal`, and stray control characters are shown as visible
symbols, so a log line can never act on the terminal or the dashboard. `strip_ansi` gives plain text
for search. `clean_line` makes any bytes displayable: invalid UTF-8 replaced, NUL removed, a `\\r`
progress line reduced to its last segment, escapes sanitized, very long lines capped.
"""

from __future__ import annotations

import json
import os
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from ..base.fsutil import open_regular

STRIDE = 32  # one index entry per 32 lines: 1 GB of 100-byte lines -> 2.5 MB of index
TAIL_BYTES = 4 * 1024 * 1024  # a file larger than this opens at its tail
MAX_LINE_CHARS = 4000  # longer lines are cut for display (the file keeps them)
MAX_INDEX_ENTRIES = 4_000_000  # 32 MB of index at most (128M lines); the oldest half is dropped past it
_CACHE_BLOCKS = 64
_READ_CHUNK = 1024 * 1024
_CUT_MARK = "… "  # prefix of a line shown from its middle (the end of a huge line)

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Unicode's own line breaks and direction controls: a line or paragraph separator breaks a table row
# or a log line in two, and a bidi override or isolate reorders what follows it on screen (text that
# reads one way and is another). Shown as U+FFFD like the C1 controls.
_UNICODE_CONTROLS = "\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
# One escape sequence or control character, in the order a terminal parses them: SGR (kept); CSI (ESC [
# or 8-bit 0x9b) with any other final byte; OSC, DCS, SOS, PM, APC strings up to their terminator (BEL
# or ST) or, unterminated, to the end of the line; a two- or three-byte ESC sequence (RIS, charset
# selection, keypad modes, cursor save); a lone ESC; any other C0/C1 control but tab.
_TERMINAL_RE = re.compile(
    r"(?P<sgr>\x1b\[[0-9;:]*m)"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])(?:[^\x07\x1b\x9c]|\x1b(?!\\))*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f" + _UNICODE_CONTROLS + "]"
)
_NEEDS_SANITIZING = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f" + _UNICODE_CONTROLS + "]")


# An HTTP access-log line (uvicorn's, aiohttp's): `"GET /batch HTTP/1.1" 200`. Most of a run's log lines
# are these (environments poll run-api), so merged views hide them unless asked.
ACCESS_LINE = re.compile(r'"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+"\s+\d{3}')


def is_access_line(line: str) -> bool:
    return ACCESS_LINE.search(line) is not None


def _visible(match: re.Match) -> str:
    if match.group("sgr"):
        return match.group("sgr")
    return _symbol(match)


def _symbol(match: re.Match) -> str:
    text = match.group(0)
    if len(text) == 1 and text != "\x1b":
        code = ord(text)
        return chr(0x2400 + code) if code < 0x20 else ("\u2421" if code == 0x7F else "\ufffd")
    return ""  # a whole escape sequence: a command to the terminal, not content


def sanitize_terminal(text: str) -> str:
    """Text safe to print to a terminal or render in the dashboard: SGR colour codes kept, every other
    escape sequence removed, other control characters shown as symbols (␇ for BEL). Tabs are kept."""
    if not _NEEDS_SANITIZING.search(text):
        return text
    return _TERMINAL_RE.sub(_visible, text)


def plain_text(text: str) -> str:
    """Untrusted text (model output, environment files, logs, state files) for a place that shows
    characters only, as every dashboard widget does: what sanitize_terminal removes, and SGR colour
    codes too (a widget does not interpret them: they would reach the terminal as written)."""
    if not _NEEDS_SANITIZING.search(text):
        return text
    return _TERMINAL_RE.sub(_symbol, text)


def data_text(text: str, limit: int = 4000) -> str:
    """Untrusted text (model output, environment messages, log lines) for an agent: every escape
    sequence and control character removed (newlines and tabs kept), at most `limit` characters. The
    same parsing as the terminal's, so nothing a terminal would act on reaches a conversation."""
    if _NEEDS_SANITIZING.search(text):
        text = _TERMINAL_RE.sub(lambda m: m.group(0) if m.group(0) in ("\n", "\t") else "", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted_from_run(text: str, limit: int = 300) -> str:
    """Text a run's processes wrote, for a message an agent reads as its next input: on one line,
    cleaned and cut as data_text does, and quoted as data that came from the run, never as words of ours."""
    flat = " ".join(data_text(text, limit * 4).split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return "the run reported: " + json.dumps(flat, ensure_ascii=False)


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def clean_line(raw: bytes, max_chars: int = MAX_LINE_CHARS) -> str:
    """Bytes of one log line -> displayable text (ANSI colour codes kept)."""
    raw = raw.rstrip(b"\n")
    if raw.endswith(b"\r"):
        raw = raw.rstrip(b"\r")
    if b"\r" in raw:
        # A progress bar redraws itself with \r: only its last state is meaningful.
        segments = [seg for seg in raw.split(b"\r") if seg.strip()]
        raw = segments[-1] if segments else b""
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    text = sanitize_terminal(raw.decode("utf-8", errors="replace"))
    if "\t" in text:
        text = text.expandtabs(4)
    if len(text) > max_chars:
        text = text[:max_chars] + f" … [{len(text) - max_chars} more characters]"
    return text


def _index_lines(handle, begin: int, size: int, complete: int, stride: int) -> tuple[array, int, int]:
    """Scan [begin, size): offsets of lines whose number (counting from `complete`) is a multiple of
    stride, the new complete-line count, and the offset just after the last newline."""
    index = array("Q")
    handle.seek(begin)
    position = begin
    line_start = begin
    while position < size:
        chunk = handle.read(min(_READ_CHUNK, size - position))
        if not chunk:
            break
        find = chunk.find
        pos = find(b"\n")
        while pos >= 0:
            if complete % stride == 0:
                index.append(line_start)
            complete += 1
            line_start = position + pos + 1
            pos = find(b"\n", pos + 1)
        position += len(chunk)
    return index, complete, line_start


def _line_starts_backwards(handle, end: int) -> Iterator[int]:
    """Offsets where lines begin in [0, end), last first (0 last of all), read backwards in chunks."""
    position = end
    while position > 0:
        size = min(_READ_CHUNK, position)
        position -= size
        handle.seek(position)
        chunk = handle.read(size)
        newline = chunk.rfind(b"\n")
        while newline >= 0:
            if position + newline + 1 < end:
                yield position + newline + 1
            newline = chunk.rfind(b"\n", 0, newline)
    yield 0


class LogReader:
    """Lazy, follow-capable view of one log file. Thread-safe: one thread may `refresh` while another reads."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        tail_bytes: int = TAIL_BYTES,
        stride: int = STRIDE,
        max_index_entries: int = MAX_INDEX_ENTRIES,
    ):
        self.path = Path(path)
        self.tail_bytes = tail_bytes
        self.stride = stride
        self.max_index_entries = max_index_entries
        self._lock = threading.RLock()
        self._reset_state()
        self.rotations = 0  # times the file was replaced or truncated under us
        self.prepended = 0  # lines added at the top by load_earlier (line numbers shift by this)
        self.refresh()

    def _reset_state(self) -> None:
        self._index = array("Q")  # offsets of lines 0, S, 2S, ... (relative to the first indexed line)
        self._complete = 0  # complete (newline-terminated) lines indexed
        self._end = 0  # byte offset just after the last complete line
        self._size = 0  # file size at the last refresh (a partial tail line lies in [_end, _size))
        self._base = 0  # byte offset of the first indexed line; > 0 while earlier bytes are not indexed
        self._inode: tuple[int, int] | None = None
        self._cut_at: int | None = None  # offset inside a huge line where indexing began (shown as its end)
        self._cache: OrderedDict[int, list[str]] = OrderedDict()
        self._handle = None

    # -- properties ---------------------------------------------------------------------------
    @property
    def line_count(self) -> int:
        """Lines that can be shown: complete lines plus a partial last line, if any."""
        with self._lock:
            return self._complete + (1 if self._size > self._end else 0)

    @property
    def complete_line_count(self) -> int:
        """Newline-terminated lines only (a partial last line may still change)."""
        return self._complete

    @property
    def has_earlier(self) -> bool:
        """True while the file's beginning has not been indexed (opened at the tail)."""
        return self._base > 0

    @property
    def unindexed_bytes(self) -> int:
        return self._base

    @property
    def size(self) -> int:
        return self._size

    @property
    def index_entries(self) -> int:
        return len(self._index)

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    # -- following ----------------------------------------------------------------------------
    def _open(self):
        if self._handle is None:
            self._handle = open_regular(self.path)
        return self._handle

    def refresh(self) -> int:
        """Index what was appended since the last call. Returns how many lines were added
        (-1 when the file was rotated or truncated and the index restarted)."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                return 0
            inode = (st.st_dev, st.st_ino)
            restarted = False
            if self._inode is None:
                self._inode = inode
                if st.st_size > self.tail_bytes:
                    self._start_at_tail(st.st_size)
            elif inode != self._inode or st.st_size < self._size or not self._still_same_file():
                # Rotated (new inode) or truncated: the old offsets mean nothing any more.
                self.close()
                self._reset_state()
                self._inode = inode
                self.rotations += 1
                restarted = True
                if st.st_size > self.tail_bytes:
                    self._start_at_tail(st.st_size)
            before = self.line_count
            if st.st_size > self._end:
                self._scan_forward(st.st_size)
            self._size = max(st.st_size, self._end)
            if restarted:
                return -1
            return self.line_count - before

    def _still_same_file(self) -> bool:
        """Truncated and rewritten past the old size between two refreshes: the byte before the
        indexed end is no longer the newline we indexed."""
        if self._end == 0 or self._end == self._base:
            return True
        try:
            return os.pread(self._open().fileno(), 1, self._end - 1) == b"\n"
        except OSError:
            return False

    def _start_at_tail(self, size: int) -> None:
        """Index only the file's last tail_bytes, starting at the first line that begins inside them.

        The first newline may lie far into the window (a multi-MB line crosses its start), so the
        window is scanned in chunks; it is at most tail_bytes, so a huge file is never read whole.
        If no line begins inside the window, indexing starts a little before the end of the file's
        last line, so that line's end is shown instead of nothing."""
        handle = self._open()
        window = size - self.tail_bytes
        position = window - 1  # a newline just before the window means the window starts a line
        handle.seek(position)
        line_start = size
        while position < size:
            chunk = handle.read(min(_READ_CHUNK, size - position))
            if not chunk:
                break
            newline = chunk.find(b"\n")
            if newline >= 0:
                line_start = position + newline + 1
                break
            position += len(chunk)
        if line_start >= size:
            # The window holds only part of one huge last line (complete or still being written).
            handle.seek(size - 1)
            content_end = size - 1 if handle.read(1) == b"\n" else size
            line_start = max(window, content_end - MAX_LINE_CHARS)
            self._cut_at = line_start
        self._base = self._end = self._size = line_start

    def _scan_forward(self, size: int) -> None:
        index, complete, end = _index_lines(self._open(), self._end, size, self._complete, self.stride)
        self._index.extend(index)
        self._complete = complete
        self._end = end
        if len(self._index) > self.max_index_entries:
            self._drop_oldest(len(self._index) - self.max_index_entries // 2)

    def _drop_oldest(self, entries: int) -> None:
        """Bound memory on endless runs: forget the first `entries` blocks (they become 'earlier')."""
        del self._index[:entries]
        self._complete -= entries * self.stride
        self._base = self._index[0]
        self._cache.clear()

    def load_earlier(self, max_bytes: int = 64 * 1024 * 1024) -> int:
        """Extend the index backwards over about max_bytes before the first indexed line (further
        when fewer than `stride` lines fit: a line longer than max_bytes still makes progress).
        Returns the number of lines added at the top. Slow for big files: call it from a worker."""
        with self._lock:
            base, inode, stride = self._base, self._inode, self.stride
            cut = base > 0 and base == self._cut_at
        if base == 0:
            return 0
        found = 0  # lines found before base
        kept = array("Q")  # the start of every stride-th of them, counting back from base
        cut_line_start = None  # where the line indexed from its middle really begins
        reached_start = True
        with open_regular(self.path) as handle:
            for offset in _line_starts_backwards(handle, base):
                if cut and cut_line_start is None:
                    cut_line_start = offset
                    continue
                found += 1
                if found % stride == 0:
                    kept.append(offset)
                    if base - offset >= max_bytes and offset > 0:
                        reached_start = False
                        break
        with self._lock:
            if self._inode != inode or self._base != base:
                return 0  # rotated or changed meanwhile
            self._cache.clear()
            if reached_start and found % stride:
                # The file's first lines do not fill a whole stride: re-align by a full rebuild.
                with open_regular(self.path) as handle:
                    full, total, end_all = _index_lines(handle, 0, self._end, 0, stride)
                added = total - self._complete
                self._index, self._complete, self._end = full, total, end_all
                self._base = 0
                self._cut_at = None
                self.prepended += added
                return added
            if cut and cut_line_start is not None:
                # The line shown by its end is now indexed from its real start.
                if self._index:
                    self._index[0] = cut_line_start
                else:
                    self._end = cut_line_start  # it is the partial last line
                self._cut_at = None
            kept.reverse()
            self._index = kept + self._index
            self._complete += found
            self._base = self._index[0] if self._index else self._end
            self.prepended += found
            return found

    # -- reading ------------------------------------------------------------------------------
    def _read_block(self, block: int) -> list[str]:
        cached = self._cache.get(block)
        if cached is not None:
            self._cache.move_to_end(block)
            return cached
        handle = self._open()
        start = self._index[block]
        first_line = block * self.stride
        wanted = min(self.stride, self._complete - first_line)
        lines: list[str] = []
        handle.seek(start)
        limit = MAX_LINE_CHARS * 4 + 64
        for number in range(wanted):
            raw = handle.readline(limit)
            if raw and not raw.endswith(b"\n"):
                # A very long line: show its head, skip the rest without loading it.
                while True:
                    more = handle.readline(_READ_CHUNK)
                    if not more or more.endswith(b"\n"):
                        break
            if number == 0 and start == self._cut_at:
                lines.append(self._cut_line_end(start, handle.tell()))
            else:
                lines.append(clean_line(raw))
        complete_block = wanted == self.stride
        if complete_block:
            self._cache[block] = lines
            if len(self._cache) > _CACHE_BLOCKS:
                self._cache.popitem(last=False)
        return lines

    def _partial_line(self) -> str:
        if self._end == self._cut_at:
            return self._cut_line_end(self._end, self._size)
        handle = self._open()
        handle.seek(self._end)
        raw = handle.read(min(self._size - self._end, MAX_LINE_CHARS * 4 + 64))
        return clean_line(raw)

    def _cut_line_end(self, start: int, end: int) -> str:
        """The line indexed from its middle (bytes [start, end)): its last MAX_LINE_CHARS characters,
        marked; read from its end so a line still being written shows what was written last."""
        begin = max(start, end - MAX_LINE_CHARS - 1)  # + 1: the newline clean_line drops
        raw = os.pread(self._open().fileno(), end - begin, begin)
        return _CUT_MARK + clean_line(raw, max_chars=len(raw) + 1)[-MAX_LINE_CHARS:]

    def lines(self, start: int, end: int) -> list[str]:
        """Lines [start, end) of what is indexed (clamped)."""
        with self._lock:
            total = self.line_count
            start = max(0, start)
            end = min(end, total)
            if start >= end:
                return []
            out: list[str] = []
            try:
                line = start
                complete_end = min(end, self._complete)
                while line < complete_end:
                    block = line // self.stride
                    block_lines = self._read_block(block)
                    offset = line - block * self.stride
                    take = block_lines[offset : offset + (complete_end - line)]
                    if not take:
                        break
                    out.extend(take)
                    line += len(take)
                if end > self._complete:
                    out.append(self._partial_line())
            except OSError:
                return out
            return out

    def line(self, number: int) -> str:
        got = self.lines(number, number + 1)
        return got[0] if got else ""

    def tail(self, n: int) -> list[str]:
        total = self.line_count
        return self.lines(max(0, total - n), total)

    def search(
        self,
        pattern: str,
        start: int = 0,
        end: int | None = None,
        *,
        backwards: bool = False,
        case_sensitive: bool = False,
        limit_lines: int = 2_000_000,
    ) -> int | None:
        """Line number of the next line containing pattern (ANSI stripped), scanning from start."""
        if not pattern:
            return None
        needle = pattern if case_sensitive else pattern.lower()
        total = self.line_count
        end = total if end is None else min(end, total)
        step = 256
        scanned = 0
        if not backwards:
            line = max(0, start)
            while line < end and scanned < limit_lines:
                chunk = self.lines(line, min(end, line + step))
                for i, text in enumerate(chunk):
                    plain = strip_ansi(text)
                    if needle in (plain if case_sensitive else plain.lower()):
                        return line + i
                line += len(chunk) or step
                scanned += step
        else:
            line = min(start, total - 1)
            while line >= 0 and scanned < limit_lines:
                lo = max(0, line - step + 1)
                chunk = self.lines(lo, line + 1)
                for i in range(len(chunk) - 1, -1, -1):
                    plain = strip_ansi(chunk[i])
                    if needle in (plain if case_sensitive else plain.lower()):
                        return lo + i
                line = lo - 1
                scanned += step
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
