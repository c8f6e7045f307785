"""Warm starts: `python -m MODULE ARGS…` run in a fork of a process that has imported the heavy
packages already, for a client that starts such children again and again.

A config probe imports atroposlib (torch, transformers, openai, wandb: 3–5 s of CPU) to read one
environment's fields; a run's environment, trainer and local Tinker server each import most of the same
packages before doing anything. With a warm server each of those costs a fork (~0.1 s) instead of a
fresh interpreter: `ForkServer` serves probes (one short child at a time, run to its end), `WarmStarts`
a supervisor's long-lived processes (several at once, each watched until it exits).

The server (`python -m hermes_rl.core.daemons.forkserver PRELOAD…`) is a child of its client, started
with the environment the children are meant to have. It ends when its stdin closes (its client ended,
however it ended), ending every child still running. It cannot rely on PR_SET_PDEATHSIG alone: that fires
when the *thread* that started it ends, and clients start it from short-lived worker threads. It imports the
PRELOAD modules, then reads one JSON request per line on stdin and answers on stdout: `{"pid": N}` once
a child is forked, `{"pid": N, "code": C}` once it has ended. A child behaves as `python -m MODULE ARGS`
started fresh would: its own session, tied to the server, the request's working folder, environment
(PYTHONPATH applied to sys.path) and argv, stdin from /dev/null, stdout and stderr into files the client
names, fresh random seeds, and exit handlers run at its end. Its /proc command line and environment are
its own too (written over the server's, which are started with room to spare), so `ps`, the run's
environment marker and every tool that reads them see what a cold start would show. What a fork cannot
give — a different interpreter, different import-time settings, a package the user's folder shadows —
is the client's to avoid (it starts those cold).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import runpy
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..base.fsutil import leave_no_temporary_folders_on_sigterm, temporary_directories
from .spawn import CHILD_TOKEN, BoundedRun, child_preexec, end_bounded_child, spawn_group

START_TIMEOUT_S = 120.0  # importing the preloads on a busy machine
SHOW_TIMEOUT_S = 5.0  # a child's pid is answered once it shows its own cmdline and environ, or after this
WARM_START_ENV = "HERMES_RL_WARM_START"  # "0": every process starts as a fresh interpreter


class ColdStartNeeded(Exception):
    """This child cannot start warm (the server did not start, died or answered nonsense, or the child's
    folders shadow a preloaded module): run it cold."""


# ---------------------------------------------------------------- the server (its own process)


def _child(request: dict, server_pid: int, inherited: list[int], shown: int) -> None:
    """In the forked child: become `python -m MODULE ARGS` as the request describes, and never return.
    `shown` is closed once /proc shows the child's own command line and environment."""
    code = 1
    try:
        os.setsid()
        child_preexec(server_pid)()  # dies with the server, umask 077
        for fd in inherited:  # the server's own: its selector and its other children's pidfds
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        if request.get("log"):  # a run's process log: both streams, appended
            out = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            err = os.dup(out)
        else:
            out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        _show_as(request.get("argv") or [sys.executable, "-m", request["module"], *request["args"]], env)
        os.close(shown)  # the server answers our pid now: whoever reads /proc/PID then sees us, not it
        _fresh_random_state()
        _own_temporary_directories()
        leave_no_temporary_folders_on_sigterm()  # stopped by SIGTERM, it removes them first
        # What a fresh `python -m` would have put first: the working folder, then PYTHONPATH.
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *[p for p in sys.path[1:] if p not in extra]]
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"): printed, exit code 1, as the interpreter does
            code = 1
            with contextlib.suppress(Exception):
                print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 — the child reports like an interpreter would, then exits
        import traceback

        traceback.print_exc()
    finally:
        _end_like_an_interpreter()
        os._exit(code)


def _end_like_an_interpreter() -> None:
    """What an interpreter does before it exits: wait for non-daemon threads, run atexit handlers, flush."""
    import atexit

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()


def _own_temporary_directories() -> None:
    """A module's TemporaryDirectory made at import (wandb's media folder) is the server's, shared by every
    fork: the first fork to exit would remove it under the others. A fresh interpreter makes its own, so
    each fork gets its own folder, removed at its exit, and leaves the server's alone."""
    import weakref

    for finalizer, folder in temporary_directories():
        finalizer.detach()
        with contextlib.suppress(OSError):
            base = os.path.basename(folder.name.rstrip("/"))
            folder.name = tempfile.mkdtemp(suffix=base[11:] if base.startswith("tmp") else "")  # tmp + 8 random
            weakref.finalize(folder, shutil.rmtree, folder.name, ignore_errors=True)


def _fresh_random_state() -> None:
    """Forks share their parent's random generators; a fresh interpreter seeds them from the OS. (The
    `random` module reseeds itself at fork.)"""
    if "numpy.random" in sys.modules:
        with contextlib.suppress(Exception):
            sys.modules["numpy.random"].seed()
    if "torch" in sys.modules:
        with contextlib.suppress(Exception):
            sys.modules["torch"].seed()


