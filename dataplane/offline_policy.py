"""A model behind an OpenAI-compatible endpoint, outside any run:

    python -m hermes_rl.dataplane.offline_policy --model-dir DIR [--port 0]
        [--model-path tinker://MODEL_ID/weights/NAME [--checkpoint-from FOLDER | --cloud]]

Prepares DIR if needed (dataplane.models), starts tinker-local on it as a child process, and serves
the base model (no LoRA) through the trainer's own inference server (/v1/completions,
/v1/chat/completions, /generate), so an environment can be tried against real model answers
offline. With --model-path it serves that saved checkpoint instead: a local run's checkpoint folder
(--checkpoint-from) is copied into this server's own checkpoint folder first, so the run's files are
only read; with --cloud no local server starts and the path is sampled on Tinker cloud
(TINKER_API_KEY from the environment). With HERMES_RL_ENDPOINT_KEY in its environment, its clients must send
that key (the trainer's inference server's rule). Prints `offline policy ready on http://127.0.0.1:PORT/v1`
once it answers; stops (and stops its server) on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hermes_rl.core.base.paths import tinker_checkpoint_subpath
from hermes_rl.core.base.secrets import ENDPOINT_KEY_ENV, LOCAL_TINKER_KEY_ENV

from .models import ensure_model
from .tinker_local.model_config import ModelError
from .trainer.inference import Policy, start_server
from .trainer.tokenizer import load_tokenizer

PR_SET_PDEATHSIG = 1
READY_PREFIX = "offline policy ready on "
TINKER_READY_PREFIX = "tinker-local ready on "
# The server's credential, made per process and passed through the environment only (never argv).
LOCAL_KEY = "tml-local-" + secrets.token_urlsafe(24)
TINKER_START_S = 180.0


def start_tinker(model_dir: Path, checkpoint_dir: Path) -> tuple[subprocess.Popen, str]:
    """tinker-local on a free port; (process, base URL) once it is ready."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_rl.dataplane.tinker_local",
            "--port",
            "0",
            "--model-dir",
            str(model_dir),
            "--checkpoint-dir",
            str(checkpoint_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=None,  # its log goes to ours
        text=True,
        env={**os.environ, LOCAL_TINKER_KEY_ENV: LOCAL_KEY},
        # In our process group: whoever ends the group (the inference test) ends the server too; and it
        # dies with us even when we are killed outright (SIGKILL reaches no handler of ours).
        preexec_fn=_die_with_parent(os.getpid()),
    )
    deadline = time.monotonic() + TINKER_START_S
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(TINKER_READY_PREFIX):
            return process, line[len(TINKER_READY_PREFIX) :].strip()
        if time.monotonic() > deadline:
            break
    _stop(process)
    raise RuntimeError(f"tinker-local did not start (exit code {process.poll()}); its log is above")


def _die_with_parent(parent_pid: int):
    def setup() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the guard was in place
            os._exit(70)

    return setup


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


async def serve(
    model_dir: Path, port: int, model_path: str | None = None, checkpoint_from: Path | None = None, cloud: bool = False
) -> int:
    import tinker  # noqa: PLC0415 - tinker imports torch (seconds): after the arguments and the model are checked

    checkpoints = Path(tempfile.mkdtemp(prefix="offline-policy-"))
    process = None
    try:
        if cloud:
            os.environ["TINKER_TELEMETRY"] = "0"  # TINKER_API_KEY (the caller's) and the SDK's own base URL
        else:
            if model_path and checkpoint_from:
                shutil.copytree(checkpoint_from, checkpoints / tinker_checkpoint_subpath(model_path))
            process, url = await asyncio.to_thread(start_tinker, model_dir, checkpoints)
            os.environ.update({"TINKER_BASE_URL": url, "TINKER_API_KEY": LOCAL_KEY, "TINKER_TELEMETRY": "0"})
        service = tinker.ServiceClient()
        if model_path:
            sampling_client = await service.create_sampling_client(model_path=model_path)
        else:
            sampling_client = await service.create_sampling_client(base_model=str(model_dir))
        policy = Policy(load_tokenizer(str(model_dir)), str(model_dir))
        policy.set_client(sampling_client, 0)
        # the key its caller made and passed in the environment: the caller's requests carry it
        runner = await start_server(policy, "127.0.0.1", port, os.environ.get(ENDPOINT_KEY_ENV) or None)
        bound = runner.addresses[0][1]
        print(f"{READY_PREFIX}http://127.0.0.1:{bound}/v1", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        while not stop.is_set() and (process is None or process.poll() is None):
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass
        await runner.cleanup()
        return 0 if stop.is_set() else 1  # tinker-local died under us: say so by the exit code
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(checkpoints, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_rl.dataplane.offline_policy", description=__doc__)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-path", help="a saved checkpoint to serve (tinker://MODEL_ID/weights/NAME)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint-from", type=Path, help="the local folder of --model-path (a local run's)")
    source.add_argument("--cloud", action="store_true", help="sample --model-path on Tinker cloud")
    args = parser.parse_args(argv)
    if args.cloud:  # the model is Tinker's: its tokenizer is what this machine needs
        return asyncio.run(serve(args.model_dir, args.port, args.model_path, cloud=True))

    try:
        model_dir = ensure_model(
            args.model_dir, lambda stage, fraction: print(f"model: {stage} ({fraction:.0%})", flush=True)
        )
    except ModelError as exc:
        print(f"offline policy: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(model_dir, args.port, args.model_path, args.checkpoint_from))


if __name__ == "__main__":
    sys.exit(main())
