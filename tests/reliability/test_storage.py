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


@pytest.fixture
def small_home(tmp_path, monkeypatch):
    """$HERMES_HOME on a 4 MB tmpfs (skipped where this user cannot mount)."""
    import shutil

    mount_point = tmp_path / "small_home"
    mount_point.mkdir()
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount_point)], capture_output=True
    )
    if out.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here ({out.stderr.decode().strip()[:120]}): the full-disk run is untested"
        )
    monkeypatch.setenv("HERMES_HOME", str(mount_point))
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
    shutil.rmtree(mount_point, ignore_errors=True)


def _fill(home) -> None:
    """Take every free byte of the file system holding `home`."""
    with open(home / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass


def _cli(*args: str) -> subprocess.CompletedProcess:
    import os

    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "2000"})


NO_SPACE = "No space left on device"


@pytest.mark.usefixtures("run_processes_cleanup")
def test_a_full_disk_mid_run_ends_failed_with_the_reason_and_no_partial_row(small_home):
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import run_dir
    from tests.reliability.helpers import assert_no_orphans, assert_state_parses, launch_standin, wait_for, wait_running

    run = wait_running(launch_standin()["run_id"])
    metrics = run_dir(run["run_id"]) / "metrics.jsonl"
    assert wait_for(lambda: metrics.exists() and metrics.stat().st_size > 0, 10)
    _fill(small_home)
    final = wait_for(lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] in ("failed", "lost") and r, 30)
    assert final and final["status"] == "failed", final
    assert NO_SPACE in final["reason"], final["reason"]
    assert metrics.read_bytes().endswith(b"\n"), "metrics.jsonl ends in a partial row"
    assert_no_orphans(run)
    # Space freed: the record is intact and readable, `stop` answers (the run has ended: it says so and
    # how, exit 1, no traceback) and changes nothing; `status` shows the disk's error.
    (small_home / "filler").unlink()
    assert assert_state_parses(small_home) > 0
    stop = _cli("stop", run["run_id"])
    assert stop.returncode == 1 and "already failed" in stop.stderr and NO_SPACE in stop.stderr, stop.stderr
    assert "Traceback" not in stop.stderr
    after = runs.get_run(run["run_id"], sample=False)
    assert (after["status"], after["reason"]) == ("failed", final["reason"])
    status = _cli("status", run["run_id"])
    assert status.returncode == 0 and f"reason: {final['reason']}" in status.stdout, status.stdout + status.stderr


@pytest.mark.usefixtures("run_processes_cleanup")
def test_stop_on_a_full_disk_ends_the_run_failed_with_the_disk_error(small_home):
    """Nothing of the run writes for ten minutes, so the disk filling up kills nothing: `hermes-rl stop`
    while it is full is what hits it (the supervisor cannot write run.json). The stop still ends every
    process and returns; the run is recorded failed with the disk's error (written with the space the
    supervisor held back), and once space is freed `status` shows it."""
    from hermes_rl.core import runs
    from tests.reliability.helpers import assert_no_orphans, launch_standin, wait_running

    run = wait_running(launch_standin(step_s=600)["run_id"])
    _fill(small_home)
    stop = _cli("stop", run["run_id"])
    assert stop.returncode == 0 and "failed" in stop.stdout and NO_SPACE in stop.stdout, stop.stdout + stop.stderr
    assert_no_orphans(run)
    (small_home / "filler").unlink()
    final = runs.get_run(run["run_id"], sample=False)
    assert final["status"] == "failed" and NO_SPACE in final["reason"], final
    status = _cli("status", run["run_id"])
    assert status.returncode == 0 and NO_SPACE in status.stdout, status.stdout + status.stderr


@pytest.mark.usefixtures("run_processes_cleanup")
def test_a_read_only_run_folder_ends_the_run_failed_once_it_is_writable_again():
    """The run folder turns read-only mid-run (a read-only bind mount over it): the trainer's next row
    fails, every process is ended, and the supervisor, which cannot record that, waits instead of
    leaving the run `lost` with the cause only in its log; once the folder is writable again the run
    is recorded failed with "Read-only file system", and `stop` and `status` say so."""
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import run_dir
    from tests.reliability.helpers import assert_no_orphans, launch_standin, run_processes, wait_for, wait_running

    run = wait_running(launch_standin()["run_id"])
    folder = run_dir(run["run_id"])
    out = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True)
    if out.returncode != 0:
        pytest.skip(f"cannot bind-mount the run folder read-only here ({out.stderr.decode().strip()[:120]})")
    try:
        assert wait_for(lambda: not run_processes(run), 20), "the run's processes kept running"
        assert runs.get_run(run["run_id"], sample=False)["status"] == "running"  # nothing could be written
    finally:
        # Lazily: a plain umount fails (EBUSY) while any process has a file of the mount open, and the
        # watchdog and the supervisor's retries open run.json through it every second.
        undone = subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        assert undone.returncode == 0, undone.stderr.decode()
    final = wait_for(lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] != "running" and r, 10)
    assert final and final["status"] == "failed", final
    assert "Read-only file system" in final["reason"], final["reason"]
    assert_no_orphans(run)  # the supervisor and its watchdog too, once the record is written
    stop = _cli("stop", run["run_id"])
    assert stop.returncode == 1 and "already failed" in stop.stderr and "Read-only file system" in stop.stderr
    status = _cli("status", run["run_id"])
    assert status.returncode == 0 and "Read-only file system" in status.stdout, status.stdout + status.stderr
