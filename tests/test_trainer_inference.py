"""The trainer's OpenAI endpoints answer in OpenAI's shapes (one response builder serves both), without a
model: a fake policy samples."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from hermes_rl.dataplane.trainer.inference import Policy, build_app  # noqa: E402


class CharTokenizer:
    chat_template = None

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


class FakePolicy(Policy):
    async def sample(self, prompt_tokens, n, params):
        self.params = params
        return [{"tokens": [104, 105], "logprobs": [-0.1, -0.2], "text": "hi", "finish_reason": "stop"}] * n


def _post(path: str, body: dict) -> tuple[int, dict, FakePolicy]:
    policy = FakePolicy(CharTokenizer(), "tiny")
    policy.sampling_client = object()

    async def go():
        async with TestClient(TestServer(build_app(policy))) as client:
            response = await client.post(path, json=body)
            return response.status, await response.json()

    status, data = asyncio.run(go())
    return status, data, policy


def test_completions_shape():
    status, data, _ = _post("/v1/completions", {"prompt": "ab", "n": 2})
    assert status == 200
    assert data["id"].startswith("cmpl-") and data["object"] == "text_completion" and data["model"] == "tiny"
    assert [c["index"] for c in data["choices"]] == [0, 1]
    assert data["choices"][0] == {
        "index": 0,
        "text": "hi",
        "finish_reason": "stop",
        "logprobs": {
            "tokens": ["h", "i"],
            "token_logprobs": [-0.1, -0.2],
            "token_ids": [104, 105],
            "top_logprobs": None,
            "text_offset": None,
        },
    }
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}


def test_chat_completions_shape():
    messages = [{"role": "user", "content": "x"}]
    status, data, policy = _post("/v1/chat/completions", {"messages": messages, "max_completion_tokens": 7})
    assert status == 200
    assert data["id"].startswith("chatcmpl-") and data["object"] == "chat.completion"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "finish_reason": "stop",
            "logprobs": {
                "content": [
                    {"token": "h", "logprob": -0.1, "bytes": None, "top_logprobs": []},
                    {"token": "i", "logprob": -0.2, "bytes": None, "top_logprobs": []},
                ]
            },
        }
    ]
    prompt = len("user: x\nassistant:")
    assert data["usage"] == {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
    assert policy.params["max_tokens"] == 7


def test_bad_requests_are_400():
    assert _post("/v1/completions", {"prompt": 3})[0] == 400
    assert _post("/v1/chat/completions", {"messages": [], "n": 1})[0] == 400
    assert _post("/v1/chat/completions", {"messages": [{"role": "user"}], "stream": True})[0] == 400