# The server starts with this much spare room in its command line and environment, so that a child can
# write its own over them (what /proc/PID/cmdline and /proc/PID/environ read).
ARGV_ROOM = 4096
ENV_ROOM = 64 * 1024
ROOM_ENV = "HERMES_RL_WARM_ROOM"


def _memory_areas() -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((arg_start, arg_end), (env_start, env_end)) of this process, from /proc/self/stat (Linux >= 3.5)."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        # after the command's closing parenthesis the fields start at number 3; these are 48–51
        arg_start, arg_end, env_start, env_end = (int(f) for f in fields[45:49])
    except (OSError, ValueError, IndexError):
        return None
    if not (0 < arg_start < arg_end and 0 < env_start < env_end):
        return None
    return (arg_start, arg_end), (env_start, env_end)


def env_room() -> int:
    """Bytes of environment a child of this process can show as its own."""
    areas = _memory_areas()
    return 0 if areas is None else areas[1][1] - areas[1][0]


def env_block(env: dict[str, str]) -> bytes:
    return b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())


def _show_as(argv: list[str], env: dict[str, str]) -> None:
    """Write argv and env over this process's own command line and environment areas (padded with NULs),
    as setproctitle does for the command line. The C environment no longer points there: os.environ was
    replaced, by putenv, before this."""
    import ctypes

    areas = _memory_areas()
    if areas is None:
        return
    (arg_start, arg_end), (env_start, env_end) = areas
    block = env_block(env)
    if len(block) < env_end - env_start:  # the client checked; a block that does not fit is not written
        ctypes.memmove(env_start, block.ljust(env_end - env_start, b"\0"), env_end - env_start)
    line = b"".join(os.fsencode(a) + b"\0" for a in argv)[: arg_end - arg_start - 1]
    ctypes.memmove(arg_start, line.ljust(arg_end - arg_start, b"\0"), arg_end - arg_start)


class _Lines:
    """Lines read from a pipe with select(): a buffered file object can hold a second line that select()
    on its descriptor no longer sees (the client would wait out its deadline for an answer it has)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = b""

    def fill(self) -> bool:
        """Read what the pipe holds (call when select() says it is readable); False at its end."""
        chunk = os.read(self.fd, 65536)
        self.buffer += chunk
        return bool(chunk)

    def pop(self) -> bytes | None:
        """The next whole line already read, without waiting; None if there is none yet."""
        if b"\n" not in self.buffer:
            return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def next(self, timeout: float | None = None) -> bytes | None:
        """The next line, waiting up to `timeout` s (None: as long as it takes); None at the pipe's end,
        TimeoutError when the time is up."""
        import selectors

        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not selector.select(timeout=left):
                    raise TimeoutError
                if not self.fill():
                    return None
        return self.pop()


def _answer(payload: dict) -> None:
    sys.__stdout__.write(json.dumps(payload) + "\n")
    sys.__stdout__.flush()


def _request(line: bytes) -> dict | None:
    try:
        request = json.loads(line)
        fields_ok = isinstance(request["module"], str) and isinstance(request["args"], list)
        fields_ok = fields_ok and isinstance(request["env"], dict) and isinstance(request["cwd"], str)
        fields_ok = fields_ok and (isinstance(request.get("log"), str) or isinstance(request["stdout"], str))
    except (ValueError, TypeError, KeyError):
        return None
    return request if fields_ok else None


def serve(preload: list[str]) -> int:
    import select
    import selectors

    for name in preload:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 — a child that needs it will say why
            pass
    import gc

    gc.collect()
    gc.freeze()  # the children's collections then skip what was imported: no copy of those pages for it
    # Its top-level modules: a child whose folders hold one of these names would import the user's copy
    # if it started cold, so the client runs that one cold.
    modules = sorted({name.partition(".")[0] for name in sys.modules})
    # A folder without __init__.py adds to a namespace package of its name, and hides nothing else.
    namespaces = [name for name in modules if _is_namespace(sys.modules.get(name))]
    _answer({"ready": True, "modules": modules, "namespaces": namespaces, "env_room": env_room()})
    requests = _Lines(sys.stdin.fileno())
    selector = selectors.DefaultSelector()
    selector.register(requests.fd, selectors.EVENT_READ)
    children: dict[int, int | None] = {}  # pid -> its pidfd (None: looked at every 0.1 s)
    server_pid = os.getpid()
    try:
        while True:
            polled = any(watch is None for watch in children.values())
            ready = selector.select(timeout=0.1 if polled else None)
            if any(key.fd == requests.fd for key, _ in ready):
                if not requests.fill():
                    return 0  # the client is gone: its children go too (below)
                while (line := requests.pop()) is not None:
                    request = _request(line)
                    if request is None:
                        _answer({"error": "bad request"})
                        continue
                    inherited = [selector.fileno(), *(w for w in children.values() if w is not None)]
                    shown_r, shown_w = os.pipe()
                    pid = os.fork()
                    if pid == 0:
                        _child(request, server_pid, [*inherited, shown_r], shown_w)
                    os.close(shown_w)
                    select.select([shown_r], [], [], SHOW_TIMEOUT_S)  # until the child closes it (or exits)
                    os.close(shown_r)
                    try:
                        watch = os.pidfd_open(pid)
                        selector.register(watch, selectors.EVENT_READ)
                    except (AttributeError, OSError):
                        watch = None
                    children[pid] = watch
                    _answer({"pid": pid})
            for pid, watch in list(children.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
                if watch is not None:
                    selector.unregister(watch)
                    os.close(watch)
                del children[pid]
                _answer({"pid": pid, "code": os.waitstatus_to_exitcode(status)})
    finally:
        from .procscan import signal_group

        for pid in children:
            signal_group(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


# ---------------------------------------------------------------- the client


def start_server(preload: list[str], env: dict[str, str]) -> subprocess.Popen:
    """The server process, with room in its command line and environment for its children's own. Tied
    (PR_SET_PDEATHSIG) only to a thread that lives as long as the client; in any case it ends when its
    stdin closes."""
    return spawn_group(
        [sys.executable, "-m", "hermes_rl.core.daemons.forkserver", *preload, " " * ARGV_ROOM],
        tied=threading.current_thread() is threading.main_thread(),
        session=True,
        bufsize=0,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
        env={**env, ROOM_ENV: " " * ENV_ROOM},
    )


def end_server(proc: subprocess.Popen | None, grace: float) -> None:
    """Close its stdin (it ends its children and exits), give it `grace` s to, then SIGKILL it. Its stdout
    stays open: a WarmStarts reader thread may still be reading the last answers."""
    if proc is None:
        return
    with contextlib.suppress(OSError):
        proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _imported(ready: dict) -> tuple[frozenset[str], frozenset[str]]:
    """A server's ready answer: the top-level modules it imported, and which of them are namespace packages."""
    return tuple(frozenset(m for m in ready.get(key, ()) if isinstance(m, str)) for key in ("modules", "namespaces"))


