"""The tinker-local engine against transformers and peft on real architectures (Llama, Qwen2, Qwen3),
with random weights built here (no download): same logits, same LoRA gradients, same greedy
continuations through the KV cache; and folders it cannot serve are refused naming what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.timeout(300)

VOCAB = 96
SHAPES = {
    # GQA, tied embeddings, llama3 RoPE scaling
    "llama": dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 50000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    # q/k/v biases, untied head
    "qwen2": dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    ),
    # per-head q/k RMSNorm, head_dim not hidden/heads
    "qwen3": dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        tie_word_embeddings=False,
    ),
}


def _tokenizer_json(folder: Path) -> None:
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0")).save(str(folder / "tokenizer.json"))


def build(model_type: str, folder: Path):
    """A random-weight model of `model_type` saved as a Hugging Face folder; returns the transformers model."""
    config = transformers.AutoConfig.for_model(
        model_type, vocab_size=VOCAB, max_position_embeddings=256, eos_token_id=1, **SHAPES[model_type]
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger than the default init, so differences would show in the logits
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0, 0.15)
    model.save_pretrained(folder)
    _tokenizer_json(folder)
    return model


@pytest.fixture(params=list(SHAPES))
def arch(request, tmp_path):
    folder = tmp_path / request.param
    reference = build(request.param, folder)
    from hermes_rl.dataplane.tinker_local.engine import CausalLM

    return request.param, folder, reference, CausalLM(folder)


def test_logits_equal_transformers(arch):
    _, _, reference, lm = arch
    ids = torch.randint(0, VOCAB, (3, 21), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(21).expand(3, 21)
    with torch.no_grad():
        ours = lm.forward(ids, positions)
        theirs = reference(input_ids=ids).logits
    assert theirs.abs().max() > 1.0  # logits large enough for a wrong layer to show
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "masked, shared",
    [(False, False), (True, False), (True, True)],
    ids=["every-position", "loss-positions-only", "a-group-sharing-its-prompt"],
)
def test_lora_gradients_equal_peft(arch, tmp_path, masked, shared):
    """With `masked`, the positions whose loss weight is 0 skip the output head's autograd
    (forward_backward does this for prompt positions): the values and the gradients stay the same.
    With `shared`, rows that begin with one prompt (a GRPO group, two of its completions alike) run it once
    (engine.shared_prefixes): still the same, row by row, as peft running each row whole."""
    from peft import PeftModel
    from safetensors.torch import save_file

    from hermes_rl.dataplane.tinker_local.checkpoints import peft_config, peft_state_dict
    from hermes_rl.dataplane.tinker_local.engine import LORA_ALPHA
    from hermes_rl.dataplane.tinker_local.model_state import TrainModel

    _, folder, reference, lm = arch
    rank = 4
    adapter = lm.new_adapter(rank, lm.lora_modules(True, True, True), seed=1)
    generator = torch.Generator().manual_seed(2)
    adapter = {name: (a, torch.randn(b.shape, generator=generator) * 0.1) for name, (a, b) in adapter.items()}
    adapter_dir = tmp_path / "adapter"
    adapter_dir.mkdir()
    save_file(peft_state_dict(adapter), str(adapter_dir / "adapter_model.safetensors"))
    model = TrainModel("m", "s", str(folder), rank, {}, 1, adapter)
    (adapter_dir / "adapter_config.json").write_text(json.dumps(peft_config(str(folder), model)))

    sequences = [[5, 9, 14, 3, 77, 2, 40], [8, 8, 31, 60]]
    mask = torch.tensor([[0.0] * 3 + [1.0] * 4, [0.0] + [1.0] * 3 + [0.0] * 3])
    if shared:
        from hermes_rl.dataplane.tinker_local.engine import SHARED_PREFIX_TOKENS, shared_prefixes

        prompt = torch.randint(2, VOCAB, (SHARED_PREFIX_TOKENS + 5,), generator=generator).tolist()
        replies = [[7, 3, 11], [7, 3, 11], [40], [9, 60, 2, 2, 71, 5]]
        sequences = [prompt + reply for reply in replies] + sequences
        assert shared_prefixes(sequences, SHARED_PREFIX_TOKENS) == [([0, 1, 2, 3], len(prompt))]
        width = max(map(len, sequences))
        mask = torch.tensor(
            [[0.0] * len(prompt) + [1.0] * len(r) + [0.0] * (width - len(prompt) - len(r)) for r in replies]
        )
        mask = torch.cat(
            (
                mask,
                torch.nn.functional.pad(
                    torch.tensor([[0.0] * 3 + [1.0] * 4, [0.0] + [1.0] * 3 + [0.0] * 3]), (0, width - 7)
                ),
            )
        )
    targets = [torch.tensor(s[1:] + [0]) for s in sequences]
    params = {
        name: (a.clone().requires_grad_(True), b.clone().requires_grad_(True)) for name, (a, b) in adapter.items()
    }
    ours = lm.target_logprobs(sequences, targets, params, LORA_ALPHA / rank, mask.bool() if masked else None)
    (ours * mask).sum().backward()

    peft_model = PeftModel.from_pretrained(reference, adapter_dir, is_trainable=True)
    theirs_total = 0
    for row, (seq, target) in enumerate(zip(sequences, targets, strict=True)):
        logits = peft_model(input_ids=torch.tensor([seq])).logits[0]
        theirs = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]
        torch.testing.assert_close(ours[row, : len(seq)].detach(), theirs.detach(), atol=1e-4, rtol=1e-4)
        theirs_total = theirs_total + (theirs * mask[row, : len(seq)]).sum()
    theirs_total.backward()
    torch.testing.assert_close((ours * mask).sum().detach(), theirs_total.detach(), atol=1e-4, rtol=1e-5)

    peft_grads = {
        name.removeprefix("base_model.model.").replace(".default", ""): param.grad
        for name, param in peft_model.named_parameters()
        if "lora_" in name
    }
    compared = 0
    for name, (a, b) in params.items():
        for which, tensor in (("lora_A", a), ("lora_B", b)):
            theirs = peft_grads[f"{name}.{which}.weight"]
            assert tensor.grad is not None and theirs is not None
            torch.testing.assert_close(tensor.grad, theirs, atol=1e-4, rtol=1e-4)
            compared += 1
    assert compared == 2 * len(params) and any(float(a.grad.abs().max()) > 1e-3 for a, _ in params.values())


def test_forward_backward_trains_only_where_advantages_are_not_zero(arch, tmp_path):
    """Through the server's model state: a batch whose advantages are all 0 (a group that scored the same)
    is accepted and moves nothing; advantages on the completion only (the prompt's are 0) train."""
    import numpy as np

    from hermes_rl.dataplane.tinker_local.model_state import ModelState
    from hermes_rl.dataplane.tinker_local.wire import Datum, ForwardBackwardRequest

    _, folder, _, _ = arch
    state = ModelState(folder, tmp_path / "checkpoints")
    model_id = state.create_model({"session_id": "s", "base_model": str(folder), "lora_config": {"rank": 4}})[
        "model_id"
    ]
    tokens = [5, 9, 14, 3, 77, 2, 40, 8]

    def step(advantages: list[float]) -> dict:
        n = len(tokens) - 1
        datum = Datum(
            tokens=tokens[:-1],
            inputs={
                "target_tokens": np.asarray(tokens[1:], dtype=np.int64),
                "logprobs": np.full(n, -2.0, dtype=np.float32),
                "advantages": np.asarray(advantages, dtype=np.float32),
            },
        )
        request = ForwardBackwardRequest(
            model_id=model_id,
            seq_id=0,
            loss_fn="importance_sampling",
            loss_fn_config={},
            forward_only=False,
            data=[datum],
        )
        state.forward_backward(request)
        return state.optim_step({"model_id": model_id, "adam_params": {"learning_rate": 1e-2}})["metrics"]

    before = {name: t.detach().clone() for name, t in state.model(model_id).tensors().items()}
    assert step([0.0] * 7)["grad_norm"] == 0.0
    after = state.model(model_id).tensors()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert step([0.0] * 4 + [1.0, -0.5, 1.0])["grad_norm"] > 0


def test_greedy_sampling_through_the_cache_equals_transformers_generate(arch):
    """Two prompts of different lengths (left padding), three and two samples from one shared prefill
    each (decoding reads a prompt's keys once for all its samples), greedy: every sample is
    transformers' greedy continuation, and its logprobs are the forward pass's."""
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample

    _, _, reference, lm = arch
    prompts, counts = [[4, 17, 33, 2, 90, 61, 7], [12, 5, 70]], [3, 2]
    specs = [SampleSpec(prompt=p, num_samples=n, max_tokens=9, temperature=0.0) for p, n in zip(prompts, counts)]
    results = sample(lm, specs, None, 1.0)
    for prompt, count, result in zip(prompts, counts, results, strict=True):
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([prompt]), max_new_tokens=9, min_new_tokens=9, do_sample=False, pad_token_id=0
            )[0, len(prompt) :].tolist()
            logits = reference(input_ids=torch.tensor([prompt + expected])).logits[0]
        forward = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(-1, torch.tensor(expected)[:, None])[:, 0]
        assert len(result.sequences) == count
        for seq in result.sequences:
            assert seq.tokens == expected
            torch.testing.assert_close(torch.tensor(seq.logprobs), forward, atol=1e-4, rtol=1e-4)


