"""The warm base: a run's warm server forked from a process that imported everything already.

Every run's supervisor starts a warm server (warm.client.WarmStarts) that imports torch, transformers,
atroposlib and the tinker SDK once for the run's processes: 3–5 s of CPU before the run's first process.
A long-lived client that starts run after run (the dashboard, a test worker) keeps one warm base instead:
`keep(preload, env)` starts it and names its socket in $HERMES_RL_WARM_BASE, which the supervisors it
starts inherit. Such a supervisor asks the base for its warm server (`borrow`): the base forks a child
that becomes the run's server (warm.server.serve) on two pipes the supervisor passes over the socket. The
run then pays a fork, not the imports.

The borrowed server is the run's, as a server of its own would be: it shows the run's command line and
environment in /proc (the run's marker finds it), leads a session of its own, serves only that supervisor
and ends, with every child, when the supervisor's end of its request pipe closes — however the supervisor
ended. It does not die with the base: a run outlives the dashboard that started it. The base ends when
its owner does (its stdin closes) and removes its folder.

A server is borrowed only when the base imported everything the run's server would (`preload`), with the
installed packages unchanged since, and the run's environment equals the base's apart from names that are
read once a process runs, never while it imports (the request lists them); otherwise the supervisor
starts a server of its own, as before.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

from ...base.fsutil import open_regular
from ..procscan import MARKER
from ..spawn import spawn_group
from .room import ARGV_ROOM, ENV_ROOM, ROOM_ENV, env_block, env_room, show_as
from .server import serve

BASE_ENV = "HERMES_RL_WARM_BASE"  # the socket of the warm base a supervisor may borrow its server from
SOCKET_NAME = "base.sock"
READY_NAME = "ready"  # made next to the socket once the base has imported everything
NO_WARM_BASE = "no warm base"  # why a server was not borrowed when no client keeps one
# Connecting, the base's checks and its fork; a base still importing (it listens from its start) answers
# once it has: a borrower waits for it rather than import the same modules for itself meanwhile.
BORROW_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0  # how long the base waits for a connected client's request
MAX_REQUEST = 1024 * 1024
REAP_EVERY_S = 1.0  # how long an ended server may wait to be collected
OWN_SETTINGS = "HERMES_RL_"  # hermes-rl's own settings: read where they are used, never at import
# Names a base's owner and the runs it serves may differ in, as no preloaded module reads them while it
# imports: the run's home, folder and id, its W&B folder and mode (read by wandb.init, not its import), the
# base's own address, pytest's per-test marker, the folder torch sets for itself when it first compiles.
RUNTIME_ONLY_ENV = frozenset(
    {
        "HERMES_HOME",
        MARKER,
        "HERMES_RL_RUN_ID",
        "WANDB_DIR",
        "WANDB_MODE",
        "WANDB_DISABLED",
        "WANDB_SILENT",
        BASE_ENV,
        "PYTEST_CURRENT_TEST",
        "TORCHINDUCTOR_CACHE_DIR",
    }
)


def _ready_file(socket_path: str) -> str:
    """The file the base makes next to its socket once it has imported everything."""
    return os.path.join(os.path.dirname(socket_path), READY_NAME)


def packages_stamp() -> tuple:
    """Changes when a package is installed or removed (site-packages changes): imported modules are stale."""
    try:
        st = os.stat(sysconfig.get_paths()["purelib"])
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return ()


# ---------------------------------------------------------------- the base (its own process)


def _refusal(request: dict, imported: frozenset[str], envs: tuple[dict, dict], stamp: tuple) -> str | None:
    """Why this base cannot fork the requested server (None: it can). `envs`: the base's environment as it
    started and after its imports (a value the imports set themselves, a fresh server's imports would too)."""
    missing = [name for name in request["preload"] if name not in imported]
    if missing:
        return f"the warm base did not import {', '.join(missing[:3])}"
    if packages_stamp() != stamp:
        return "the installed packages changed since the warm base started"
    scoped = set(request["runtime_only"]) | RUNTIME_ONLY_ENV
    env = request["env"]
    started, imported_env = envs
    names = set(env) | set(started) | set(imported_env)
    differ = sorted(
        k
        for k in names
        if k not in scoped
        and not k.startswith(OWN_SETTINGS)
        and env.get(k) not in (started.get(k), imported_env.get(k))
    )
    if differ:
        return f"the run's environment differs from the warm base's in {', '.join(differ[:3])}"
    if len(env_block(env)) >= env_room():
        return "the run's environment is larger than the warm base has room to show"
    return None


def _become_server(request: dict, pipes: list[int], closing: list) -> None:
    """In the forked child: the run's warm server on the supervisor's pipes; never returns."""
    code = 1
    try:
        os.setsid()
        for item in closing:
            with contextlib.suppress(OSError):
                item.close()
        null = os.open(os.devnull, os.O_RDWR)
        for fd, target in ((pipes[0], 0), (pipes[1], 1), (null, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(tempfile.gettempdir())
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        show_as([sys.executable, "-m", "hermes_rl.core.daemons.warm.server", *request["preload"]], env)
        code = serve(request["preload"])
    except BaseException:  # noqa: BLE001 — the supervisor sees the pipe close and starts its own server
        pass
    finally:
        os._exit(code)


def _read_request(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """One JSON line and the two pipe ends sent with it, from a process of this user only."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    data, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 2)
    if uid != os.getuid():
        for fd in fds:
            os.close(fd)
        return None, []
    while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        chunk = conn.recv(MAX_REQUEST)
        if not chunk:
            break
        data += chunk
    try:
        request = json.loads(data)
        env, preload, runtime_only = request["env"], request["preload"], request["runtime_only"]
        ok = isinstance(env, dict) and all(isinstance(v, str) for v in env.values()) and len(fds) == 2
        ok = ok and isinstance(preload, list) and isinstance(runtime_only, list)
        ok = ok and all(isinstance(name, str) for name in (*preload, *runtime_only))
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        for fd in fds:
            os.close(fd)
        return None, []
    return request, fds


def _reap() -> None:
    """Collect the forked servers that ended (waited for, not ignored: their CPU, and their children's, then
    counts in this process's, as a server of a supervisor's own counts in the supervisor's)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve_base(path: str, listening: int, preload: list[str]) -> int:
    """Serve on the socket `listening` (bound to `path` and listening since the owner started us: a
    supervisor that asks while the base still imports waits in its backlog for the answer)."""
    own_env = {k: v for k, v in os.environ.items() if k != ROOM_ENV}  # as started: imports may add some
    listener = socket.socket(fileno=listening)
    try:
        for name in preload:
            with contextlib.suppress(Exception):  # a run that needs it starts its own server and says why
                __import__(name)
        imported = frozenset(sys.modules)
        envs = (own_env, {k: v for k, v in os.environ.items() if k != ROOM_ENV})
        stamp = packages_stamp()
        gc.collect()
        gc.freeze()  # forks then skip the imported objects in their collections: no copy of those pages for it
        with open_regular(_ready_file(path), "w"):
            pass
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        selector.register(0, selectors.EVENT_READ)
        while True:
            ready = selector.select(timeout=REAP_EVERY_S)
            _reap()
            for key, _ in ready:
                if key.fileobj == 0:
                    if not os.read(0, 4096):
                        return 0  # the owner is gone
                    continue
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(REQUEST_TIMEOUT_S)
                    try:
                        request, pipes = _read_request(conn)
                        if request is None:
                            conn.sendall(b'{"error": "bad request"}\n')
                            continue
                        try:
                            why = _refusal(request, imported, envs, stamp)
                            if why:
                                conn.sendall(json.dumps({"error": why}).encode() + b"\n")
                            else:
                                pid = os.fork()
                                if pid == 0:
                                    _become_server(request, pipes, [selector, listener, conn])
                                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                        finally:
                            for fd in pipes:
                                os.close(fd)
                    except (OSError, ValueError):  # a client gone mid-answer, a name no environment can hold
                        continue
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # its socket: an owner may end without a word


# ---------------------------------------------------------------- the owner


class WarmBase:
    """The warm base of a long-lived client: its child, with its socket in a private folder."""

    def __init__(self, preload: list[str], env: dict[str, str]):
        self.folder = tempfile.mkdtemp(prefix="hermes-rl-base-")
        self.path = os.path.join(self.folder, SOCKET_NAME)
        # Bound here, so that its address answers from now on, before the child has even started Python.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(self.path)
            listener.listen(16)
            fd = listener.fileno()
            self.proc = spawn_group(
                [sys.executable, "-m", "hermes_rl.core.daemons.warm.base", self.path, str(fd), *preload]
                + [" " * ARGV_ROOM],
                tied=threading.current_thread() is threading.main_thread(),
                session=True,
                pass_fds=(fd,),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=tempfile.gettempdir(),
                env={**env, ROOM_ENV: " " * ENV_ROOM},
            )

    @property
    def ready(self) -> bool:
        """Whether it has imported everything (a supervisor asking before waits for its answer until then)."""
        return os.path.exists(_ready_file(self.path))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_base: WarmBase | None = None
_base_lock = threading.Lock()


def keep(preload: list[str], env: dict[str, str], enabled: bool = True) -> None:
    """Start (or, not `enabled`, end) this process's warm base; the supervisors it starts from now on
    inherit its address."""
    global _base
    with _base_lock:
        if enabled and _base is not None and _base.proc.poll() is not None:
            _base.close()  # it died: a new one
            _base = None
        if enabled and _base is None:
            _base = WarmBase(preload, env)
            os.environ[BASE_ENV] = _base.path
        elif not enabled and _base is not None:
            if os.environ.get(BASE_ENV) == _base.path:
                del os.environ[BASE_ENV]
            _base.close()
            _base = None


# ---------------------------------------------------------------- the borrower (a supervisor)


class BorrowedServer:
    """A warm server forked by the warm base, seen as the Popen of a server of one's own would be: its
    pid, the request pipe (stdin) and the answer pipe (stdout). It is not our child: it is watched and
    signalled through a pidfd, which cannot name another process once it has ended."""

    def __init__(self, pid: int, requests: int, answers: int):
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)  # first: if it is gone already, the caller still owns the pipes
        self.stdin = os.fdopen(requests, "wb", buffering=0)
        self.stdout = os.fdopen(answers, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = -1  # ended; its exit status is its parent's (the base's) to collect
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("warm server", timeout or 0.0)  # None blocks until it ends
            self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            os.close(self._pidfd)


def borrow(
    preload: list[str], env: dict[str, str], runtime_only, wait: bool = True
) -> tuple[BorrowedServer | None, str]:
    """A warm server for a run, forked by the warm base named in $HERMES_RL_WARM_BASE; (None, why) when
    there is none to borrow from or it refused. `wait`: for a base still importing (else none now)."""
    path = os.environ.get(BASE_ENV)
    if not path:
        return None, NO_WARM_BASE
    if not wait and not os.path.exists(_ready_file(path)):
        return None, "the warm base is still importing"
    request = {"preload": list(preload), "env": env, "runtime_only": sorted(runtime_only)}
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    ours = [requests_w, answers_r]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(BORROW_TIMEOUT_S)
            conn.connect(path)
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [requests_r, answers_w])
            os.close(requests_r)
            os.close(answers_w)
            requests_r = answers_w = -1
            reply = b""
            deadline = time.monotonic() + BORROW_TIMEOUT_S
            while not reply.endswith(b"\n") and time.monotonic() < deadline:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
        answer = json.loads(reply) if reply.strip() else {}
        pid = answer.get("pid") if isinstance(answer, dict) else None
        if not isinstance(pid, int):
            why = answer.get("error") if isinstance(answer, dict) else None
            raise ValueError(why or "the warm base gave no answer")
        server = BorrowedServer(pid, requests_w, answers_r)
        ours = []
        return server, ""
    except (OSError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    finally:
        for fd in (requests_r, answers_w, *ours):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


if __name__ == "__main__":
    sys.exit(serve_base(sys.argv[1], int(sys.argv[2]), [name for name in sys.argv[3:] if name.strip()]))
