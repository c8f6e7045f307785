"""The trainer's OpenAI endpoints answer in OpenAI's shapes (one response builder serves both), without a
model: a fake policy samples."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from hermes_rl.dataplane.trainer import inference  # noqa: E402
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
        "token_ids": [104, 105],  # as vLLM's return_token_ids gives them (the verifiers bridge trains on them)
    }
    assert data["prompt_token_ids"] == [ord("a"), ord("b")]
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
            "token_ids": [104, 105],
        }
    ]
    prompt = len("user: x\nassistant:")
    assert data["usage"] == {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
    assert policy.params["max_tokens"] == 7


def test_bad_requests_are_400():
    assert _post("/v1/completions", {"prompt": 3})[0] == 400
    assert _post("/v1/chat/completions", {"messages": [], "n": 1})[0] == 400


def test_a_streamed_chat_is_read_by_the_openai_sdk_and_its_tokens_are_handed_out_once_per_session():
    """verifiers' programs stream; what they were given is collected by the trace id they send."""
    openai = pytest.importorskip("openai")
    policy = FakePolicy(CharTokenizer(), "tiny")
    policy.sampling_client = object()

    async def go():
        async with TestClient(TestServer(build_app(policy))) as client:
            sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="k", max_retries=0)
            stream = await sdk.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"X-Session-ID": "trace-1"},
            )
            chunks = [chunk async for chunk in stream]
            await sdk.close()
            taken = await (await client.post("/v1/hermes/sampled", json={"sessions": ["trace-1", "other"]})).json()
            again = await (await client.post("/v1/hermes/sampled", json={"sessions": ["trace-1"]})).json()
            return chunks, taken, again

    chunks, taken, again = asyncio.run(go())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hi" and [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 2
    turn = taken["sessions"]["trace-1"][0]
    assert turn["prompt_ids"] == [ord(c) for c in "user: x\nassistant:"]
    assert (turn["completion_ids"], turn["logprobs"]) == ([104, 105], [-0.1, -0.2])
    assert taken["sessions"]["other"] == [] and again["sessions"]["trace-1"] == []


def test_an_episode_groups_turns_for_one_prompt_are_sampled_as_one_call():
    """verifiers asks once per episode; a group's episodes ask the same at the same moment: one sample call
    (one prefill) serves them, and each episode's session gets its own completion."""
    from types import SimpleNamespace

    class Client:
        calls: list[int] = []

        async def sample(self, prompt, num_samples, sampling_params):
            self.calls.append(num_samples)
            seqs = [SimpleNamespace(tokens=[104 + i], logprobs=[-0.1], stop_reason="stop") for i in range(num_samples)]
            return SimpleNamespace(sequences=seqs)

    policy = Policy(CharTokenizer(), "tiny")
    policy.sampling_client = client = Client()
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}

    async def go():
        async with TestClient(TestServer(build_app(policy))) as http:
            answers = await asyncio.gather(
                *(http.post("/v1/chat/completions", json=body, headers={"X-Session-ID": f"t{i}"}) for i in range(3))
            )
            texts = [(await a.json())["choices"][0]["message"]["content"] for a in answers]
            taken = await (await http.post("/v1/hermes/sampled", json={"sessions": ["t0", "t1", "t2"]})).json()
            return texts, taken["sessions"]

    texts, sessions = asyncio.run(go())
    assert client.calls == [3] and sorted(texts) == ["h", "i", "j"]
    assert sorted(sessions[f"t{i}"][0]["completion_ids"][0] for i in range(3)) == [104, 105, 106]


