"""Nothing blocks forever on a file, in every process: a FIFO in place of a live run's
env_metrics.jsonl (read by the alert monitor when any rule exists) or of a process log (read by the log
watch) used to wedge the supervisor's own loop in open(): the environment died unnoticed, the run showed
running, and `hermes-rl stop` waited 15 s and exited 0 while the run went on. Every reader and writer
of a file under $HERMES_HOME now opens it through `fsutil.open_regular` / `fsutil.regular_fd`
(O_NONBLOCK, then fstat: a regular file or an OSError), which a source scan below enforces; and a stop
that did not stop exits non-zero naming what is still alive."""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import NotRegularFile, open_append_fd, open_regular, regular_fd
from hermes_rl.core.base.paths import process_log_path, rl_dir, run_dir
from hermes_rl.core.daemons import procscan
from hermes_rl.core.daemons.alerts import CHECK_INTERVAL_S
from hermes_rl.core.daemons.log_watch import HEALTH_INTERVAL_S
from hermes_rl.core.daemons.procscan import MARKER, PROCESS_MARKER, SUPERVISOR_MARKER
from tests.fixtures_tui import write_run
from tests.reliability.helpers import assert_no_orphans, launch_standin, proc_record, wait_for, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


def fifo(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mkfifo(path, 0o600)


def release(path: Path) -> None:
    """Open the FIFO's other end and close it: a reader stuck in open() on it (the old code) gets EOF."""
    for _ in range(3):
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        time.sleep(0.05)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


ALERT_RULES = """\
rules:
  - on: metric
    metric: env/score
    above: 0.5
    channels: [dashboard]
"""


@pytest.mark.usefixtures("run_processes_cleanup")
@pytest.mark.parametrize("where", ["env_metrics.jsonl", "trainer's log"])
def test_a_fifo_in_a_live_run_never_wedges_its_supervisor(where):
    rl_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    (rl_dir() / "alerts.yaml").write_text(ALERT_RULES)  # any rule: the alert monitor reads env_metrics.jsonl
    run = wait_running(launch_standin()["run_id"])
    run_id = run["run_id"]
    path = (
        run_dir(run_id) / "env_metrics.jsonl" if where == "env_metrics.jsonl" else process_log_path("trainer", run_id)
    )
    fifo(path)
    try:
        time.sleep(max(CHECK_INTERVAL_S, HEALTH_INTERVAL_S) * 2 + 0.5)  # the monitor and log watch looked at it
        env = proc_record(runs.get_run(run_id, sample=False), "env")
        os.kill(env["pid"], signal.SIGKILL)
        noticed = wait_for(lambda: proc_record(runs.get_run(run_id, sample=False), "env").get("restarts", 0) >= 1, 20)
        now = runs.get_run(run_id, sample=False)
        assert noticed, f"the supervisor did not see its env die: run {now['status']}, env {proc_record(now, 'env')}"
        stopped = cli("stop", run_id)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert runs.get_run(run_id, sample=False)["status"] == "stopped"
        assert_no_orphans(run)
    finally:
        release(path)


DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def test_a_stop_that_did_not_stop_exits_non_zero_naming_what_lives(hermes_home):
    """A supervisor that does not act on the stop request (as one wedged in open() did): `hermes-rl stop`
    used to wait 15 s and exit 0 with the run still `running`; it exits 1 and names the supervisor and
    the run's live processes with their pids. A crafted run: its supervisor ignores SIGTERM, its trainer
    sleeps, each carrying the marker a real one carries."""
    run_id = "5707a11e"
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    created = time.time() - 1
    env = {k: v for k, v in os.environ.items() if k not in (MARKER, PROCESS_MARKER, SUPERVISOR_MARKER)}
    started = []
    try:
        deaf = subprocess.Popen([sys.executable, "-c", DEAF], env={**env, SUPERVISOR_MARKER: str(folder)})
        started.append(deaf)
        trainer = subprocess.Popen(
            [sys.executable, "-c", DEAF], env={**env, MARKER: str(folder), PROCESS_MARKER: "trainer"}
        )
        started.append(trainer)
        supervisor = {
            "pid": deaf.pid,
            "create_time": procscan.process_create_time(deaf.pid),
            "start_ticks": procscan.process_start_ticks(deaf.pid),
        }
        write_run(run_id, status="running", created_at=created, supervisor=supervisor)
        assert runs.get_run(run_id, sample=False)["status"] == "running"
        out = cli("stop", run_id)
        assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
        said = " ".join(out.stderr.split())
        assert "did not stop" in said and "still running" in said, said
        assert f"supervisor (pid {deaf.pid})" in said and f"trainer (pid {trainer.pid})" in said, said
        assert deaf.poll() is None  # what it named is indeed alive
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


# -- one way to open state files --------------------------------------------------------------


def test_open_regular_refuses_a_fifo_at_once_for_every_mode(tmp_path):
    path = tmp_path / "f"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader present: a writer's open would succeed
    try:
        for mode in ("r", "rb", "a", "ab", "w", "wb"):
            with pytest.raises(NotRegularFile, match="FIFO"):
                open_regular(path, mode)
        with pytest.raises(NotRegularFile):
            open_append_fd(path)
    finally:
        os.close(reader)
    target = tmp_path / "target"
    target.write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError):
        open_regular(link, "w")  # a writer never writes through a planted symlink
    with pytest.raises(OSError):
        regular_fd(link, os.O_WRONLY | os.O_APPEND | os.O_CREAT, follow=False)
    assert target.read_text() == "kept"
    with open_regular(link) as handle:  # a reader does (a home or config file may be a link)
        assert handle.read() == b"kept"
    with open_regular(tmp_path / "new", "w") as handle:
        handle.write("x")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600


