"""Warm starts: `python -m MODULE ARGS…` run in a fork of a process that has imported the heavy
packages already, for a client that starts such children again and again.

A config probe imports atroposlib (torch, transformers, openai, wandb: 3–5 s of CPU) to read one
environment's fields; a run's environment, trainer and local Tinker server each import most of the same
packages before doing anything. With a warm server each of those costs a fork (~0.1 s) instead of a
fresh interpreter: `ForkServer` serves probes (one short child at a time, run to its end), `WarmStarts`
a supervisor's long-lived processes (several at once, each watched until it exits).

The server (warm.server, `python -m hermes_rl.core.daemons.warm.server PRELOAD…`) is a child of its
client, started with the environment the children are meant to have, and ends with it; a child behaves
as `python -m MODULE ARGS` started fresh would, /proc command line and environment included (warm.room).
What a fork cannot give — a different interpreter, different import-time settings, a package the user's
folder shadows — is the client's to avoid (it starts those cold).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from ...base.fsutil import open_regular
from ..procscan import signal_group
from ..spawn import CHILD_TOKEN, BoundedRun, end_bounded_child, spawn_group
from .base import BorrowedServer, borrow
from .room import ARGV_ROOM, ENV_ROOM, ROOM_ENV, env_block
from .server import Lines

START_TIMEOUT_S = 120.0  # importing the preloads on a busy machine
WARM_START_ENV = "HERMES_RL_WARM_START"  # "0": every process starts as a fresh interpreter


class ColdStartNeeded(Exception):
    """This child cannot start warm (the server did not start, died or answered nonsense, or the child's
    folders shadow a preloaded module): run it cold."""


# ---------------------------------------------------------------- the client


def start_server(preload: list[str], env: dict[str, str]) -> subprocess.Popen:
    """The server process, with room in its command line and environment for its children's own. Tied
    (PR_SET_PDEATHSIG) only to a thread that lives as long as the client; in any case it ends when its
    stdin closes."""
    return spawn_group(
        [sys.executable, "-m", "hermes_rl.core.daemons.warm.server", *preload, " " * ARGV_ROOM],
        tied=threading.current_thread() is threading.main_thread(),
        session=True,
        bufsize=0,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
        env={**env, ROOM_ENV: " " * ENV_ROOM},
    )


# A warm server of one's own (a Popen) or one forked by the client's warm base: the same pipes and calls.
ServerProcess = subprocess.Popen | BorrowedServer


def end_server(proc: ServerProcess | None, grace: float) -> None:
    """Close its stdin (it ends its children and exits), give it `grace` s to, then SIGKILL it. Its stdout
    stays open: a WarmStarts reader thread may still be reading the last answers."""
    if proc is None:
        return
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _imported(ready: dict) -> tuple[frozenset[str], frozenset[str]]:
    """A server's ready answer: the top-level modules it imported, and which of them are namespace packages."""
    modules, namespaces = (
        frozenset(m for m in ready.get(key, ()) if isinstance(m, str)) for key in ("modules", "namespaces")
    )
    return modules, namespaces


def _answer_fd(proc: ServerProcess | None) -> int:
    """The pipe a server answers on (every server is started, or forked, with one)."""
    assert proc is not None and proc.stdout is not None
    return proc.stdout.fileno()


def _regular_package(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, init)) for init in ("__init__.py", "__init__.pyc"))


def shadowed(folders: Sequence[str], modules: frozenset[str], namespaces: frozenset[str] = frozenset()) -> bool:
    """Whether one of `folders` (a child's cwd and PYTHONPATH) holds a module or package named like one of
    the server's `modules`: cold, the child would import that one instead. A folder without __init__.py
    hides no module or package installed after it (Python prefers those to a namespace package), so it
    counts only against the server's `namespaces` (it would add to one of them); a run folder's `wandb/`
    does not shadow wandb."""
    if not modules:
        return False
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                module = name  # a package (a folder named `x.egg-info` is none)
                if not _regular_package(path) and module not in namespaces:
                    continue
            elif name.endswith((".py", ".pyc", ".so")):
                module = name.partition(".")[0]
            else:
                continue
            if module in modules:
                return True
    return False