def _is_namespace(module) -> bool:
    return module is not None and getattr(module, "__file__", None) is None and hasattr(module, "__path__")


def _regular_package(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, init)) for init in ("__init__.py", "__init__.pyc"))


def shadowed(folders: list[str], modules: frozenset[str], namespaces: frozenset[str] = frozenset()) -> bool:
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
        self._proc: subprocess.Popen | None = None
        self._answers: _Lines | None = None
        self._lock = threading.Lock()
        self._stamp: tuple = ()
        self._modules: frozenset[str] = frozenset()
        self._namespaces: frozenset[str] = frozenset()
        self._failed = False  # it did not start: not tried again until the stamp changes

    def _start(self, stamp: tuple) -> subprocess.Popen:
        """Its server: forked by the client's warm base where it keeps one (daemons.warm_base), else its own."""
        from .warm_base import borrow

        self.close()
        self._stamp, self._failed = stamp, True
        proc, _why = borrow(self.preload, self.env, ())
        try:
            proc = proc or start_server(self.preload, self.env)
        except OSError as exc:
            raise ColdStartNeeded(f"the warm server could not start: {exc}") from None
        self._proc = proc
        self._answers = _Lines(proc.stdout.fileno())
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

    def shadowed(self, folders: list[str]) -> bool:
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
        folders: list[str] = (),
        max_bytes: int = 8 * 1024 * 1024,
    ) -> BoundedRun:
        """Run `python -m module args` forked from the warm server, with the same deadline and the same
        clean-up as run_bounded (its session, then anything carrying its one-off marker). `stamp`: what
        the preloaded modules depend on (installed packages); when it changes, the server starts afresh.
        `folders`: where the child imports from before the installed packages (see `shadowed`).
        ColdStartNeeded when it cannot start warm."""
        from .procscan import signal_group

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
                        pending = pending[self._proc.stdin.write(pending) :]
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
        if proc is not None:
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
    server only if a warm base forks it now (daemons.warm_base); else "failed" at once, for a client whose
    one child would not make a server of its own, or the wait for a base still importing, pay."""

    def __init__(self, preload: list[str], env: dict[str, str], runtime_only, on_change=None, borrow_only=False):
        self.env = dict(env)
        self.runtime_only = frozenset(runtime_only)
        self.on_change = on_change or (lambda: None)
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self._state = "starting"
        self._why = ""
        self._modules: frozenset[str] = frozenset()
        self._namespaces: frozenset[str] = frozenset()
        self._env_room = 0
        self._codes: dict[int, int] = {}
        self._forked: queue.SimpleQueue = queue.SimpleQueue()
        self._live: set[int] = set()
        self._lock = threading.Lock()
        from .warm_base import borrow

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
        """Forked by a warm base (daemons.warm_base), not started by this process; `not_borrowed` says
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
        answers = _Lines(self._proc.stdout.fileno())
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
        if proc is None:
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
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


if __name__ == "__main__":
    sys.exit(serve([name for name in sys.argv[1:] if name.strip()]))  # a blank one is the room left for children
