"""The trainer's inference server: environments sample from the current policy through it.

Endpoints (127.0.0.1 only):
  GET  /health                 200 once a sampling client exists, else 503: {"status": "ok", "step": N,
                               "model": ..., "requests": R, "completions": C, "in_flight": I,
                               "completion_tokens": T, "sample_s": S, "waiting_for_batch_s": W} (the supervisor
                               records it in health.json: a run whose environment got completions but delivered
                               no scored group, or waits on long ones, says so)
  POST /generate               SGLang's native form, what Atropos' managed server (server_type sglang) calls
  POST /v1/completions         OpenAI completions, with logprobs
  POST /v1/chat/completions    OpenAI chat completions, with logprobs; `stream: true` answers in server-sent
                               events (what verifiers' programs and vf-eval send)
  GET  /v1/models
  POST /v1/hermes/sampled      {"sessions": [id, ...]} -> {"sessions": {id: [turn, ...]}}: the token ids and
                               logprobs sampled for each request that carried `X-Session-ID: id` (verifiers
                               sends its trace id), each turn handed out once, so a verifiers episode trains on
                               exactly the tokens it was given

With a key (start_server's, the run's ENDPOINT_KEY_ENV), every endpoint but /health requires it as
`Authorization: Bearer KEY`.

Every request samples once through the *current* Tinker sampling client with
num_samples=n, so a whole GRPO group costs one round trip to the Tinker server.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hermes_rl.core.base.secrets import ENDPOINT_KEY_ENV, ENDPOINT_KEY_FILE

log = logging.getLogger("trainer.inference")


FINISH_MEMORY = 8192
SESSION_HEADER = "X-Session-ID"  # verifiers' per-rollout header: the trace id, the same on every turn
SESSION_MEMORY = 4096  # sessions whose sampled turns are kept until asked for (oldest forgotten first)
SESSION_TURNS = 1024  # turns kept per session (a runaway episode cannot grow the trainer without bound)
# verifiers plays a group as group_size episodes, each its own request for one completion of the same prompt:
# requests for the same prompt and sampling that arrive this close together are sampled as one (num_samples
# = their sum), as an Atropos group is: one prefill, one round trip to the Tinker server.
COALESCE_S = 0.02
# An episode's first turn asks its group's prompt, but each episode is a process of its own that starts its
# request when it gets a core: on a busy machine a group's first turns come over ~100 ms, not 20. The bridge
# names its group size in this header; a session's first turn then waits until the group's first turns are all
# there (whatever their prompts: a card game deals each episode its own), or FIRST_TURNS_WAIT_S has passed.
# Later turns of a conversation never share a prompt, so they do not wait.
GROUP_HEADER = "X-Hermes-Group-Size"
FIRST_TURNS_WAIT_S = 0.2
SAMPLING_KEYS = ("max_tokens", "max_new_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop")


class SampledTurns:
    """The tokens sampled for each session's requests, in order, until the environment collects them."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, list[dict]] = OrderedDict()

    def add(self, session: str, turn: dict) -> None:
        turns = self._sessions.setdefault(session, [])
        self._sessions.move_to_end(session)
        if len(turns) < SESSION_TURNS:
            turns.append(turn)
        while len(self._sessions) > SESSION_MEMORY:
            self._sessions.popitem(last=False)

    def take(self, sessions: list[str]) -> dict[str, list[dict]]:
        return {s: self._sessions.pop(s, []) for s in sessions}

    def __contains__(self, session: str) -> bool:
        return session in self._sessions


class BadRequest(Exception):
    pass


