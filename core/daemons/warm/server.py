"""The warm server: `python -m hermes_rl.core.daemons.warm.server PRELOAD…`, a process that imported the
heavy packages once and forks a child per request (the clients are in warm.client).

It is a child of its client, started with the environment the children are meant to have. It ends when its
stdin closes (its client ended, however it ended), ending every child still running. It cannot rely on
PR_SET_PDEATHSIG alone: that fires when the *thread* that started it ends, and clients start it from
short-lived worker threads. It imports the PRELOAD modules, then reads one JSON request per line on stdin
and answers on stdout: `{"pid": N}` once a child is forked, `{"pid": N, "code": C}` once it has ended. A
child behaves as `python -m MODULE ARGS` started fresh would: its own session, tied to the server, the
request's working folder, environment (PYTHONPATH applied to sys.path) and argv, stdin from /dev/null,
stdout and stderr into files the client names, fresh random seeds, and exit handlers run at its end. Its
/proc command line and environment are its own too (warm.room).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import selectors
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref

from ...base.fsutil import leave_no_temporary_folders_on_sigterm, regular_fd, temporary_directories
from ..procscan import signal_group
from ..spawn import child_preexec
from .room import env_room, show_as

SHOW_TIMEOUT_S = 5.0  # a child's pid is answered once it shows its own cmdline and environ, or after this


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
            out = regular_fd(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, follow=False)
            err = os.dup(out)
        else:
            out = regular_fd(request["stdout"], os.O_WRONLY | os.O_CREAT, follow=False, truncate=True)
            err = regular_fd(request["stderr"], os.O_WRONLY | os.O_CREAT, follow=False, truncate=True)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        show_as(request.get("argv") or [sys.executable, "-m", request["module"], *request["args"]], env)
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
        traceback.print_exc()
    finally:
        _end_like_an_interpreter()
        os._exit(code)


def _end_like_an_interpreter() -> None:
    """What an interpreter does before it exits: wait for non-daemon threads, run atexit handlers, flush."""
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


class Lines:
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
    out = sys.__stdout__
    assert out is not None  # the answer pipe: a server is always started with one
    out.write(json.dumps(payload) + "\n")
    out.flush()


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
    for name in preload:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 — a child that needs it will say why
            pass
    gc.collect()
    gc.freeze()  # the children's collections then skip what was imported: no copy of those pages for it
    # Its top-level modules: a child whose folders hold one of these names would import the user's copy
    # if it started cold, so the client runs that one cold.
    modules = sorted({name.partition(".")[0] for name in sys.modules})
    # A folder without __init__.py adds to a namespace package of its name, and hides nothing else.
    namespaces = [name for name in modules if is_namespace(sys.modules.get(name))]
    _answer({"ready": True, "modules": modules, "namespaces": namespaces, "env_room": env_room()})
    requests = Lines(sys.stdin.fileno())
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
        for pid in children:
            signal_group(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


def is_namespace(module) -> bool:
    return module is not None and getattr(module, "__file__", None) is None and hasattr(module, "__path__")


if __name__ == "__main__":
    sys.exit(serve([name for name in sys.argv[1:] if name.strip()]))  # a blank one is the room left for children
