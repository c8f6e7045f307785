"""Storage faults never leave a partial line: an append the disk cuts short (here a file-size limit,
which fails a write part-way exactly as a full disk does) is taken back, and the next append after a
line some writer left partial starts on a line of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60)]

CHILD = textwrap.dedent("""\
    import json, resource, signal, sys
    from hermes_rl.core.base.fsutil import append_jsonl

    path, limit = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        append_jsonl(path, {"step": 99, "pad": "x" * 400})
    except OSError as exc:
        print(json.dumps({"errno": exc.errno}))
        sys.exit(3)
""")


def test_a_write_cut_short_leaves_no_partial_line_and_nothing_is_glued(tmp_path):
    from hermes_rl.core.base.fsutil import append_jsonl

    path = tmp_path / "metrics.jsonl"
    for step in (1, 2):
        append_jsonl(path, {"step": step})
    before = path.read_bytes()
    # Room for 50 more bytes only: the 400-byte row is cut part-way.
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(len(before) + 50)], capture_output=True)
    assert out.returncode == 3, out.stderr.decode()[-800:]
    assert path.read_bytes() == before, "a partial row was left behind"

    # A writer killed mid-line left a partial row: the next row is not glued onto it.
    with open(path, "ab") as handle:
        handle.write(b'{"step": 3, "train/lo')
    append_jsonl(path, {"step": 4})
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and json.loads(lines[-2]) == {"step": 4}
    assert [json.loads(x)["step"] for x in lines[:2]] == [1, 2]
