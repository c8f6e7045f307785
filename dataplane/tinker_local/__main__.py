"""TINKER_LOCAL_API_KEY=tml-... python -m hermes_rl.dataplane.tinker_local --host 127.0.0.1 --port PORT \
    --model-dir DIR --checkpoint-dir DIR

Serves the Tinker protocol on 127.0.0.1 until SIGTERM/SIGINT. Logs
`tinker-local ready on http://127.0.0.1:PORT` once it accepts requests (the model finishes
loading in the background; requests that need it wait). `--port 0` picks a free port. Every request
but /healthz must carry $TINKER_LOCAL_API_KEY as X-API-Key: clients set TINKER_API_KEY to that value.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from hermes_rl.core.base.envvar_limits import env_number
from hermes_rl.core.base.errors import BadInput

from .model_config import ModelError, read_model_config

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
THREADS_ENV = "TINKER_LOCAL_THREADS"


def serve(server, sockets: list[socket.socket]) -> None:
    """`server.run` (a uvicorn.Server) with SIGTERM/SIGINT as a stop request, after which we exit 0.

    uvicorn handles both while it serves, then raises them again once it has shut down, for the handlers
    outside it: ours only ask it to stop, which by then is done (and before it serves, it stops at once)."""

    def stop(signum, frame) -> None:
        server.should_exit = True

    outer = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=sockets)
    finally:
        for sig, handler in outer.items():
            signal.signal(sig, handler)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_rl.dataplane.tinker_local", description="Local Tinker-protocol server"
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port to listen on (0: pick a free one)")
    parser.add_argument(
        "--model-dir",
        type=Path,
        required=True,
        help="a Hugging Face model folder (python -m hermes_rl.dataplane.models prepares one)",
    )
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="where checkpoints are written")
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16"),
        default=os.environ.get("TINKER_LOCAL_DTYPE", "auto"),
        help="compute dtype; auto: bfloat16 on a GPU, and on a CPU with native bf16 (AMX, AVX512-BF16) for "
        "models of 50M+ parameters; float32 otherwise (exact logprobs)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads for the model (default $TINKER_LOCAL_THREADS, else 0: one for a tiny "
        "model, every core for a real one); 1 each is cheaper where several runs share the cores",
    )
    parser.add_argument("--log-level", default=os.environ.get("TINKER_LOCAL_LOG_LEVEL", "info"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("tinker_local")

    def fail(message: str) -> int:
        log.error(message)
        return 2

    if args.host not in LOOPBACK:
        return fail(f"--host {args.host!r} refused: tinker-local binds loopback only (127.0.0.1)")
    from .server import CREDENTIAL_ENV, check_api_key  # noqa: PLC0415 - fastapi (0.5 s): after the arguments pass

    api_key = os.environ.get(CREDENTIAL_ENV, "")
    problem = check_api_key(api_key)
    if problem:
        return fail(
            f"{problem}: every local user can reach a loopback port, so clients must prove they are yours. "
            f"Set it in this server's environment (e.g. export {CREDENTIAL_ENV}=tml-$(openssl rand -hex 16)); "
            f"clients send the same value as TINKER_API_KEY"
        )
    if args.threads is None:
        try:
            args.threads = int(env_number(THREADS_ENV, 0, integer=True, maximum=4096, meaning_of_zero="automatic"))
        except BadInput as exc:
            return fail(f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
    if args.threads < 0:
        return fail(f"--threads {args.threads}: give a number of threads, or 0 for automatic")
    model_dir = args.model_dir.expanduser().resolve()

    try:
        read_model_config(model_dir)
    except ModelError as exc:
        return fail(
            f"--model-dir {model_dir} cannot be served: {exc}; prepare it with: "
            f"python -m hermes_rl.dataplane.models --out {model_dir}"
        )
    if ":" in str(model_dir):
        return fail(f"--model-dir {model_dir} contains ':', which the tinker SDK cuts tokenizer ids at")
    checkpoint_dir = args.checkpoint_dir.expanduser().resolve()
    try:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fail(f"--checkpoint-dir {checkpoint_dir} cannot be created: {exc}")

    sock, refusal = _listen(args.host, args.port)
    if sock is None:
        return fail(refusal)
    port = sock.getsockname()[1]
    host = "127.0.0.1" if sock.family == socket.AF_INET else "[::1]"

    import uvicorn  # noqa: PLC0415 - uvicorn and fastapi load after the arguments and the port are checked

    from .server import create_app  # noqa: PLC0415 - the same reason

    exit_code = 0

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started:
                log.info(
                    "tinker-local ready on http://%s:%d (model %s, checkpoints %s)",
                    host,
                    port,
                    model_dir,
                    checkpoint_dir,
                )
                print(f"tinker-local ready on http://{host}:{port}", flush=True)

    def on_fatal(message: str) -> None:
        nonlocal exit_code
        exit_code = 1
        server.should_exit = True

    app = create_app(model_dir, checkpoint_dir, on_fatal, api_key, args.dtype, args.threads)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    server = Server(config)
    serve(server, [sock])
    log.info("tinker-local stopped")
    return exit_code


def _listen(host: str, port: int) -> tuple[socket.socket | None, str]:
    """A listening socket on host:port (before the app and torch load, so clients queue rather than
    fail), or None and why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1" if host == "localhost" else host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None, f"port {port} on {host} is already in use; pick another --port"
        return None, f"cannot bind {host}:{port}: {exc}"
    sock.listen(128)
    return sock, ""


if __name__ == "__main__":
    from .. import exit_now

    exit_now(main())