class ForkServer:
    """One warm server per client process, started on first use; `run` is run_bounded for a module."""

    def __init__(self, preload: list[str], env: dict[str, str]):
        self.preload = list(preload)
        self.env = dict(env)
        self._proc: ServerProcess | None = None
        self._answers: Lines | None = None
        self._lock = threading.Lock()
        self._stamp: tuple = ()
        self._modules: frozenset[str] = frozenset()
        self._namespaces: frozenset[str] = frozenset()
        self._failed = False  # it did not start: not tried again until the stamp changes

    def _start(self, stamp: tuple) -> ServerProcess:
        """Its server: forked by the client's warm base where it keeps one (warm.base), else its own."""
        self.close()
        self._stamp, self._failed = stamp, True
        borrowed, _why = borrow(self.preload, self.env, ())
        try:
            proc: ServerProcess = borrowed or start_server(self.preload, self.env)
        except OSError as exc:
            raise ColdStartNeeded(f"the warm server could not start: {exc}") from None
        self._proc = proc
        self._answers = Lines(_answer_fd(proc))
        try:
            ready = self._read(START_TIMEOUT_S)
        except TimeoutError:
            ready = {}
        if ready.get("ready") is not True:
            self.close()
            raise ColdStartNeeded("the warm server did not start")
        self._modules, self._namespaces = _imported(ready)
        self._failed = False
        return proc

    def shadowed(self, folders: Sequence[str]) -> bool:
        return shadowed(folders, self._modules, self._namespaces)

    def _read(self, timeout: float) -> dict:
        """The server's next answer; TimeoutError after `timeout` s, ColdStartNeeded if it is gone."""
        if self._proc is None or self._answers is None:
            raise ColdStartNeeded("no server")
        line = self._answers.next(timeout)
        if line is None:
            self.close()
            raise ColdStartNeeded("the warm server exited")
        try:
            answer = json.loads(line)
        except ValueError:
            self.close()
            raise ColdStartNeeded("the warm server answered nonsense") from None
        return answer if isinstance(answer, dict) else {}

    def run(
        self,
        module: str,
        args: list[str],
        timeout: float,
        *,
        env: dict[str, str],
        cwd: str,
        stamp: tuple = (),
        folders: Sequence[str] = (),
        max_bytes: int = 8 * 1024 * 1024,
    ) -> BoundedRun:
        """Run `python -m module args` forked from the warm server, with the same deadline and the same
        clean-up as run_bounded (its session, then anything carrying its one-off marker). `stamp`: what
        the preloaded modules depend on (installed packages); when it changes, the server starts afresh.
        `folders`: where the child imports from before the installed packages (see `shadowed`).
        ColdStartNeeded when it cannot start warm."""
        # One child at a time; a caller that finds the server busy (another thread's probe) starts cold
        # rather than wait behind a child that may run to its deadline.
        if not self._lock.acquire(blocking=False):
            raise ColdStartNeeded("the warm server is busy")
        try:
            if (
                stamp != self._stamp
                or (self._proc is None and not self._failed)
                or (self._proc and self._proc.poll() is not None)
            ):
                self._start(stamp)
            if self._proc is None:
                raise ColdStartNeeded("the warm server did not start")
            if self.shadowed([cwd, *folders]):
                raise ColdStartNeeded("the child's folders shadow a preloaded module")
            requests = self._proc.stdin
            assert requests is not None  # every server takes its requests on a pipe
            token = secrets.token_hex(8)
            folder = tempfile.mkdtemp(prefix="hermes-rl-warm-")
            out_path, err_path = os.path.join(folder, "out"), os.path.join(folder, "err")
            request = {
                "module": module,
                "args": list(args),
                "cwd": cwd,
                "env": {**env, CHILD_TOKEN: token},
                "stdout": out_path,
                "stderr": err_path,
            }
            deadline = time.monotonic() + timeout
            pid = None
            timed_out = False
            code = None
            try:
                try:
                    pending = memoryview((json.dumps(request) + "\n").encode())
                    while pending:  # an unbuffered pipe may take part of it per write
                        pending = pending[requests.write(pending) :]
                    pid = self._read(timeout).get("pid")
                except (OSError, TimeoutError):
                    self.close()
                    raise ColdStartNeeded("the warm server did not take the request") from None
                if not isinstance(pid, int):
                    self.close()
                    raise ColdStartNeeded("the warm server could not fork")
                try:
                    code = self._read(deadline - time.monotonic()).get("code")
                except TimeoutError:
                    timed_out = True
                    signal_group(pid, signal.SIGKILL)
                    try:
                        self._read(5.0)
                    except (TimeoutError, ColdStartNeeded):
                        self.close()
                return BoundedRun(_head(out_path, max_bytes), _head(err_path, max_bytes), code, timed_out)
            finally:
                if pid is not None:
                    end_bounded_child(pid, token)
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            self._lock.release()

    def close(self) -> None:
        proc, self._proc, self._answers = self._proc, None, None
        end_server(proc, grace=0.0)
        if proc is not None and proc.stdout is not None:
            with contextlib.suppress(OSError):
                proc.stdout.close()