SCANNED = ("core", "dataplane", "tui", "environments")
OPENERS = {"open", "read_text", "write_text", "read_bytes", "write_bytes"}
DB_OPENERS = {"sqlite3.connect", "dbm.open", "shelve.open"}  # SQLite's own open follows a symlink
# (file, enclosing function, call) -> why it may open a file without fsutil. Every entry must still be
# found (a stale one fails), so the list cannot grow silently past what the code holds.
ALLOWED = {
    ("core/base/fsutil.py", "regular_fd", "os.open"): "the one way itself",
    ("core/daemons/launchers/skypilot_driver.py", "write_state", "os.open"): "the same rules (no link followed, "
    "replaced whole), repeated: this file runs under SkyPilot's interpreter, without hermes-rl",
    ("core/daemons/launchers/skypilot_driver.py", "run", "open"): "reads the task file the launcher wrote; "
    "SkyPilot's interpreter, without hermes-rl",
    ("dataplane/verifiers_bridge.py", "_regular_fd", "os.open"): "the same check, repeated: this file runs "
    "under an environment's interpreter, without hermes-rl",
    ("core/clients/hermes_plugin.py", "manifest", "MANIFEST_FILE.read_text"): "package data, not under $HERMES_HOME",
    ("core/clients/hermes_plugin.py", "register", "SKILL_FILE.read_text"): "package data",
    ("core/clients/toolset.py", "skill_text", "SKILL_FILE.read_text"): "package data",
    ("environments/gsm8k.py", "load_problems", "SAMPLE_PATH.read_text"): "package data (the bundled sample)",
    ("dataplane/tinker_local/native_decode.py", "_load", "SOURCE.read_text"): "package data (the C++ source)",
    ("dataplane/tinker_local/native_decode.py", "_load", "(directory / 'hermes-rl.lock').open"): "a build's flock "
    "in torch's extensions folder, not a state file",
    ("tui/panes/environments.py", "EnvironmentsPane.start_filter", "self.query_one(FilterBox).open"): "a widget",
    ("tui/panes/runs.py", "RunsPane.start_filter", "self.query_one(FilterBox).open"): "a widget",
    ("core/runs/index.py", "SummaryIndex._connect", "sqlite3.connect"): "after the path is checked as a regular "
    "file of ours (no link followed), and checked again to be that file once opened",
    ("core/runs/index.py", "SummaryIndex._reset", "sqlite3.connect"): "a fresh file mkstemp just made, renamed over",
    ("core/daemons/launchers/ray_jobs.py", "RayTracker.submit", "os.open"): "created with O_EXCL (no link "
    "followed, no file reused), private to the run folder",
    # The verifiers bridge and its warm start run under a taskset's interpreter, without hermes-rl:
    ("dataplane/verifiers_bridge.py", "_package_source", "open"): "an installed package's source, read "
    "bounded to find its imports; not hermes-rl's state",
    ("dataplane/verifiers_bridge.py", "_top_level_modules", "dist.read_text"): "a distribution's own metadata",
    ("dataplane/verifiers_warm.py", "_child", "open"): "the descriptors the launcher handed over (0, 1, 2), and "
    "the zygote's own list of imports in its private temporary folder",
    ("dataplane/verifiers_warm.py", "_learn", "open"): "the zygote's own list of imports, private folder",
    ("dataplane/verifiers_warm.py", "zygote", "Path(script).read_text"): "verifiers' chat program, prepared by uv",
    ("dataplane/verifiers_warm.py", "warm_chat_program", "launcher_py.write_text"): "the launcher, in the bridge's "
    "private temporary folder (mkdtemp)",
    ("dataplane/verifiers_warm.py", "warm_chat_program", "launcher.write_text"): "the launcher's shell, same folder",
}


