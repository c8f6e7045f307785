"""LogReader: lazy line index, tail of big files, follow with rotation/truncation, messy bytes."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_rl.core.readers.logs import LogReader, clean_line, strip_ansi


def write(path, data: bytes, mode="ab"):
    with open(path, mode) as handle:
        handle.write(data)


def test_reads_lines_lazily_and_follows_appends(tmp_path):
    path = tmp_path / "a.log"
    write(path, b"".join(b"line %d\n" % i for i in range(100)))
    reader = LogReader(path, stride=8)
    assert reader.line_count == 100
    assert reader.lines(0, 3) == ["line 0", "line 1", "line 2"]
    assert reader.lines(95, 200) == [f"line {i}" for i in range(95, 100)]
    assert reader.tail(2) == ["line 98", "line 99"]
    write(path, b"line 100\nline 101\n")
    assert reader.refresh() == 2
    assert reader.tail(3) == ["line 99", "line 100", "line 101"]
    # Index is sparse: one entry per stride lines.
    assert reader.index_entries == (102 + 7) // 8


def test_partial_last_line_is_shown_and_completed(tmp_path):
    path = tmp_path / "p.log"
    write(path, b"done\nhalf")
    reader = LogReader(path)
    assert reader.line_count == 2
    assert reader.tail(1) == ["half"]
    write(path, b" and rest\nnext\n")
    reader.refresh()
    assert reader.lines(0, 10) == ["done", "half and rest", "next"]


def test_progress_bar_keeps_last_segment_ansi_kept_nul_removed_bad_utf8_replaced():
    assert clean_line(b"  10%|#   \r  50%|#####  \r 100%|##########\n") == " 100%|##########"
    assert clean_line(b"ok\r\n") == "ok"
    assert clean_line(b"a\x00b\n") == "ab"
    assert clean_line(b"caf\xe9 \xff\n") == "caf\ufffd \ufffd"
    coloured = clean_line(b"\x1b[31mERROR\x1b[0m boom\n")
    assert "\x1b[31m" in coloured
    assert strip_ansi(coloured) == "ERROR boom"
    long = clean_line(b"x" * 10_000, max_chars=100)
    assert long.startswith("x" * 100) and "more characters" in long and len(long) < 200


def test_truncation_restarts_index(tmp_path):
    path = tmp_path / "t.log"
    write(path, b"old 1\nold 2\nold 3\n")
    reader = LogReader(path)
    assert reader.line_count == 3
    write(path, b"new\n", mode="wb")
    assert reader.refresh() == -1
    assert reader.lines(0, 10) == ["new"]
    assert reader.rotations == 1


def test_truncated_and_rewritten_longer_is_detected(tmp_path):
    path = tmp_path / "t2.log"
    write(path, b"aaaa\n")
    reader = LogReader(path)
    write(path, b"bbbbbbbbbbbb\ncccc\n", mode="r+b")  # same inode, longer, different content
    reader.refresh()
    assert reader.lines(0, 10) == ["bbbbbbbbbbbb", "cccc"]


def test_rotation_follows_the_new_file(tmp_path):
    path = tmp_path / "r.log"
    write(path, b"before rotation\n" * 5)
    reader = LogReader(path)
    os.rename(path, tmp_path / "r.log.1")
    write(path, b"after rotation\n")
    assert reader.refresh() == -1
    assert reader.lines(0, 10) == ["after rotation"]


def test_huge_file_opens_at_tail_and_loads_earlier(tmp_path):
    path = tmp_path / "big.log"
    lines = [b"row %06d padding padding padding\n" % i for i in range(20_000)]
    write(path, b"".join(lines))
    reader = LogReader(path, tail_bytes=64 * 1024, stride=16)
    assert reader.has_earlier
    assert reader.tail(1) == ["row 019999 padding padding padding"]
    shown = reader.line_count
    assert shown < 20_000
    # Index only covers the tail: memory does not grow with the file.
    assert reader.index_entries <= shown // 16 + 1
    added = reader.load_earlier(max_bytes=100_000)
    assert added > 0 and added % 16 == 0
    assert reader.line_count == shown + added
    assert reader.tail(1) == ["row 019999 padding padding padding"]
    while reader.has_earlier:
        reader.load_earlier(max_bytes=200_000)
    assert reader.line_count == 20_000
    assert reader.lines(0, 2) == ["row 000000 padding padding padding", "row 000001 padding padding padding"]
    assert reader.line(12345) == "row 012345 padding padding padding"


def test_tail_window_starting_inside_a_line_longer_than_a_read_chunk_shows_the_lines_after_it(tmp_path):
    # The window (2.5 MB) starts ~1.5 MB before the end of a 4 MB line: its first newline lies
    # beyond the first read chunk (1 MB), and the lines after the long one must still show.
    path = tmp_path / "long_then_lines.log"
    write(path, b"first line\n" + b"x" * 4_000_000 + b"\n" + b"".join(b"after %d\n" % i for i in range(1000)))
    reader = LogReader(path, tail_bytes=2_500_000)
    assert reader.has_earlier
    assert reader.line_count == 1000
    assert reader.lines(0, 2) == ["after 0", "after 1"]
    assert reader.tail(1) == ["after 999"]
    while reader.has_earlier:
        reader.load_earlier()
    assert reader.line_count == 1002
    assert reader.line(0) == "first line"


def test_tail_window_inside_one_huge_last_line_shows_its_capped_end(tmp_path):
    from hermes_rl.core.readers.logs import MAX_LINE_CHARS

    path = tmp_path / "one_line.log"
    write(path, b"first line\n" + b"x" * 3_000_000 + b"THE END\n")
    reader = LogReader(path, tail_bytes=1_000_000)
    assert reader.line_count == 1 and reader.has_earlier
    [shown] = reader.tail(5)
    assert shown.startswith("… ") and shown.endswith("xTHE END")
    assert len(shown) == len("… ") + MAX_LINE_CHARS
    # The same line still being written (no newline yet), then finished and followed by more lines.
    partial = tmp_path / "partial.log"
    write(partial, b"first line\n" + b"y" * 3_000_000 + b"tail so far")
    reader = LogReader(partial, tail_bytes=1_000_000)
    [shown] = reader.tail(5)
    assert shown.startswith("… ") and shown.endswith("ytail so far")
    write(partial, b" and done\nnext line\n")
    assert reader.refresh() == 1
    assert reader.tail(2)[1] == "next line"
    assert reader.tail(2)[0].startswith("… ") and reader.tail(2)[0].endswith("tail so far and done")
    # Loading back to the file's start shows the whole file as its real lines, unmarked.
    while reader.has_earlier:
        reader.load_earlier()
    lines = reader.lines(0, 10)
    assert len(lines) == 3 and lines[0] == "first line" and lines[2] == "next line"
    assert lines[1].startswith("yyy") and "more characters" in lines[1]


def test_load_earlier_gets_past_a_line_longer_than_max_bytes(tmp_path):
    path = tmp_path / "wide.log"
    write(
        path,
        b"".join(b"early %d\n" % i for i in range(40))
        + b"w" * 300_000
        + b"\n"
        + b"".join(b"late %d\n" % i for i in range(40)),
    )
    reader = LogReader(path, tail_bytes=200, stride=4)
    calls = 0
    while reader.has_earlier and calls < 20:
        assert reader.load_earlier(max_bytes=1000) >= 0
        calls += 1
    assert not reader.has_earlier and calls < 20  # every call made progress despite the 300 kB line
    assert reader.line_count == 81
    assert reader.line(0) == "early 0" and reader.line(80) == "late 39"
    assert reader.line(40).startswith("www") and "more characters" in reader.line(40)


def test_index_memory_is_capped(tmp_path):
    path = tmp_path / "cap.log"
    write(path, b"".join(b"%d\n" % i for i in range(1000)))
    reader = LogReader(path, stride=4, max_index_entries=100)
    assert reader.index_entries <= 100
    assert reader.has_earlier
    assert reader.tail(1) == ["999"]


def test_very_long_line_is_capped_without_loading_it(tmp_path):
    path = tmp_path / "long.log"
    write(path, b"start\n" + b"y" * 3_000_000 + b"\nend\n")
    reader = LogReader(path)
    got = reader.lines(0, 3)
    assert got[0] == "start" and got[2] == "end"
    assert len(got[1]) < 5000 and "more characters" in got[1]


def test_search_forward_backward_ignores_ansi(tmp_path):
    path = tmp_path / "s.log"
    write(path, b"alpha\n\x1b[31mERR\x1b[0mOR one\nbeta\nerror two\n")
    reader = LogReader(path)
    assert reader.search("error") == 1
    assert reader.search("error", start=2) == 3
    assert reader.search("error", start=2, backwards=True) == 1
    assert reader.search("missing") is None


def test_missing_file_is_empty_until_created(tmp_path):
    path = tmp_path / "later.log"
    reader = LogReader(path)
    assert reader.line_count == 0 and reader.tail(5) == []
    write(path, b"hello\n")
    reader.refresh()
    assert reader.tail(5) == ["hello"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(min_value=1, max_value=7))
def test_any_bytes_index_matches_splitlines(chunks, stride):
    """Whatever the writer appends, in whatever pieces, the reader shows the same lines as a full read."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "h.log")
        open(path, "wb").close()
        reader = LogReader(path, stride=stride)
        for chunk in chunks:
            write(path, chunk)
            reader.refresh()
        data = b"".join(chunks)
        expected = [clean_line(part) for part in data.split(b"\n")]
        if expected and data.endswith(b"\n") or not data:
            expected = expected[:-1]
        assert reader.lines(0, reader.line_count + 5) == expected
        reader.close()