def test_the_two_level_draw_picks_the_token_one_running_total_over_the_vocabulary_picks():
    """A token is drawn by inverse CDF in two levels (running totals of blocks, then within one block). For
    every uniform it must pick what one running total over the whole vocabulary picks: the first token whose
    running total passes u x the row's total, never a token of weight 0 (leading zero blocks, u = 0, a
    vocabulary that is not whole blocks). Integer weights keep every sum exact, so the two must agree."""
    from hermes_rl.dataplane.tinker_local.decoding import DRAW_BLOCK, _draw

    generator = torch.Generator().manual_seed(0)
    for vocab in (DRAW_BLOCK * 3, DRAW_BLOCK * 2 + 37, 5):
        weights = torch.randint(0, 4, (3, vocab), generator=generator).float()
        weights[1, : min(vocab - 1, DRAW_BLOCK + 3)] = 0  # a row whose first block(s) weigh nothing
        weights[2] = 0
        weights[2, -1] = 2.0  # all the weight on the very last token
        running = weights.cumsum(-1)
        for u in [0.0, 1 - 2**-24] + torch.rand(40, generator=generator).tolist():
            uniform = torch.full((3, 1), u)
            expected = torch.searchsorted(running, uniform * running[:, -1:], right=True)[:, 0]
            drawn = _draw(weights, uniform)
            assert drawn.tolist() == expected.tolist(), (vocab, u)
            assert bool((weights.gather(1, drawn[:, None]) > 0).all())


