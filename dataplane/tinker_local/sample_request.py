"""An asample request read into a SampleSpec (every field checked against the served model), and its
share of a sampling batch's KV-cache budget. Pure functions of the request and the model's limits: the HTTP thread
validates with them before the worker thread samples."""

from __future__ import annotations

import numpy as np

from .decoding import SampleSpec
from .engine import CausalLM
from .wire import UserError, number

MAX_SAMPLES_PER_REQUEST = 1024
SAMPLE_CACHE_BYTES = 2 * 1024**3  # the KV cache one sampling batch may use


def check_tokens(tokens, what: str, vocab_size: int) -> None:
    if tokens and (min(tokens) < 0 or max(tokens) >= vocab_size):
        raise UserError(f"{what}: token ids must be in [0, {vocab_size})")


def parse_spec(request: dict, lm: CausalLM) -> SampleSpec:
    """The request's prompt, sampling params and logprob options as a SampleSpec; raises UserError."""
    if request.get("record_stability_info"):
        raise UserError(
            "record_stability_info is not available locally: tinker-local records no stability "
            "information (it serves no stable_reinforce loss)"
        )
    prompt: list[int] = []
    for chunk in (request.get("prompt") or {}).get("chunks") or []:
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise UserError("only text prompts are supported by tinker-local")
        prompt.extend(number(t, "prompt token", 0, 2**31 - 1, integer=True) for t in chunk.get("tokens") or [])
    if not prompt:
        raise UserError("the prompt is empty")
    check_tokens(prompt, "prompt", lm.vocab_size)
    params = request.get("sampling_params") or {}
    num_samples = number(request.get("num_samples", 1), "num_samples", 1, MAX_SAMPLES_PER_REQUEST, integer=True)
    room = lm.max_positions - len(prompt)
    if room < 1:
        raise UserError(f"the prompt has {len(prompt)} tokens; the model's context is {lm.max_positions}")
    max_tokens = params.get("max_tokens")
    max_tokens = room if max_tokens is None else number(max_tokens, "sampling_params.max_tokens", 1, room, integer=True)
    stop = params.get("stop")
    stop_ids, stop_strings = set(lm.eos_token_ids), ()
    if stop is not None:
        items = [stop] if isinstance(stop, str) else list(stop)
        if not items:
            stop_ids = set()  # [] disables every stop, EOS included
        elif all(isinstance(item, str) for item in items):
            stop_strings = tuple(item for item in items if item)
        elif all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            stop_ids |= set(items)
        else:
            raise UserError("sampling_params.stop must be a string, a list of strings or a list of token ids")
    temperature = number(params.get("temperature", 1.0), "sampling_params.temperature", 0, 100)
    top_p = number(params.get("top_p", 1.0), "sampling_params.top_p", 0, 1, low_open=True)
    top_k = number(params.get("top_k", -1), "sampling_params.top_k", -1, 2**31 - 1, integer=True)
    if top_k == 0:
        raise UserError("sampling_params.top_k must be -1 (no limit) or at least 1, got 0")
    last_n = request.get("prompt_logprobs_last_n")
    if last_n is not None:
        if len(prompt) < 2:
            raise UserError("prompt_logprobs_last_n needs a prompt of 2+ tokens")
        last_n = number(last_n, "prompt_logprobs_last_n", 1, len(prompt) - 1, integer=True)
    target_ids, target_csr = _target_prompt_ids(request.get("target_prompt_logprobs"), len(prompt), lm.vocab_size)
    alt_k = number(request.get("prompt_alt_tokens_k") or 0, "prompt_alt_tokens_k", 0, 2**31 - 1, integer=True)
    if alt_k and (len(prompt) < 2 or not 0 < alt_k <= MAX_SAMPLES_PER_REQUEST):
        raise UserError(
            f"prompt_alt_tokens_k needs a prompt of 2+ tokens and 1..{MAX_SAMPLES_PER_REQUEST} draws, got {alt_k}"
        )
    spec = SampleSpec(
        prompt=prompt,
        num_samples=num_samples,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        stop_token_ids=frozenset(stop_ids),
        stop_strings=stop_strings,
        seed=None
        if params.get("seed") is None
        else number(params["seed"], "sampling_params.seed", -(2**63), 2**64 - 1, integer=True),
        prompt_logprobs=bool(request.get("prompt_logprobs")),
        prompt_logprobs_last_n=last_n,
        topk_prompt_logprobs=number(
            request.get("topk_prompt_logprobs") or 0, "topk_prompt_logprobs", 0, 1024, integer=True
        ),
        topk_sample_logprobs=number(
            request.get("topk_sample_logprobs") or 0, "topk_sample_logprobs", 0, 1024, integer=True
        ),
        target_prompt_ids=target_ids,
        target_prompt_csr=target_csr,
        prompt_alt_tokens_k=alt_k,
    )
    return spec


def _target_prompt_ids(tensor: dict | None, prompt_length: int, vocab_size: int):
    """A target_prompt_logprobs TensorData (dense or CSR, int64 [len(prompt) - 1, K]) as dense rows
    with -1 where nothing is requested, plus the CSR layout to answer in."""
    if tensor is None:
        return None, None
    shape = list(tensor.get("shape") or [])
    if len(shape) != 2 or shape[0] != prompt_length - 1 or shape[0] < 1 or shape[1] < 1:
        raise UserError(
            f"target_prompt_logprobs must have shape [len(prompt) - 1, K] = [{prompt_length - 1}, K], got {shape}"
        )
    values = [int(v) for v in tensor.get("data") or []]
    crow, cols = tensor.get("sparse_crow_indices"), tensor.get("sparse_col_indices")
    if crow is not None:
        crow, cols = [int(c) for c in crow], [int(c) for c in cols or []]
        if len(crow) != shape[0] + 1 or len(cols) != len(values) or crow[-1] != len(values):
            raise UserError("target_prompt_logprobs: malformed sparse CSR tensor")
        dense = np.full(shape, -1, dtype=np.int64)
        for row in range(shape[0]):
            dense[row, cols[crow[row] : crow[row + 1]]] = values[crow[row] : crow[row + 1]]
    else:
        if len(values) != shape[0] * shape[1]:
            raise UserError(f"target_prompt_logprobs: {len(values)} values do not fill shape {shape}")
        dense = np.asarray(values, dtype=np.int64).reshape(shape)
    requested = dense[dense >= 0]
    if requested.size and int(requested.max()) >= vocab_size:
        raise UserError(f"target_prompt_logprobs: token ids must be in [0, {vocab_size}) or -1")
    rows = tuple(tuple(int(v) for v in row) for row in dense.tolist())
    return rows, (None if crow is None else (crow, cols))


def cache_bytes(spec: SampleSpec, lm: CausalLM) -> int:
    """The most KV cache a request's rows take while they decode (its prompt and every token, per sample)."""
    per_token = lm.n_layers * 2 * lm.n_kv * lm.head_dim * lm.w["model.norm.weight"].itemsize
    return spec.num_samples * (len(spec.prompt) + spec.max_tokens) * per_token
