"""Fixtures for the agent-tool tests: a real Atropos environment, a tiny local tokenizer, and a small
OpenAI-compatible server (the protocol OpenRouter and the trainer speak) whose answers we control.

The environment is a user environment in the test's $HERMES_HOME: single-digit addition, scored
1.0 for the exact sum and 0.0 otherwise, so accuracy is exact arithmetic on what the server returns.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ARITH_ENV_NAME = "tool_arith"

ARITH_ENV_SOURCE = '''
"""Single-digit addition for the agent-tool tests: 1.0 for the exact sum, else 0.0."""

import random
import re

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import APIServerConfig


class ToolArithEnv(BaseEnv):
    name = "tool_arith"

    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
        env = BaseEnvConfig(tokenizer_name="unset", group_size=4, use_wandb=False, total_steps=10,
                            batch_size=8, max_token_length=32)
        server = APIServerConfig(model_name="unset", base_url="http://127.0.0.1:9/v1", api_key="unset",
                                 server_type="openai", health_check=False)
        return env, [server]

    async def setup(self):
        self.rng = random.Random(0)

    async def get_next_item(self):
        a, b = self.rng.randint(0, 4), self.rng.randint(0, 4)
        return (f"Q: {a}+{b}=\\nA:", a + b)

    async def collect_trajectories(self, item):
        # Like the project's environments: through ManagedServer (token ids for training).
        prompt, answer = item
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.completion(prompt=prompt, n=self.config.group_size, max_tokens=8)
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[])
        for node in nodes:
            text = node.full_text[len(prompt):]
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            match = re.search(r"-?\\d+", text.split("\\n")[0])
            group["scores"].append(1.0 if match and int(match.group()) == answer else 0.0)
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    ToolArithEnv.cli()
'''


def build_byte_tokenizer(folder: Path) -> Path:
    """A byte-level tokenizer with no merges: encodes any text, built offline in milliseconds."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<|endoftext|>"] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": 4096,
            }
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    )
    return folder


@pytest.fixture(scope="session")
def byte_tokenizer(tmp_path_factory) -> Path:
    return build_byte_tokenizer(tmp_path_factory.mktemp("byte_tokenizer"))


@pytest.fixture
def arith_env(hermes_home, byte_tokenizer) -> str:
    """The test environment installed as a user environment, selected, with a profile whose
    tokenizer is the byte tokenizer (the local profile's model is not built in these tests)."""
    env_dir = hermes_home / "rl" / "environments"
    env_dir.mkdir(parents=True, exist_ok=True)
    (env_dir / "tool_arith.py").write_text(ARITH_ENV_SOURCE)
    profiles = hermes_home / "rl" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "toolset_test.yaml").write_text(
        textwrap.dedent(f"""\
        extends: local
        tokenizer_name: {byte_tokenizer}
        base_model: {byte_tokenizer}
        default_environment: {ARITH_ENV_NAME}
    """)
    )
    from hermes_rl.core.envs import drafts

    drafts.select_environment(ARITH_ENV_NAME, "toolset_test")
    return ARITH_ENV_NAME


# -- a small OpenAI-compatible server ---------------------------------------------------------

_SUM_RE = re.compile(r"(\d+)\s*\+\s*(\d+)\s*=")