def test_sampling_with_an_adapter_follows_the_adapted_model_and_its_in_place_updates(arch):
    """Sampling folds the adapter into the weights: greedy samples and their logprobs are the adapted
    model's (its training forward pass, unmerged); an adapter changed in place (an inflight sampler's)
    is sampled as changed, not from the earlier merge."""
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample

    _, _, _, lm = arch
    rank, prompt = 4, [4, 17, 33, 2, 90]
    adapter = lm.new_adapter(rank, lm.lora_modules(True, True, True), seed=3)
    generator = torch.Generator().manual_seed(4)
    adapter = {name: (a, torch.randn(b.shape, generator=generator) * 0.3) for name, (a, b) in adapter.items()}

    def check() -> torch.Tensor:
        seq = sample(lm, [SampleSpec(prompt=prompt, max_tokens=8, temperature=0.0)], adapter, 2.0)[0].sequences[0]
        with torch.no_grad():
            full = prompt + seq.tokens
            logits = lm.forward(torch.tensor([full]), torch.arange(len(full))[None], adapter, 2.0)[0]
        expected = logits[len(prompt) - 1 : -1]
        assert seq.tokens == expected.argmax(-1).tolist()
        forward = torch.log_softmax(expected, -1).gather(-1, torch.tensor(seq.tokens)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(seq.logprobs), forward, atol=1e-4, rtol=1e-4)
        return torch.tensor(seq.logprobs)

    before = check()
    for _, b in adapter.values():
        b.mul_(-1.0)
    assert not torch.allclose(check(), before, atol=1e-3)  # the in-place update is what got sampled


