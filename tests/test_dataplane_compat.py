"""What the data plane relies on from Python and uvicorn beyond their documented API: these fail loudly when a
release changes it (dataplane/compat.py; the signal handling in dataplane/tinker_local/__main__.py)."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_private_exit_hooks_exist():
    assert callable(getattr(threading, "_shutdown", None)), "threading._shutdown is gone: see dataplane/compat.py"
    assert callable(getattr(atexit, "_run_exitfuncs", None)), "atexit._run_exitfuncs is gone: see dataplane/compat.py"


def test_exit_now_joins_threads_runs_exit_hooks_and_skips_teardown():
    child = _python("""
        import atexit, concurrent.futures, threading, time
        from hermes_rl.dataplane import exit_now

        def slow():
            time.sleep(0.3)
            print("thread joined", flush=True)

        threading.Thread(target=slow).start()
        pool = concurrent.futures.ThreadPoolExecutor(1)
        pool.submit(lambda: print("pool task ran", flush=True))
        atexit.register(lambda: print("atexit ran", flush=True))

        class Teardown:
            def __del__(self):
                print("module teardown ran", flush=True)

        keep = Teardown()
        exit_now(3)
    """)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 3, out
    lines = out.splitlines()
    assert "pool task ran" in lines and "module teardown ran" not in lines, out
    # Threads are joined before the atexit handlers run, as in a normal exit.
    assert lines.index("thread joined") < lines.index("atexit ran"), out


def test_tinker_local_serve_exits_zero_on_sigterm():
    """uvicorn raises SIGTERM again after its shutdown; serve() turns it into a clean stop (exit 0)."""
    child = _python("""
        import signal, socket, sys
        import uvicorn
        from hermes_rl.dataplane.tinker_local.__main__ import serve

        async def app(scope, receive, send):
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})

        class Server(uvicorn.Server):
            async def startup(self, sockets=None):
                await super().startup(sockets=sockets)
                print("ready", flush=True)

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        serve(Server(uvicorn.Config(app, log_level="warning", lifespan="on")), [sock])
        print("served", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
        sys.exit(0)
    """)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.stdout.readline().strip() != "ready":
            assert child.poll() is None, child.stdout.read()
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, out
    assert "served True" in out.splitlines(), out  # and SIGTERM's own handler is back


def test_atroposlib_tokenize_for_trainer_gets_token_ids_under_transformers_5(tiny_model_dir, monkeypatch):
    """What public environments (blackjack, word_hunt) hit: atroposlib's tokenize_for_trainer builds a
    group from apply_chat_template's result; with transformers 5 that is a BatchEncoding the group
    cannot be sent as. In an environment process (env_launch) it is the token ids again."""
    import json

    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
    from transformers import AutoTokenizer
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from hermes_rl.dataplane.compat import chat_template_returns_ids

    # restored after the test: the patch is meant for environment processes only
    monkeypatch.setattr(PreTrainedTokenizerBase, "apply_chat_template", PreTrainedTokenizerBase.apply_chat_template)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    chat = [{"role": "user", "content": "Q: 1+2="}, {"role": "assistant", "content": "3"}]
    assert not isinstance(tokenizer.apply_chat_template(chat), list)  # transformers 5's default
    chat_template_returns_ids()
    chat_template_returns_ids()  # idempotent: wrapped once
    out = tokenize_for_trainer(tokenizer, chat)
    assert isinstance(out["tokens"], list) and all(isinstance(t, int) for t in out["tokens"])
    assert tokenizer.decode(out["tokens"]).endswith("3\n")
    json.dumps(out)  # what failed before
    assert not isinstance(tokenizer.apply_chat_template(chat, return_dict=True), list)  # an explicit dict stays


LOGS_TABLES = """
import tempfile, time
import wandb  # W&B makes its media folder when imported
from wandb.sdk.data_types._private import MEDIA_TMP
tables = [tempfile.TemporaryDirectory() for _ in range(3)]  # as W&B makes one per rollouts table it logs
print("up", MEDIA_TMP.name, *[t.name for t in tables], flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(120)
def test_an_environment_stopped_by_sigterm_leaves_no_temporary_folders(tmp_path):
    """The supervisor stops an environment with SIGTERM, whose default action skips a normal exit's
    clean-up: every W&B table folder of a run stayed in /tmp (~300 for one 800-step run). env_launch
    removes them first, and the process still ends by SIGTERM, as the supervisor reports it."""
    (tmp_path / "tables_env.py").write_text(LOGS_TABLES)
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(own_tmp), "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_rl.dataplane.env_launch", str(tmp_path / "tables_env.py")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["up"] and len(line) == 5, line
        assert all(os.path.isdir(folder) and folder.startswith(str(own_tmp)) for folder in line[1:])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert not any(os.path.exists(folder) for folder in line[1:])
    assert os.listdir(own_tmp) == [], os.listdir(own_tmp)


def test_an_environment_losing_the_finished_trainer_logs_the_runs_end_not_an_error(tmp_path, monkeypatch, caplog):
    """A completed run's merged log ended with a red `ERROR … Error in collect_trajectories` (the
    environment still sampling while the trainer's server shut down): after results.json it is INFO, saying
    what happened; before it, a lost server stays an error. (In this process: env_launch imports
    transformers, seconds.)"""
    import logging

    from hermes_rl.dataplane import env_launch

    monkeypatch.setenv(env_launch.RUN_DIR_VAR, str(tmp_path))
    root = logging.getLogger()
    before = list(root.filters)
    env_launch.quiet_end_of_run()
    try:
        with caplog.at_level(logging.INFO):
            logging.error("Error in collect_trajectories: Cannot connect to host 127.0.0.1:1")  # mid-run
            (tmp_path / "results.json").write_text("{}")  # the trainer finished its last step
            logging.error("Error in collect_trajectories: Cannot connect to host 127.0.0.1:1")  # its server goes
    finally:
        root.filters[:] = before
    first, second = caplog.records[-2:]
    assert first.levelname == "ERROR" and first.getMessage().startswith("Error in collect_trajectories")
    assert second.levelname == "INFO" and second.getMessage() == (
        "the trainer has finished: a rollout in flight was dropped (Cannot connect to host 127.0.0.1:1)"
    )
