"""verifiers' chat program, started warm: the same program, harness and runtime, without a cold Python start
per turn.

verifiers' null harness runs each turn of each seat as a program (its chat client, a PEP 723 script prepared
by uv) in its subprocess runtime. The program's imports (the openai SDK) cost about a CPU-second, which on a
small machine is most of a training step. Here one process per program (the zygote) imports it once; the
runtime still starts every turn as a real process, in its own session, with its own environment, working
folder and descriptors, exactly as verifiers starts it, but the interpreter it runs is a thin launcher that
hands those to the zygote, which forks a child that runs the program's main with them and reports its exit
status. The launcher dies with the runtime's kill of its process group; the child notices (its socket closes)
and ends its own group. Where the zygote is not there, the launcher runs the real interpreter instead.

Run by path beside verifiers_bridge.py, under the taskset's interpreter (stdlib and verifiers only):
`python verifiers_warm.py zygote SCRIPT SOCKET` is the zygote; `warm_chat_program()` is what the bridge calls.
"""

from __future__ import annotations

import array
import asyncio
import builtins
import contextlib
import importlib
import json
import os
import shlex
import signal
import socket
import struct
import sys
import threading
import traceback
from pathlib import Path

LAUNCHER = "hermes-warm-python"
# The launcher: the real interpreter without site (a bare start, ~20 ms), stdlib only. It sends argv, the
# environment and the working folder with its three descriptors, then waits for the child's exit status.
LAUNCHER_SHELL = """#!/bin/sh
exec {real} -S {launcher_py} "$@"
"""
LAUNCHER_SOURCE = """import array, json, os, socket, struct, sys
REAL, SCRIPT, SOCKET = {real!r}, {script!r}, {socket!r}
if sys.argv[1:2] != [SCRIPT]:
    os.execv(REAL, [REAL, *sys.argv[1:]])
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(SOCKET)
except OSError:
    os.execv(REAL, [REAL, *sys.argv[1:]])
body = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))]
conn.sendmsg([struct.pack("!I", len(body)) + body], fds)
status = b""
while len(status) < 4:
    chunk = conn.recv(4 - len(status))
    if not chunk:
        sys.exit(1)
    status += chunk
sys.exit(struct.unpack("!i", status)[0])
"""


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        chunk, ancillary, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not chunk:
            raise EOFError("the launcher went away")
        data += chunk
    return json.loads(data[4:]), list(fds)


def _child(conn: socket.socket, request: dict, fds: list[int], code, learned: Path) -> None:
    """In the forked child: become the process the runtime started, run the program's main, report its status."""

    os.setsid()  # its own group: the launcher's death ends it with everything it started
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote reaps by ignoring it; the program waits on its own
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = (
        open(0, closefd=False),
        open(1, "w", closefd=False),
        open(2, "w", closefd=False),
    )
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])

    def watch() -> None:  # the launcher was killed (the runtime's timeout or stop): end this group too
        try:
            conn.recv(1)
        finally:
            os.killpg(0, 9)

    threading.Thread(target=watch, daemon=True).start()
    known = set(sys.modules)
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": builtins})
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: the status still goes back
            pass
    try:
        conn.sendall(struct.pack("!i", status))
    finally:
        # What the program imported as it ran (its lazy imports): the zygote imports them too, so the next
        # children start with them.
        new = sorted(name for name in set(sys.modules) - known if name.isascii() and " " not in name)
        with contextlib.suppress(OSError):
            with open(learned, "a", encoding="ascii") as handle:
                handle.write("".join(f"{name}\n" for name in new))
        os._exit(status)


def _learn(learned: Path, upto: int) -> int:
    """Import what earlier children imported as they ran (names appended to `learned` since `upto`)."""

    try:
        with open(learned, encoding="ascii", errors="replace") as handle:
            handle.seek(upto)
            names = handle.read()
    except OSError:
        return upto
    imported = False
    for name in dict.fromkeys(names.split()):
        if name not in sys.modules:
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
                imported = True
    if imported:
        _complete_models()
    return upto + len(names)


