"""Warm starts: `python -m MODULE ARGS…` run in a fork of a process that has imported the heavy
packages already, for a long-lived client that runs the same short-lived child again and again.

A config probe imports atroposlib (torch, transformers, openai, wandb: 3–5 s of CPU) to read one
environment's fields. The dashboard, the MCP server and the agent plugin probe environment after
environment; with a `ForkServer` each of those costs a fork (~0.1 s) instead of a fresh interpreter.

The server (`python -m hermes_rl.core.daemons.forkserver PRELOAD…`) is a child of its client, started
with the environment the children are meant to have. It ends when its stdin closes (its client ended,
however it ended), ending a child still running. It cannot rely on PR_SET_PDEATHSIG alone: that fires
when the *thread* that started it ends, and clients start it from short-lived worker threads. It imports the
PRELOAD modules, then reads one JSON request per line on stdin and answers on stdout: `{"pid": N}` once
the child is forked, `{"pid": N, "code": C}` once it has ended. The child behaves as
`python -m MODULE ARGS` started by run_bounded would: its own session, tied to the server, the
request's working folder, environment (PYTHONPATH applied to sys.path) and argv, stdin from /dev/null,
stdout and stderr into files the client reads. What a fork cannot give — a different interpreter, or
a package the user's folder shadows — is the client's to avoid (it runs those cold, with run_bounded).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from hermes_rl.core.daemons.spawn import CHILD_TOKEN, BoundedRun, child_preexec, end_bounded_child, spawn_group

START_TIMEOUT_S = 120.0  # importing the preloads on a busy machine


class ColdStartNeeded(Exception):
    """This child cannot start warm (the server did not start, died or answered nonsense, or the child's
    folders shadow a preloaded module): run it cold."""


# ---------------------------------------------------------------- the server (its own process)


def _child(request: dict, out_path: str, err_path: str, server_pid: int) -> None:
    """In the forked child: become `python -m MODULE ARGS` as the request describes, and never return."""
    code = 1
    try:
        os.setsid()
        child_preexec(server_pid)()  # dies with the server, umask 077
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        # What a fresh `python -m` would have put first: the working folder, then PYTHONPATH.
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *[p for p in sys.path[1:] if p not in extra]]
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 — the child reports like an interpreter would, then exits
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


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
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _wait_child(pid: int, requests: _Lines) -> int | None:
    """The child's exit code, or None (the child killed and reaped) when the client's end closes first."""
    import selectors

    try:
        watch = os.pidfd_open(pid)
    except (AttributeError, OSError):
        watch = None  # no pidfd: look at the child every 0.1 s
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(requests.fd, selectors.EVENT_READ)
            if watch is not None:
                selector.register(watch, selectors.EVENT_READ)
            while True:
                ready = {key.fd for key, _ in selector.select(timeout=None if watch is not None else 0.1)}
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return os.waitstatus_to_exitcode(status)
                if requests.fd in ready and not requests.fill():
                    from hermes_rl.core.daemons.procscan import signal_group

                    signal_group(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return None
    finally:
        if watch is not None:
            os.close(watch)


def _answer(payload: dict) -> None:
    sys.__stdout__.write(json.dumps(payload) + "\n")
    sys.__stdout__.flush()


def serve(preload: list[str]) -> int:
    for name in preload:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 — a child that needs it will say why
            pass
    # Its top-level modules: a child whose folders hold one of these names would import the user's copy
    # if it started cold, so the client runs that one cold.
    _answer({"ready": True, "modules": sorted({name.partition(".")[0] for name in sys.modules})})
    requests = _Lines(sys.stdin.fileno())
    while (line := requests.next()) is not None:  # None: the client is gone
        try:
            request = json.loads(line)
            module, out_path, err_path = request["module"], request["stdout"], request["stderr"]
            well_formed = isinstance(module, str) and isinstance(request["args"], list)
        except (ValueError, TypeError, KeyError):
            well_formed = False
        if not well_formed:
            _answer({"error": "bad request"})
            continue
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(request, out_path, err_path, server_pid)
        _answer({"pid": pid})
        code = _wait_child(pid, requests)
        if code is None:
            return 0  # the client is gone
        _answer({"pid": pid, "code": code})
    return 0


# ---------------------------------------------------------------- the client


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
        self._failed = False  # it did not start: not tried again until the stamp changes

    def _start(self, stamp: tuple) -> subprocess.Popen:
        self.close()
        self._stamp, self._failed = stamp, True
        try:
            proc = spawn_group(
                [sys.executable, "-m", "hermes_rl.core.daemons.forkserver", *self.preload],
                # Tied (PR_SET_PDEATHSIG) only to a thread that lives as long as the client; in any case
                # the server ends when its stdin closes.
                tied=threading.current_thread() is threading.main_thread(),
                session=True,
                bufsize=0,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=tempfile.gettempdir(),
                env=self.env,
            )
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
        self._modules = frozenset(m for m in ready.get("modules", ()) if isinstance(m, str))
        self._failed = False
        return proc

    def shadowed(self, folders: list[str]) -> bool:
        """Whether one of `folders` (a child's cwd and PYTHONPATH) holds a module or package named like one
        the server has imported already: cold, the child would import that one instead."""
        if not self._modules:
            return False
        for folder in folders:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if os.path.isdir(os.path.join(folder, name)):
                    module = name  # a package (a folder named `x.egg-info` is none)
                elif name.endswith((".py", ".pyc", ".so")):
                    module = name.partition(".")[0]
                else:
                    continue
                if module in self._modules:
                    return True
        return False

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
        from hermes_rl.core.daemons.procscan import signal_group

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
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            proc.stdout.close()


def _head(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