class WarmStarts:
    """Long-lived children forked from one warm server (a supervisor's run processes).

    The server starts at once and imports in the background; `state` says whether it is still
    "starting", "ready" or "failed" (a client waits for it rather than start cold what it will soon fork).
    A reader thread takes the server's answers: a child's exit code lands in `exit_code(pid)` and
    `on_change` is called (from that thread), as SIGCHLD would tell a parent. A child is started warm only
    if its environment is the server's apart from `runtime_only` names (read once the process runs, never
    at import), its folders shadow nothing the server imported, and its environment fits the room the
    server can show (`/proc/PID/environ`); otherwise `start` raises ColdStartNeeded. `borrow_only`: the
    server only if a warm base forks it now (warm.base); else "failed" at once, for a client whose
    one child would not make a server of its own, or the wait for a base still importing, pay."""

    def __init__(self, preload: list[str], env: dict[str, str], runtime_only, on_change=None, borrow_only=False):
        self.env = dict(env)
        self.runtime_only = frozenset(runtime_only)
        self.on_change = on_change or (lambda: None)
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self._state = "starting"
        self._why = ""
        self._proc: ServerProcess | None = None
        self._modules: frozenset[str] = frozenset()
        self._namespaces: frozenset[str] = frozenset()
        self._env_room = 0
        self._codes: dict[int, int] = {}
        self._forked: queue.SimpleQueue = queue.SimpleQueue()
        self._live: set[int] = set()
        self._lock = threading.Lock()
        self._proc, self.not_borrowed = borrow(preload, self.env, self.runtime_only, wait=not borrow_only)
        if self._proc is None and borrow_only:
            self._fail(f"no warm server to borrow: {self.not_borrowed}")
            return
        if self._proc is None:
            try:
                self._proc = start_server(preload, self.env)
            except OSError as exc:
                self._proc = None
                self._fail(f"the warm server could not start: {exc}")
                return
        threading.Thread(target=self._read_answers, name="warm-starts", daemon=True).start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def borrowed(self) -> bool:
        """Forked by a warm base (warm.base), not started by this process; `not_borrowed` says
        why not otherwise."""
        return not self.not_borrowed

    @property
    def state(self) -> str:
        if self._state == "starting" and time.monotonic() > self.deadline:
            self._fail(f"the warm server did not import its modules within {START_TIMEOUT_S:g}s")
        return self._state

    def wait_started(self, cancelled: threading.Event | None = None) -> str:
        """Block while the server imports (until ready, failed or `cancelled`); its state then."""
        while self.state == "starting" and not (cancelled is not None and cancelled.is_set()):
            time.sleep(0.02)
        return self.state

    def _fail(self, why: str) -> None:
        with self._lock:
            if self._state == "failed":
                return
            self._state, self._why = "failed", why
            gone = list(self._live)
        for pid in gone:  # tied to the server: they died with it
            self._ended(pid, -signal.SIGKILL)
        self.close()
        self.on_change()

    def _ended(self, pid: int, code: int) -> None:
        with self._lock:
            self._live.discard(pid)
            self._codes[pid] = code

    def _read_answers(self) -> None:
        answers = Lines(_answer_fd(self._proc))
        while True:
            try:
                line = answers.next()
            except (OSError, ValueError):
                line = None
            if line is None:
                break
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if not isinstance(answer, dict):
                continue
            if answer.get("ready") is True:
                self._modules, self._namespaces = _imported(answer)
                self._env_room = int(answer.get("env_room") or 0)
                with self._lock:
                    if self._state == "starting":
                        self._state = "ready"
                self.on_change()
            elif "code" in answer and isinstance(answer.get("pid"), int):
                self._ended(answer["pid"], int(answer["code"]))
                self.on_change()
            else:
                self._forked.put(answer)
        self._forked.put({})  # a start still waiting for its answer gets none
        self._fail("the warm server exited")

    def eligible(self, env: dict[str, str], folders: list[str]) -> str | None:
        """Why a child with this environment and these folders cannot start warm (None: it can)."""
        if self.state != "ready":
            return f"the warm server is not ready ({self._why or self._state})"
        mine = {k: v for k, v in env.items() if k not in self.runtime_only}
        theirs = {k: v for k, v in self.env.items() if k not in self.runtime_only}
        if mine != theirs:
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            return f"its environment differs from the warm server's in {', '.join(differ[:3])}"
        if shadowed(folders, self._modules, self._namespaces):
            return "its folders shadow a module the warm server imported"
        if len(env_block(env)) >= self._env_room:
            return "its environment is larger than the warm server has room to show"
        return None

    def start(self, argv: list[str], *, cwd: str, env: dict[str, str], log: str, folders: list[str]) -> int:
        """Fork `argv` (`python -m MODULE ARGS…` with this interpreter) with both streams appended to `log`;
        its pid (its own session and process group). ColdStartNeeded when it cannot start warm."""
        if len(argv) < 3 or argv[1] != "-m" or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
            raise ColdStartNeeded("not `python -m` with this interpreter")
        why = self.eligible(env, [cwd, *folders])
        if why:
            raise ColdStartNeeded(why)
        request = {"module": argv[2], "args": argv[3:], "argv": argv, "cwd": cwd, "env": env, "log": log}
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ColdStartNeeded("the warm server is gone")
        try:
            pending = memoryview((json.dumps(request) + "\n").encode())
            while pending:
                pending = pending[proc.stdin.write(pending) :]
            answer = self._forked.get(timeout=30.0)
        except (OSError, ValueError, queue.Empty):
            self._fail("the warm server did not take a request")
            raise ColdStartNeeded("the warm server did not take the request") from None
        pid = answer.get("pid")
        if not isinstance(pid, int):
            raise ColdStartNeeded(f"the warm server could not fork: {answer.get('error', 'no answer')}")
        with self._lock:
            if pid not in self._codes:
                self._live.add(pid)
        return pid

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            return self._codes.get(pid)

    def close(self) -> None:
        """End the server (and any child still running: they are tied to it)."""
        proc, self._proc = self._proc, None
        end_server(proc, grace=5.0)


def _head(path: str, limit: int) -> bytes:
    try:
        with open_regular(path) as handle:
            return handle.read(limit)
    except OSError:
        return b""