class _Answers:
    """Per-model answer policy: always-right, always-wrong, half-right (alternating per completion)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counters: dict[str, int] = {}
        self.requests: list[dict] = []

    def answer(self, model: str, prompt: str) -> str:
        match = _SUM_RE.search(prompt)
        right = int(match.group(1)) + int(match.group(2)) if match else 0
        with self.lock:
            count = self.counters.get(model, 0)
            self.counters[model] = count + 1
        if model == "always-wrong":
            return f" {right + 1}\n"
        if model == "half-right":
            return f" {right}\n" if count % 2 == 0 else f" {right + 3}\n"
        return f" {right}\n"


class OpenAIStub:
    """Speaks /v1/models, /v1/completions and /v1/chat/completions on 127.0.0.1."""

    models = ("always-right", "always-wrong", "half-right")

    def __init__(self):
        self.answers = _Answers()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, model: str, choices: list[dict]):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                head = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": model}
                for c in choices:
                    delta = {"index": c["index"], "delta": {"role": "assistant", "content": c["message"]["content"]}}
                    for choice in (delta, {"index": c["index"], "delta": {}, "finish_reason": "stop"}):
                        self.wfile.write(f"data: {json.dumps(head | {'choices': [choice]})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in stub.models]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                model = body.get("model", "")
                n = int(body.get("n") or 1)
                with stub.answers.lock:
                    stub.answers.requests.append(
                        {"path": self.path, "model": model, "n": n, "authorization": self.headers.get("Authorization")}
                    )
                if self.path.endswith("/chat/completions"):
                    prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
                    choices = [
                        {
                            "index": i,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": stub.answers.answer(model, prompt)},
                        }
                        for i in range(n)
                    ]
                    obj = "chat.completion"
                    if body.get("stream"):  # verifiers' chat program streams: its answer in one delta each
                        self._stream(model, choices)
                        return
                elif self.path.endswith("/completions"):
                    prompt = body.get("prompt", "")
                    prompt = prompt[0] if isinstance(prompt, list) and prompt else prompt
                    choices = [
                        {
                            "index": i,
                            "text": stub.answers.answer(model, str(prompt)),
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                        for i in range(n)
                    ]
                    obj = "text_completion"
                else:
                    self._send(404, {"error": {"message": "not found"}})
                    return
                self._send(
                    200,
                    {
                        "id": "cmpl-test",
                        "object": obj,
                        "created": 0,
                        "model": model,
                        "choices": choices,
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> list[dict]:
        with self.answers.lock:
            return list(self.answers.requests)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def openai_stub():
    stub = OpenAIStub()
    yield stub
    stub.close()


# -- real runs made of small programs (tests/procs), through core.runs.launch ----------------------

PROCS = Path(__file__).resolve().parent / "procs"
SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def sleeper_spec(name: str = "trainer"):
    import sys

    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    return ProcessSpec(
        name=name,
        argv=[sys.executable, "-c", SLEEPER],
        readiness=Readiness(kind="log", pattern="ready", timeout_s=30),
        stop_timeout=3.0,
    )


def completing_spec(steps: int = 3, step_s: float = 0.05):
    import sys

    from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness

    return ProcessSpec(
        name="trainer",
        argv=[
            sys.executable,
            str(PROCS / "complete.py"),
            "--run-dir",
            "{run_dir}",
            "--steps",
            str(steps),
            "--step-s",
            str(step_s),
            "--completion-file",
            "{run_dir}/done",
        ],
        readiness=Readiness(kind="log", pattern="ready", timeout_s=30),
        completes_run=True,
        completion_file="{run_dir}/done",
        stop_timeout=3.0,
    )


def crashing_spec(after: float, code: int = 3):
    import sys

    from hermes_rl.core.daemons.pipeline import ProcessSpec

    return ProcessSpec(
        name="env",
        argv=[sys.executable, str(PROCS / "crash.py"), "--after", str(after), "--code", str(code)],
        stop_timeout=3.0,
    )


def launch_run(specs, total_steps: int = 3, wandb: dict | None = None) -> str:
    from hermes_rl.core import runs

    run = runs.launch(
        specs,
        environment=ARITH_ENV_NAME,
        profile="local",
        total_steps=total_steps,
        wandb=wandb or {"mode": "offline", "project": "hermes-rl-tests", "run_name": "t", "url": None},
    )
    return run["run_id"]


def wait_status(run_id: str, statuses: tuple[str, ...], timeout: float = 30.0) -> dict:
    import time

    from hermes_rl.core import runs

    deadline = time.monotonic() + timeout
    while True:
        run = runs.get_run(run_id, sample=False)
        if run.get("status") in statuses:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(
                f"run {run_id} is {run.get('status')}, not {statuses} after {timeout}s: {run.get('reason')}"
            )
        time.sleep(0.1)


@pytest.fixture
def run_cleanup():
    """Run ids registered here are stopped at the end of the test, whatever happened."""
    started: list[str] = []
    yield started
    from hermes_rl.core import runs
    from hermes_rl.core.base.errors import HermesError

    for run_id in started:
        try:
            if runs.get_run(run_id, sample=False).get("status") not in ("completed", "failed", "stopped"):
                runs.stop_run(run_id, wait=15.0)
        except HermesError:
            pass