class Policy:
    """What the handlers need from the trainer: the current sampling client, tokenizer and step."""

    def __init__(self, tokenizer, model_name: str, rescore_tempered: bool = False):
        self.tokenizer = tokenizer
        self.sampled_turns = SampledTurns()
        self._batches: dict[tuple, dict] = {}  # requests waiting to be sampled together (sample_together)
        self._flushing: set[asyncio.Task] = set()
        # Whether a sample at a temperature other than 1 has its logprobs recomputed untempered
        # (compute_logprobs on the client that sampled it): Tinker cloud's sampler may report the
        # tempered distribution's, while the learner's are always untempered, so the importance ratio
        # would not be 1 on-policy. The local server reports untempered ones already (no extra pass).
        self.rescore_tempered = rescore_tempered
        self.model_name = model_name
        self.sampling_client = None
        self.step = 0
        self.requests = 0
        self.completions = 0  # sequences served, over all requests
        self.in_flight = 0  # requests being sampled now
        self.completion_tokens = 0  # tokens sampled for the environments, in all
        self.sample_s = 0.0  # seconds requests spent sampling (overlapping requests each count)
        self.tokens = None  # usage.TokenCounter: the prompt and sampled tokens of every request
        self.waiting_since: float | None = None  # time.monotonic() when the loop began to wait for a batch
        # Finish reason of recent completions by their tokens, for the rollout recorder (bounded).
        self._finish: dict[tuple[int, ...], tuple[str, int]] = {}  # tokens -> (finish reason, policy version)
        self._finish_lock = threading.Lock()

    def waiting_for_batch_s(self) -> float | None:
        since = self.waiting_since
        return None if since is None else round(time.monotonic() - since, 1)

    def finish_reason(self, tokens: list[int]) -> str | None:
        """How the completion with these tokens ended ("stop" or "length"), if served recently."""
        with self._finish_lock:
            known = self._finish.get(tuple(tokens))
        return known[0] if known else None

    def sampled(self, tokens: list[int]) -> tuple[str | None, int | None]:
        """(finish reason, the policy step whose weights sampled it) of a recent completion, else (None, None)."""
        with self._finish_lock:
            return self._finish.get(tuple(tokens)) or (None, None)

    def _remember_finish(self, tokens: list[int], reason: str, version: int = 0) -> None:
        with self._finish_lock:
            self._finish[tuple(tokens)] = (reason, version)
            while len(self._finish) > FINISH_MEMORY:
                del self._finish[next(iter(self._finish))]

    async def sample_together(self, prompt_tokens: list[int], n: int, params: dict, group: int = 0) -> list[dict]:
        """sample(), with concurrent requests for the same prompt and sampling joined into one call (a seeded
        request is sampled alone). `group`: the size of the group whose first turn this is (GROUP_HEADER), 0
        for any other request."""
        if params.get("seed") is not None:
            return await self.sample(prompt_tokens, n, params)
        key = (tuple(prompt_tokens), json.dumps({k: params.get(k) for k in SAMPLING_KEYS}, sort_keys=True))
        loop = asyncio.get_running_loop()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = {"wants": [], "params": params, "first_turns": group > 1}
            batch["timer"] = loop.call_later(FIRST_TURNS_WAIT_S if group > 1 else COALESCE_S, self._flush, key)
        future: asyncio.Future = loop.create_future()
        batch["wants"].append((n, future))
        if group > 1:
            waiting = [k for k, b in self._batches.items() if b["first_turns"]]
            if sum(wanted for k in waiting for wanted, _ in self._batches[k]["wants"]) >= group:  # all here
                for waited in waiting:
                    self._batches[waited]["timer"].cancel()
                    self._flush(waited)
        return await future

    def _flush(self, key) -> None:
        batch = self._batches.pop(key)
        total = sum(n for n, _ in batch["wants"])

        async def run() -> None:
            try:
                samples = await self.sample(list(key[0]), total, batch["params"])
            except BaseException as exc:  # noqa: BLE001 - every waiting request gets the failure
                for _, future in batch["wants"]:
                    if not future.done():
                        future.set_exception(exc)
                return
            for n, future in batch["wants"]:
                mine, samples = samples[:n], samples[n:]
                if not future.done():
                    future.set_result(mine)

        task = asyncio.ensure_future(run())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    def set_client(self, client, step: int) -> None:
        # Requests already in flight keep the client they started with.
        self.sampling_client = client
        self.step = step

    async def sample(self, prompt_tokens: list[int], n: int, params: dict) -> list[dict]:
        from tinker import types  # noqa: PLC0415 - tinker imports torch: loaded by whoever made the client

        client, version = self.sampling_client, self.step
        if client is None:
            raise web.HTTPServiceUnavailable(text='{"error": "policy not ready"}', content_type="application/json")
        stop = params.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        max_tokens = int(params.get("max_tokens") or params.get("max_new_tokens") or 64)
        temperature = params.get("temperature")
        sampling = types.SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if temperature is None else float(temperature),
            top_p=float(params.get("top_p") if params.get("top_p") is not None else 1.0),
            top_k=int(params.get("top_k") if params.get("top_k") is not None else -1),
            stop=list(stop) if stop else None,
            seed=params.get("seed"),
        )
        self.requests += 1
        self.in_flight += 1
        started = time.perf_counter()
        try:
            response = await client.sample(
                prompt=types.ModelInput.from_ints(prompt_tokens), num_samples=int(n), sampling_params=sampling
            )
        finally:
            self.in_flight -= 1
            self.sample_s += time.perf_counter() - started
        self.completions += len(response.sequences)
        self.completion_tokens += sum(len(seq.tokens) for seq in response.sequences)
        logprobs_of = [list(seq.logprobs or [0.0] * len(seq.tokens)) for seq in response.sequences]
        if self.rescore_tempered and sampling.temperature != 1.0:
            logprobs_of = await self._untempered_logprobs(client, prompt_tokens, response.sequences)
        if self.tokens is not None:
            self.tokens.add_sample(len(prompt_tokens), [len(seq.tokens) for seq in response.sequences])
        out = []
        for seq, logprobs in zip(response.sequences, logprobs_of, strict=True):
            tokens = list(seq.tokens)
            finish = "length" if str(seq.stop_reason) == "length" else "stop"
            self._remember_finish(tokens, finish, version)
            out.append(
                {
                    "tokens": tokens,
                    "logprobs": logprobs,
                    "text": self.tokenizer.decode(tokens, skip_special_tokens=True),
                    "finish_reason": finish,
                    "step": version,
                }
            )
        return out

    @staticmethod
    async def _untempered_logprobs(client, prompt_tokens: list[int], sequences) -> list[list[float]]:
        """Each completion token's logprob under the untempered policy that sampled it (one prefill each)."""
        from tinker import types  # noqa: PLC0415 - the same

        async def one(tokens: list[int]) -> list[float]:
            if not tokens:
                return []
            scored = await client.compute_logprobs(types.ModelInput.from_ints(prompt_tokens + tokens))
            return [float(lp) if lp is not None else 0.0 for lp in scored[-len(tokens) :]]

        return list(await asyncio.gather(*(one(list(seq.tokens)) for seq in sequences)))