def _harmless(call: ast.Call) -> bool:
    """os.open(os.devnull) and /proc or /dev by a literal name: no state file, and nothing to swap."""
    first = call.args[0] if call.args else None
    if first is None:
        return False
    if ast.unparse(first) == "os.devnull":
        return True
    return isinstance(first, ast.Constant) and str(first.value).startswith(("/proc/", "/dev/"))


def file_opens(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) of every open(), X.open(), os.open(), read_text, write_text,
    read_bytes and write_bytes in `source`."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call) and not _harmless(child):
                func = child.func
                if isinstance(func, ast.Name) and func.id == "open":
                    found.append((".".join(scope) or "<module>", "open", child.lineno))
                elif isinstance(func, ast.Attribute) and (func.attr in OPENERS or ast.unparse(func) in DB_OPENERS):
                    found.append((".".join(scope) or "<module>", ast.unparse(func), child.lineno))
            visit(child, scope)

    visit(ast.parse(source), [])
    return found


def test_the_scan_finds_every_way_of_opening_a_file():
    sample = textwrap.dedent("""\
        import io, os
        def reader(run):
            open(run / "metrics.jsonl")
            (run / "a").read_text()
            Path(run).write_bytes(b"")
            os.open(run / "log", os.O_RDONLY)
            io.open(run / "b")
            os.open(os.devnull, os.O_RDONLY)
            open("/proc/self/stat", "rb")
            sqlite3.connect(run / "index.sqlite")
        """)
    calls = [call for _scope, call, _line in file_opens(sample)]
    assert calls == [
        "open",
        "(run / 'a').read_text",
        "Path(run).write_bytes",
        "os.open",
        "io.open",
        "sqlite3.connect",
    ], calls


def test_every_state_file_opens_through_fsutil():
    files = [p for top in SCANNED for p in sorted((REPO / top).rglob("*.py")) if "__pycache__" not in p.parts]
    assert len(files) > 100, "the scan covers the project's sources"
    seen, offending = set(), []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        for scope, call, line in file_opens(path.read_text(encoding="utf-8")):
            key = (rel, scope, call)
            if key in ALLOWED:
                seen.add(key)
            else:
                offending.append(f"{rel}:{line} {scope}: {call}(…)")
    assert not offending, (
        "open state files through hermes_rl.core.base.fsutil (open_regular, regular_fd, read_regular_text, "
        "write_regular_text, append_jsonl, atomic_write_text), or add an entry with its reason to ALLOWED:\n"
        + "\n".join(offending)
    )
    assert not set(ALLOWED) - seen, f"stale ALLOWED entries: {sorted(set(ALLOWED) - seen)}"