def test_an_adapter_on_part_of_a_fused_projection_is_merged_into_that_part_alone(arch):
    """q/k/v and gate/up run as one matmul each when sampling: an adapter on q and up only must change
    those outputs as the unmerged adapter does, and merging must leave the base weights as they were."""
    _, _, _, lm = arch
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(5))
    positions = torch.arange(13).expand(2, 13)
    partial = [m for m in lm.lora_modules(True, True, False) if m[0].endswith(("q_proj", "up_proj"))]
    adapter = lm.new_adapter(4, partial, seed=6)
    generator = torch.Generator().manual_seed(7)
    adapter = {name: (a, torch.randn(b.shape, generator=generator) * 0.3) for name, (a, b) in adapter.items()}
    with torch.no_grad():
        base_before = lm.forward(ids, positions)
        unmerged = lm.forward(ids, positions, adapter, 2.0)
        merged = lm.forward(ids, positions, weights=lm.merged_weights(adapter, 2.0))
        base_after = lm.forward(ids, positions)
    assert (unmerged - base_before).abs().max() > 0.1  # the adapter matters
    torch.testing.assert_close(merged, unmerged, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(base_after, base_before, atol=0, rtol=0)


def test_samples_that_stop_leave_the_batch_without_disturbing_the_others(arch):
    """A stop token ends some samples early; the rest continue exactly as when sampled alone."""
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample

    _, _, _, lm = arch
    prompt = [4, 17, 33, 2, 90]
    alone = sample(lm, [SampleSpec(prompt=prompt, num_samples=1, max_tokens=12, temperature=0.0)], None, 1.0)
    greedy = alone[0].sequences[0].tokens
    stop_at = greedy[3]
    specs = [
        SampleSpec(prompt=prompt, num_samples=2, max_tokens=12, temperature=0.0, stop_token_ids=frozenset([stop_at])),
        SampleSpec(prompt=[9, 9, 41], num_samples=2, max_tokens=12, temperature=0.0),
    ]
    stopped, other = sample(lm, specs, None, 1.0)
    cut = greedy.index(stop_at) + 1
    assert [s.tokens for s in stopped.sequences] == [greedy[:cut]] * 2
    assert all(s.stop_reason == "stop" for s in stopped.sequences)
    other_alone = sample(lm, [SampleSpec(prompt=[9, 9, 41], max_tokens=12, temperature=0.0)], None, 1.0)
    assert [s.tokens for s in other.sequences] == [other_alone[0].sequences[0].tokens] * 2


def test_requests_that_join_a_running_batch_sample_what_they_sample_alone(tmp_path):
    """Continuous batching at the engine: requests added between steps (prompts of other lengths, the
    batch's cache grown and compacted as they come and the first leaves) get the tokens and logprobs
    they get alone. One architecture: the batch is the same code for all."""
    from hermes_rl.dataplane.tinker_local.decoding import Decoding, SampleSpec, sample
    from hermes_rl.dataplane.tinker_local.engine import CausalLM

    build("llama", tmp_path / "llama")
    lm = CausalLM(tmp_path / "llama")
    specs = [
        SampleSpec(prompt=[4, 17, 33, 2, 90], num_samples=2, max_tokens=4, temperature=0.0),
        SampleSpec(prompt=[9, 41], num_samples=1, max_tokens=10, temperature=0.0),
        SampleSpec(prompt=[7, 7, 7, 7, 7, 7, 7, 12], num_samples=3, max_tokens=10, temperature=1.0, seed=4),
    ]
    alone = [sample(lm, [spec], None, 1.0)[0] for spec in specs]
    run = Decoding(lm, lm.w)
    tickets, finished, joined_at = [], [], {0: 0, 2: 1, 6: 2}  # step -> the request that joins before it
    for step in range(40):
        if step in joined_at:
            tickets += run.add([specs[joined_at[step]]])
        if not run.rows:
            break
        finished += run.step()
    assert sorted(finished) == sorted(tickets) and run.rows == 0
    for ticket, solo in zip(tickets, alone, strict=True):
        together = run.take(ticket)
        assert [s.tokens for s in together.sequences] == [s.tokens for s in solo.sequences]
        for mid, own in zip(together.sequences, solo.sequences, strict=True):
            assert mid.logprobs == pytest.approx(own.logprobs, abs=1e-5)


def _native_decode_or_skip():
    """native_decode's C++ step, built (or loaded) for this test; a machine without a C++ compiler or ninja
    skips, saying so, while a failed build where both exist fails with the compiler's error."""
    import os
    import shutil
    import sysconfig

    from hermes_rl.dataplane.tinker_local import native_decode

    native_decode.start()
    if native_decode.wait(300):
        return native_decode
    tools = shutil.which(os.environ.get("CXX", "c++")) and (
        shutil.which("ninja") or shutil.which("ninja", path=sysconfig.get_path("scripts"))
    )
    if not tools:
        pytest.skip(f"no C++ compiler or ninja here: {native_decode.status()['reason']}")
    pytest.fail(f"the C++ decoding step did not build: {native_decode.status()}")


@pytest.mark.slow  # the first build on a machine takes ~10 s of CPU (README's test command builds nothing)
@pytest.mark.parametrize(
    "model_type, dtype, native",
    [("llama", torch.bfloat16, True), ("qwen2", torch.float32, True), ("qwen3", torch.float32, False)],
    ids=["llama-bf16-packed", "qwen2-biases", "qwen3-runs-python"],
)
def test_decoding_layers_in_cpp_give_the_python_ops_results_bit_for_bit(
    tmp_path, monkeypatch, model_type, dtype, native
):
    """native_decode's C++ layers against the same ops called from Python, through all the attention's
    layouts: prompts of several lengths (the prefix's padding), rows that stop and leave, a request joining
    mid-decode (the suffix's mask, rows padded per prompt). Per-head q/k norms (Qwen3) stay in Python."""
    from hermes_rl.dataplane.tinker_local.decoding import Decoding, SampleSpec
    from hermes_rl.dataplane.tinker_local.engine import CausalLM

    native_decode = _native_decode_or_skip()
    build(model_type, tmp_path / model_type)
    lm = CausalLM(tmp_path / model_type, device="cpu", dtype=dtype)
    specs = [
        SampleSpec(prompt=[4, 17, 33, 2, 90], num_samples=3, max_tokens=9, temperature=1.0, seed=1),
        SampleSpec(prompt=[9, 41], num_samples=2, max_tokens=14, temperature=0.7, seed=2),
        SampleSpec(prompt=[7, 7, 7, 7, 7, 7, 7, 12], num_samples=3, max_tokens=10, temperature=1.0, seed=3),
    ]

    def decode(weights: dict) -> list:
        run = Decoding(lm, weights)
        tickets = run.add(specs[:2])
        for step in range(40):
            if step == 3:
                tickets += run.add(specs[2:])
            if not run.rows:
                break
            run.step()
        return [[(s.tokens, s.logprobs) for s in run.take(ticket).sequences] for ticket in tickets]

    # base weights, an adapter merged into them, the base again: the step's tensors follow the weights given
    adapter = lm.new_adapter(4, lm.lora_modules(True, True, False), seed=0)
    with torch.no_grad():
        for _, b in adapter.values():
            b.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    lm._native = None
    in_cpp = [decode(lm.w), decode(lm.merged_weights(adapter, 8.0)), decode(lm.w)]
    assert (lm._native is not None and lm._native[1] is not None) == native  # where the C++ step ran
    assert in_cpp[0] != in_cpp[1]
    monkeypatch.setattr(native_decode, "op", lambda: None)
    assert [decode(lm.w), decode(lm.merged_weights(adapter, 8.0)), decode(lm.w)] == in_cpp
    assert sum(len(tokens) for request in in_cpp[0] for tokens, _ in request) > 50


def test_a_decoding_build_that_fails_says_why_and_decoding_runs_the_python_ops(tmp_path, monkeypatch):
    import os
    import shutil

    from hermes_rl.dataplane.tinker_local import native_decode
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample
    from hermes_rl.dataplane.tinker_local.engine import CausalLM

    broken = tmp_path / "decode_layers.cpp"
    broken.write_text("this is not C++;\n")
    monkeypatch.setattr(native_decode, "SOURCE", broken)
    monkeypatch.setattr(native_decode, "_build", native_decode._Build())
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    native_decode.start()
    assert not native_decode.wait(120)
    status = native_decode.status()
    assert status["state"] == "unavailable" and status["reason"], status
    if shutil.which(os.environ.get("CXX", "c++")):  # the compiler's own complaint, not ninja's last line
        assert "error" in status["reason"], status
    build("llama", tmp_path / "llama")
    lm = CausalLM(tmp_path / "llama")
    seq = sample(lm, [SampleSpec(prompt=[4, 17], max_tokens=5, temperature=0.0)], None, 1.0)[0].sequences[0]
    assert len(seq.tokens) == 5 and lm._native is None


def test_bfloat16_path_runs_and_trains_float32_lora_masters(tmp_path):
    """The dtype a GPU uses, exercised on the CPU: logits near float32's, LoRA gradients in float32."""
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample
    from hermes_rl.dataplane.tinker_local.engine import CausalLM

    folder = tmp_path / "qwen3"
    build("qwen3", folder)
    full, half = CausalLM(folder, device="cpu"), CausalLM(folder, device="cpu", dtype=torch.bfloat16)
    assert half.describe()["dtype"] == "bfloat16" and full.describe()["dtype"] == "float32"
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(11).expand(2, 11)
    with torch.no_grad():
        reference, approx = full.forward(ids, positions), half.forward(ids, positions)
    assert approx.dtype == torch.float32
    assert float((approx - reference).abs().max()) < 0.05 * float(reference.abs().max())
    adapter = half.new_adapter(4, half.lora_modules(True, True, False), seed=0)
    params = {n: (a.requires_grad_(True), b.requires_grad_(True)) for n, (a, b) in adapter.items()}
    half.target_logprobs([[1, 2, 3, 4]], [torch.tensor([2, 3, 4, 5])], params, 8.0).sum().backward()
    a, b = next(iter(params.values()))
    assert b.grad is not None and b.grad.dtype == torch.float32 and float(b.grad.abs().max()) > 0
    # Sampling with the adapter (merged into bf16 weights; on a CPU, decoded by oneDNN's packed copies)
    # reports the logprobs the training forward gives the same tokens.
    with torch.no_grad():
        for _, b in adapter.values():
            b.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    seq = sample(half, [SampleSpec(prompt=[1, 2, 3, 4], max_tokens=6, temperature=0.0)], adapter, 8.0)[0].sequences[0]
    with torch.no_grad():
        full_seq = [1, 2, 3, 4] + seq.tokens
        trained = half.target_logprobs([full_seq[:-1]], [torch.tensor(full_seq[1:])], adapter, 8.0)[0, 3:]
    assert seq.logprobs == pytest.approx(trained.tolist(), abs=0.05)
    # Each new adapter version is merged anew; the packed copies of earlier merges go with them (they once
    # piled up to a size bound: ~4 GB of SmolLM2 copies after four GRPO steps).
    spec = SampleSpec(prompt=[1, 2, 3, 4], max_tokens=2, temperature=0.0)
    for _ in range(4):
        with torch.no_grad():
            for _, b in adapter.values():
                b.mul_(1.1)
        sample(half, [spec], adapter, 8.0)
    live = {id(t) for t in [*half.merged_weights(adapter, 8.0).values(), *half.w.values()]}
    stale = [key for key in half._packs if key not in live]
    assert not stale and half._packs, (len(stale), len(half._packs))


def test_folders_the_engine_cannot_serve_are_refused_naming_what_is_missing(tmp_path):
    from hermes_rl.dataplane.tinker_local.model_config import ModelError, read_model_config

    folder = tmp_path / "llama"
    build("llama", folder)
    read_model_config(folder)  # servable as built

    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelError, match="architecture 'gpt2'.*supported: llama, mistral, qwen2, qwen3"):
        read_model_config(gpt2)

    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="no tokenizer.json"):
        read_model_config(folder)

    gguf_only = tmp_path / "gguf"
    gguf_only.mkdir()
    (gguf_only / "config.json").write_text((tmp_path / "llama" / "config.json").read_text())
    (gguf_only / "model.Q4_1.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelError, match="no \\*.safetensors.*model.Q4_1.gguf.*convert"):
        read_model_config(gguf_only)

    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
    (gguf_only / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="RoPE type 'yarn'"):
        read_model_config(gguf_only)


def test_the_compute_dtype_is_bfloat16_only_where_it_pays_and_can_be_forced():
    from hermes_rl.dataplane.tinker_local.engine import (
        CPU_BF16_MIN_PARAMETERS,
        choose_dtype,
        cpu_multiplies_bf16,
    )
    from hermes_rl.dataplane.tinker_local.model_config import ModelError

    cpu, big = torch.device("cpu"), CPU_BF16_MIN_PARAMETERS
    assert choose_dtype(cpu, "auto", 300_000) == torch.float32  # the tiny model: exact logprobs
    assert choose_dtype(cpu, None, big) == (torch.bfloat16 if cpu_multiplies_bf16() else torch.float32)
    assert choose_dtype(torch.device("cuda"), "auto", 300_000) == torch.bfloat16
    assert choose_dtype(cpu, "float32", big) == torch.float32
    assert choose_dtype(cpu, "bfloat16", 1) == torch.bfloat16
    with pytest.raises(ModelError, match="unknown dtype 'half'"):
        choose_dtype(cpu, "half", big)