def _as_int(value, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise BadRequest(f"{name} must be a positive integer")
    return int(value)


def _chat_prompt(tokenizer, messages: list[dict]) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    if getattr(tokenizer, "chat_template", None):
        # transformers 5 returns a dict unless return_dict=False
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, return_dict=False)
    # A tokenizer without a chat template (the tiny local model): a plain transcript.
    lines = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages]
    return "\n".join(lines) + "\nassistant:"


def _encode(policy: Policy, text: str) -> list[int]:
    return list(policy.tokenizer.encode(text, add_special_tokens=True))


async def _json_body(request: web.Request) -> dict:
    try:
        data = await request.json()
    except Exception:
        raise BadRequest("body must be JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    return data


def add_service_routes(routes: web.RouteTableDef, policy: Policy) -> None:
    """GET /health and GET /v1/models: what the supervisor and the clients ask before sampling."""

    @routes.get("/health")
    async def health(request: web.Request):
        if policy.sampling_client is None:
            return web.json_response({"status": "starting", "step": policy.step}, status=503)
        return web.json_response(
            {
                "status": "ok",
                "step": policy.step,
                "model": policy.model_name,
                "requests": policy.requests,
                "completions": policy.completions,
                "in_flight": policy.in_flight,
                "completion_tokens": policy.completion_tokens,
                "sample_s": round(policy.sample_s, 3),
                # how long the training loop has waited for its next batch (None: it is not waiting); the
                # supervisor fails a run that waits while every environment worker has ended
                "waiting_for_batch_s": policy.waiting_for_batch_s(),
            }
        )

    @routes.get("/v1/models")
    async def models(request: web.Request):
        return web.json_response({"object": "list", "data": [{"id": policy.model_name, "object": "model"}]})


def add_native_routes(routes: web.RouteTableDef, policy: Policy) -> None:
    """POST /generate: SGLang's native form (Atropos' managed server)."""

    @routes.post("/generate")
    async def generate(request: web.Request):
        data = await _json_body(request)
        params = dict(data.get("sampling_params") or {})
        if data.get("input_ids") is not None:
            prompt = [int(t) for t in data["input_ids"]]
        elif isinstance(data.get("text"), str):
            prompt = _encode(policy, data["text"])
        else:
            raise BadRequest("give input_ids or text")
        n = _as_int(params.get("n"), "sampling_params.n", 1)
        samples = await policy.sample(prompt, n, params)
        results = [
            {
                "text": s["text"],
                "output_ids": s["tokens"],
                "meta_info": {
                    "output_token_logprobs": [[lp, tok, None] for lp, tok in zip(s["logprobs"], s["tokens"])],
                    "finish_reason": {"type": s["finish_reason"]},
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(s["tokens"]),
                    "weight_version": policy.step,
                },
            }
            for s in samples
        ]
        return web.json_response(results if n > 1 else results[0])


def openai_response(policy: Policy, prompt: list[int], samples: list[dict], *, chat: bool) -> web.Response:
    """The body both OpenAI endpoints answer with: a chat completion (`chat`) or a text completion."""
    choices = []
    for i, s in enumerate(samples):
        pieces = [policy.tokenizer.decode([t]) for t in s["tokens"]]
        if chat:
            output = {"message": {"role": "assistant", "content": s["text"]}}
            logprobs = {
                "content": [
                    {"token": piece, "logprob": lp, "bytes": None, "top_logprobs": []}
                    for piece, lp in zip(pieces, s["logprobs"])
                ]
            }
        else:
            output = {"text": s["text"]}
            logprobs = {
                "tokens": pieces,
                "token_logprobs": s["logprobs"],
                "token_ids": s["tokens"],
                "top_logprobs": None,
                "text_offset": None,
            }
        # token_ids / prompt_token_ids as vLLM's return_token_ids gives them: the verifiers bridge trains on them.
        choices.append(
            {
                "index": i,
                **output,
                "finish_reason": s["finish_reason"],
                "logprobs": logprobs,
                "token_ids": s["tokens"],
            }
        )
    completion = sum(len(s["tokens"]) for s in samples)
    return web.json_response(
        {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": policy.model_name,
            "choices": choices,
            "prompt_token_ids": prompt,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
        }
    )


def add_openai_routes(routes: web.RouteTableDef, policy: Policy) -> None:
    """POST /v1/completions and /v1/chat/completions (the chat's turns remembered per session)."""

    @routes.post("/v1/completions")
    async def completions(request: web.Request):
        data = await _json_body(request)
        prompt = data.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            tokens = _encode(policy, prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            tokens = list(prompt)
        else:
            raise BadRequest("prompt must be a string or a list of token ids")
        n = _as_int(data.get("n"), "n", 1)
        return openai_response(policy, tokens, await policy.sample(tokens, n, data), chat=False)

    @routes.post("/v1/chat/completions")
    async def chat_completions(request: web.Request):
        data = await _json_body(request)
        tokens = _encode(policy, _chat_prompt(policy.tokenizer, data.get("messages")))
        n = _as_int(data.get("n"), "n", 1)
        params = dict(data)
        if params.get("max_tokens") is None and params.get("max_completion_tokens") is not None:
            params["max_tokens"] = params["max_completion_tokens"]
        session = request.headers.get(SESSION_HEADER)
        if session:  # one episode's turn (verifiers): its group's other episodes ask the same, at the same moment
            group = request.headers.get(GROUP_HEADER, "")
            first_turn = session not in policy.sampled_turns
            samples = await policy.sample_together(
                tokens, n, params, int(group) if group.isdigit() and first_turn else 0
            )
            for s in samples:
                policy.sampled_turns.add(
                    session,
                    {
                        "prompt_ids": tokens,
                        "completion_ids": s["tokens"],
                        "logprobs": s["logprobs"],
                        "finish_reason": s["finish_reason"],
                        "step": s.get("step"),
                    },
                )
        else:
            samples = await policy.sample(tokens, n, params)
        if data.get("stream"):
            return await stream_chat(
                request, json.loads(openai_response(policy, tokens, samples, chat=True).text), data
            )
        return openai_response(policy, tokens, samples, chat=True)


def add_session_routes(routes: web.RouteTableDef, policy: Policy) -> None:
    """POST /v1/hermes/sampled: the turns sampled for each verifiers session, handed out once."""

    @routes.post("/v1/hermes/sampled")
    async def sampled(request: web.Request):
        data = await _json_body(request)
        sessions = data.get("sessions")
        if not isinstance(sessions, list) or not all(isinstance(x, str) for x in sessions):
            raise BadRequest("sessions must be a list of session ids")
        return web.json_response({"sessions": policy.sampled_turns.take(sessions)})


@web.middleware
async def _errors(request: web.Request, handler: Callable) -> Any:
    try:
        return await handler(request)
    except BadRequest as exc:
        return web.json_response({"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400)
    except web.HTTPException:
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a sampling failure: tell the caller, keep serving
        log.warning("inference request %s failed: %s", request.path, exc)
        return web.json_response({"error": {"message": str(exc), "type": type(exc).__name__}}, status=500)


def build_app(policy: Policy) -> web.Application:
    routes = web.RouteTableDef()
    for add in (add_service_routes, add_native_routes, add_openai_routes, add_session_routes):
        add(routes, policy)
    app = web.Application(middlewares=[_errors], client_max_size=64 * 1024 * 1024)
    app.add_routes(routes)
    return app


async def stream_chat(request: web.Request, completion: dict, data: dict) -> web.StreamResponse:
    """A chat completion as server-sent events, as OpenAI streams it: each choice's content in one delta, then
    its finish reason, then usage when asked for (`stream_options.include_usage`)."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    events = []
    for choice in completion["choices"]:
        delta = {"role": "assistant", "content": choice["message"]["content"]}
        events.append(head | {"choices": [{"index": choice["index"], "delta": delta, "logprobs": choice["logprobs"]}]})
        events.append(
            head | {"choices": [{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}]}
        )
    if (data.get("stream_options") or {}).get("include_usage"):
        events.append(head | {"choices": [], "usage": completion["usage"]})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in events:
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


# On shutdown, requests still in flight get this long to finish (a completion on a live Tinker server takes
# ~0.1 s), then as long again once cancelled (aiohttp waits twice). Its default, 60 s each, had a trainer
# whose Tinker server died wait on completions that never come, past its stop timeout, until SIGKILLed.
# The environments those completions were for are being stopped too.
SHUTDOWN_GRACE_S = 0.1


def require_key(key: str) -> Callable:
    """Every request but /health carries `Authorization: Bearer KEY` (what OpenAI clients send), else 401 in
    OpenAI's error form."""
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def credential(request: web.Request, handler: Callable) -> Any:
        given = request.headers.get("Authorization", "").encode()
        if request.path == "/health" or hmac.compare_digest(given, expected):
            return await handler(request)
        message = (
            f"missing or wrong API key: this endpoint takes the run's key as a bearer token (the {ENDPOINT_KEY_ENV} "
            f"variable of the run's processes, or the run folder's {ENDPOINT_KEY_FILE})"
        )
        return web.json_response({"error": {"message": message, "type": "invalid_api_key"}}, status=401)

    return credential


async def start_server(policy: Policy, host: str, port: int, key: str | None = None) -> web.AppRunner:
    """The server on host:port; with `key`, every client but /health's must send it (require_key)."""
    app = build_app(policy)
    if key:
        app.middlewares.insert(0, require_key(key))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