def test_a_groups_first_turns_wait_for_each_other_and_later_turns_do_not(monkeypatch):
    """The bridge names its group size: a group's first turns, started as processes that come apart on a busy
    machine, are sampled together when the group is all there, whatever their prompts (a card game deals each
    episode its own); a conversation's later turns are sampled as they come."""
    from types import SimpleNamespace

    class Client:
        calls: list[int] = []

        async def sample(self, prompt, num_samples, sampling_params):
            self.calls.append(num_samples)
            seqs = [SimpleNamespace(tokens=[104], logprobs=[-0.1], stop_reason="stop") for _ in range(num_samples)]
            return SimpleNamespace(sequences=seqs)

    policy = Policy(CharTokenizer(), "tiny")
    policy.sampling_client = client = Client()
    # long, so that a group answered without it is plainly answered because the group was all there
    monkeypatch.setattr(inference, "FIRST_TURNS_WAIT_S", 3.0)

    def body(content: str) -> dict:
        return {"messages": [{"role": "user", "content": content}], "max_tokens": 4}

    async def turns(http, prompts: list[str], gap_s: float) -> None:
        async def ask(i: int, prompt: str):
            await asyncio.sleep(i * gap_s)  # each episode's process comes when it gets a core
            headers = {"X-Session-ID": f"t{i}", "X-Hermes-Group-Size": str(len(prompts))}
            return await http.post("/v1/chat/completions", json=body(prompt), headers=headers)

        answers = await asyncio.gather(*(ask(i, p) for i, p in enumerate(prompts)))
        assert all(a.status == 200 for a in answers)

    async def go():
        async with TestClient(TestServer(build_app(policy))) as http:
            started = time.monotonic()
            await turns(http, ["card J", "card J", "card K"], gap_s=0.05)  # 50 ms apart, past the 20 ms window
            assert time.monotonic() - started < 2.0
            first = list(client.calls)
            await turns(http, ["card J, then bet", "card J, then bet", "card K, then bet"], gap_s=0.05)
            return first, client.calls[len(first) :]

    first, later = asyncio.run(go())
    assert sorted(first) == [1, 2]  # one call per prompt, made once the third first turn came
    assert later == [1, 1, 1]  # not held for the group: even two alike, 50 ms apart, go as they come


def test_health_counts_requests_in_flight_and_completions_served():
    """The supervisor reads these from /health: completions served with no scored group delivered means the
    environment drops what it scores; requests in flight mean it still waits on the policy."""
    from types import SimpleNamespace

    release = asyncio.Event()

    class SlowClient:
        async def sample(self, prompt, num_samples, sampling_params):
            await release.wait()
            seq = SimpleNamespace(tokens=[104, 105], logprobs=[-0.1, -0.2], stop_reason="stop")
            return SimpleNamespace(sequences=[seq] * num_samples)

    policy = Policy(CharTokenizer(), "tiny")
    policy.sampling_client = SlowClient()

    async def go():
        async with TestClient(TestServer(build_app(policy))) as client:
            pending = asyncio.ensure_future(client.post("/generate", json={"text": "ab", "sampling_params": {"n": 3}}))
            while policy.in_flight == 0:
                await asyncio.sleep(0.01)
            during = await (await client.get("/health")).json()
            release.set()
            assert (await pending).status == 200
            after = await (await client.get("/health")).json()
            return during, after

    during, after = asyncio.run(go())
    assert (during["requests"], during["in_flight"], during["completions"]) == (1, 1, 0)
    assert (after["requests"], after["in_flight"], after["completions"]) == (1, 0, 3)


def test_the_endpoint_requires_its_key_of_every_client_but_health():
    """With the run's key, OpenAI's own client gets completions only when it sends that key; /health (the
    supervisor's probe) stays open; a refusal says what to send, in OpenAI's error form."""
    import openai

    from hermes_rl.dataplane.trainer.inference import start_server

    policy = FakePolicy(CharTokenizer(), "tiny")
    policy.sampling_client = object()
    key = "hrl-test-" + "k" * 24

    async def go():
        runner = await start_server(policy, "127.0.0.1", 0, key)
        try:
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            good = openai.AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
            chat = await good.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a"}])
            refusals = []
            for wrong in ("EMPTY", key + "x"):
                bad = openai.AsyncOpenAI(base_url=base + "/v1", api_key=wrong, max_retries=0)
                with pytest.raises(openai.AuthenticationError) as refused:
                    await bad.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a"}])
                refusals.append(str(refused.value))
            async with TestClient(TestServer(runner.app)) as plain:
                health = await plain.get("/health")
                sampled = await plain.post("/v1/hermes/sampled", json={"sessions": []})
            return chat, refusals, health.status, sampled.status
        finally:
            await runner.cleanup()

    chat, refusals, health, sampled = asyncio.run(go())
    assert chat.choices[0].message.content == "hi"
    assert all("HERMES_RL_ENDPOINT_KEY" in r and "endpoint.key" in r for r in refusals)
    assert health == 200 and sampled == 401