def _prepare_ssl_contexts() -> None:
    """Each child's first `ssl.create_default_context(cafile=certifi.where())`, which the program's HTTP client
    makes every turn (loading the bundle took ~14 ms of a turn's ~30), is one the zygote made: the zygote never
    uses it, so each child's copy of it (fork) is as new as one it would make. Later calls make their own."""
    import ssl

    make = ssl.create_default_context
    made: dict = {}

    def create_default_context(purpose=ssl.Purpose.SERVER_AUTH, *, cafile=None, capath=None, cadata=None):
        key = (purpose, cafile, capath) if cadata is None and os.getpid() != zygote_pid else None
        context = made.pop(key, None) if key else None
        return context if context is not None else make(purpose, cafile=cafile, capath=capath, cadata=cadata)

    zygote_pid = os.getpid()
    certifi = sys.modules.get("certifi")
    if certifi is not None:
        made[(ssl.Purpose.SERVER_AUTH, certifi.where(), None)] = make(cafile=certifi.where())
    ssl.create_default_context = create_default_context


def _complete_models() -> None:
    """Build the schemas of the pydantic models loaded so far that defer them (the openai SDK's ~650 do): what
    pydantic does on a model's first use, which each child did again for every response it read (~0.1 s here
    builds them all, once)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return
    classes, stack = [], [pydantic.BaseModel]
    while stack:
        for cls in stack.pop().__subclasses__():
            classes.append(cls)
            stack.append(cls)
    for cls in classes:
        if cls.__dict__.get("__pydantic_complete__", True) is False:
            with contextlib.suppress(Exception):  # a model whose references are not there yet stays deferred
                cls.model_rebuild(raise_errors=False)


def zygote(script: str, socket_path: str) -> None:
    source = Path(script).read_text(encoding="utf-8")
    code = compile(source, script, "exec")
    # The program's imports, once: its module body runs without its main (__name__ is not "__main__").
    exec(code, {"__name__": "__hermes_warm__", "__file__": script, "__builtins__": builtins})
    _complete_models()
    _prepare_ssl_contexts()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel

    def orphaned() -> None:  # its standard input is the bridge's pipe: the bridge is gone, so is the zygote
        while os.read(0, 4096):
            pass
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(256)
    learned = Path(socket_path).with_name("imports.txt")
    learned_upto = 0
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            request, fds = _recv_request(conn)
        except (OSError, EOFError, ValueError):
            conn.close()
            continue
        learned_upto = _learn(learned, learned_upto)
        if os.fork() == 0:
            listener.close()
            _child(conn, request, fds, code, learned)
        for fd in fds:
            os.close(fd)
        conn.close()


async def warm_chat_program(folder: Path) -> str | None:
    """Prepare verifiers' null-harness chat program as verifiers does, start its zygote, and point verifiers'
    subprocess runtime at the launcher for it. The zygote's process is returned's owner: it dies with the
    bridge's process group. None when it could not be started (the program then runs cold, as verifiers runs
    it); the reason is on stderr."""

    from verifiers.v1.harnesses.null.harness import NullHarnessConfig
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

    runtime = SubprocessRuntime(SubprocessConfig(), name=f"hermes-warm-{os.getpid()}")
    await runtime.start()
    try:
        argv = await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, NullHarnessConfig().resolved_env, activate=False)
    finally:
        await runtime.teardown()
    real, script = argv
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    socket_path = str(folder / "zygote.sock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    process = await asyncio.create_subprocess_exec(
        real,
        str(Path(__file__).resolve()),
        "zygote",
        script,
        socket_path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=120)
    except TimeoutError:
        line = b""
    if line.strip() != b"ready":
        process.kill()
        sys.stderr.write("hermes-rl: verifiers' chat program could not be started warm; each turn starts it cold\n")
        return None
    # A venv of links: verifiers' runtime puts the interpreter's folder first on PATH and calls its parent
    # VIRTUAL_ENV, so the launcher sits beside links to everything of the program's own venv.
    real_venv = Path(real).parent.parent
    venv = folder / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for entry in [*real_venv.iterdir(), *(real_venv / "bin").iterdir()]:
        if entry.name == "bin":
            continue
        link = venv / entry.relative_to(real_venv)
        if not link.is_symlink():
            link.symlink_to(entry)
    launcher_py = folder / "launcher.py"
    launcher_py.write_text(LAUNCHER_SOURCE.format(real=real, script=script, socket=socket_path))
    launcher = venv / "bin" / LAUNCHER
    launcher.write_text(LAUNCHER_SHELL.format(real=shlex.quote(real), launcher_py=shlex.quote(str(launcher_py))))
    launcher.chmod(0o700)
    SubprocessRuntime._interpreters[script] = str(launcher)
    return str(launcher)


if __name__ == "__main__":
    if sys.argv[1:2] == ["zygote"] and len(sys.argv) == 4:
        zygote(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: verifiers_warm.py zygote SCRIPT SOCKET")
