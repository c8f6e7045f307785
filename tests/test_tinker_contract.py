"""The official tinker SDK (unchanged) against the local Tinker-protocol server, on the real tiny model.

One server per module (starting one costs seconds); every test opens its own ServiceClient
session and training model, so tests do not share training state.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

pytestmark = pytest.mark.timeout(240)

TOY_PROMPT = "Q: 3+4=\nA:"


@pytest.fixture(scope="module")
def server(tinker_local_module):
    return tinker_local_module


def rest_client(server) -> tinker.RestClient:
    """A REST client of this module's server. `tinker.RestClient()` without arguments reuses the
    process-wide holder made from the environment of the first call, which in an xdist worker may be
    an earlier module's server, long stopped."""
    return tinker.RestClient(base_url=server.url, api_key=server.api_key)


@pytest.fixture
def service(server):
    client = tinker.ServiceClient()
    yield client
    client.close("success").result(timeout=30)


@pytest.fixture
def trainer(service, server):
    return service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=7).result(timeout=60)


@pytest.fixture
def tokenizer(trainer):
    return trainer.get_tokenizer()


def sft_datum(tokenizer, prompt: str, answer: str) -> types.Datum:
    """Tinker's convention: inputs are tokens[:-1], targets tokens[1:], weight 1 on the answer."""
    prompt_ids = tokenizer.encode(prompt)
    ids = prompt_ids + tokenizer.encode(answer)
    weights = [0.0] * (len(prompt_ids) - 1) + [1.0] * (len(ids) - len(prompt_ids))
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={"target_tokens": ids[1:], "weights": weights}
    )


def toy_batch(tokenizer) -> list[types.Datum]:
    return [sft_datum(tokenizer, f"Q: {a}+{b}=\nA:", f" {a + b}\n") for a, b in [(3, 4), (1, 2), (0, 4), (2, 2)]]


# ---------------------------------------------------------------------- model and info


def test_create_model_reports_local_tokenizer_and_capabilities(service, server, trainer, tokenizer):
    info = trainer.get_info()
    assert info.model_data.tokenizer_id == str(server.model_dir)
    assert info.lora_rank == 8 and info.is_lora
    # The tokenizer id is the local folder, so it loads with HF_HUB_OFFLINE=1 (set by conftest).
    ids = tokenizer.encode(TOY_PROMPT + " 7\n")
    assert tokenizer.decode(ids) == TOY_PROMPT + " 7\n"
    caps = rest_client(server).get_server_capabilities().result(timeout=30)
    assert [m.model_name for m in caps.supported_models] == [str(server.model_dir)]
    # the real model's shape and where it runs, as a user's status shows them
    assert caps.supported_models[0].max_context_length == 2048 and info.model_data.arch == "llama"
    health = httpx.get(server.url + "/healthz", timeout=30).json()
    assert health["model"]["device"] == "cpu" and health["model"]["dtype"] == "float32"
    assert health["model"]["context_length"] == 2048 and health["model"]["vocab_size"] == 768
    # The folder name is accepted as the base model too.
    other = service.create_lora_training_client(base_model=server.model_dir.name, rank=4).result(timeout=60)
    assert other.model_id != trainer.model_id
    assert other.get_info().lora_rank == 4


# ---------------------------------------------------------------------- forward_backward


def test_cross_entropy_loss_is_weighted_sum_of_target_logprobs(trainer, tokenizer):
    batch = toy_batch(tokenizer)
    out = trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
    assert len(out.loss_fn_outputs) == len(batch)
    expected = 0.0
    for datum, record in zip(batch, out.loss_fn_outputs, strict=True):
        logprobs = record["logprobs"].to_numpy()
        assert logprobs.shape == (datum.model_input.length,)
        assert np.all(logprobs <= 0)
        expected += float(-(logprobs * datum.loss_fn_inputs["weights"].to_numpy()).sum())
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)


def test_importance_sampling_loss_uses_ratio_and_advantages(trainer, tokenizer):
    batch = toy_batch(tokenizer)
    current = trainer.forward(batch, "cross_entropy").result(timeout=60)
    rl_batch, expected = [], 0.0
    for index, (datum, record) in enumerate(zip(batch, current.loss_fn_outputs, strict=True)):
        logprobs = record["logprobs"].to_numpy()
        # Sampler logprobs 0.1 lower than the learner's: ratio exp(0.1) on every token.
        advantages = np.full(logprobs.shape, 0.5 if index % 2 else -1.0, dtype=np.float32)
        rl_batch.append(
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": (logprobs - 0.1).astype(np.float32),
                    "advantages": advantages,
                },
            )
        )
        expected += float(-(math.exp(0.1) * advantages).sum())
    out = trainer.forward_backward(rl_batch, "importance_sampling").result(timeout=60)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)
    assert out.loss_fn_outputs[0]["logprobs"].to_numpy() == pytest.approx(
        current.loss_fn_outputs[0]["logprobs"].to_numpy(), abs=1e-5
    )


def rl_batch_with_offsets(trainer, tokenizer, offsets: list[float], advantages: list[float]):
    """RL data around the learner's current logprobs: sampler logprobs = learner - offset per datum,
    so datum i has ratio exp(offsets[i]) on every token. Returns (batch, learner logprobs)."""
    batch = toy_batch(tokenizer)
    current = trainer.forward(batch, "cross_entropy").result(timeout=60)
    data, learner = [], []
    for datum, record, offset, advantage in zip(batch, current.loss_fn_outputs, offsets, advantages, strict=True):
        logprobs = record["logprobs"].to_numpy()
        learner.append(torch.tensor(logprobs, dtype=torch.float64))
        data.append(
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": (logprobs - offset).astype(np.float32),
                    "advantages": np.full(logprobs.shape, advantage, dtype=np.float32),
                },
            )
        )
    return data, learner


def reference_loss(loss_fn: str, learner, sampler, advantages, config: dict) -> float:
    """The loss sums of https://tinker-docs.thinkingmachines.ai/tinker/losses, computed directly."""
    total = 0.0
    for lp, q, adv in zip(learner, sampler, advantages, strict=True):
        ratio = torch.exp(lp - q)
        if loss_fn == "dro":
            total += float(-(lp * adv - 0.5 * config["beta"] * (lp - q) ** 2).sum())
            continue
        clipped = ratio.clamp(config["clip_low_threshold"], config["clip_high_threshold"])
        if loss_fn == "ppo":
            total += float(-torch.minimum(ratio * adv, clipped * adv).sum())
        else:
            total += float(-(clipped * lp * adv).sum())
    return total


# Ratios exp(0.5)=1.65 (above every upper clip), exp(-0.5)=0.61, exp(0.05)=1.05 (inside), exp(-2)=0.14.
OFFSETS = [0.5, -0.5, 0.05, -2.0]
ADVANTAGES = [1.0, -0.5, 2.0, 1.5]


@pytest.mark.parametrize(
    "loss_fn, config",
    [
        ("ppo", None),
        ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}),
        ("cispo", None),
        ("cispo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
        ("dro", None),
        ("dro", {"beta": 0.5}),
    ],
)
def test_policy_losses_equal_the_documented_definitions(trainer, tokenizer, loss_fn, config):
    from hermes_rl.dataplane.tinker_local.model_state import LOSS_CONFIG_DEFAULTS

    data, learner = rl_batch_with_offsets(trainer, tokenizer, OFFSETS, ADVANTAGES)
    sampler = [torch.tensor(d.loss_fn_inputs["logprobs"].to_numpy(), dtype=torch.float64) for d in data]
    advantages = [torch.tensor(d.loss_fn_inputs["advantages"].to_numpy(), dtype=torch.float64) for d in data]
    expected = reference_loss(loss_fn, learner, sampler, advantages, LOSS_CONFIG_DEFAULTS[loss_fn] | (config or {}))
    out = trainer.forward_backward(data, loss_fn, loss_fn_config=config).result(timeout=60)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    per_token = sum(float(r["elementwise_loss"].to_numpy().sum()) for r in out.loss_fn_outputs)
    assert per_token == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert out.loss_fn_outputs[0]["logprobs"].to_numpy() == pytest.approx(learner[0].numpy(), abs=1e-5)


def test_ppo_clipped_tokens_give_no_gradient_but_cispo_tokens_do(service, server, tokenizer):
    """PPO's min() stops the gradient where the ratio is past the clip in the advantage's direction;
    CISPO keeps it (the clipped ratio only scales log p)."""
    steps = {}
    for loss_fn in ("ppo", "cispo"):
        client = service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=5).result(
            timeout=60
        )
        client.forward_backward(toy_batch(tokenizer), "cross_entropy").result(timeout=60)
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)  # non-zero LoRA B
        data, _ = rl_batch_with_offsets(client, tokenizer, [0.5] * 4, [1.0] * 4)  # ratio 1.65 > 1.2, A > 0
        config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
        client.forward_backward(data, loss_fn, loss_fn_config=config).result(timeout=60)
        steps[loss_fn] = client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    assert steps["ppo"].metrics["grad_norm"] == 0
    assert steps["cispo"].metrics["grad_norm"] > 1e-6


def test_unknown_loss_config_keys_are_refused_by_name(trainer, tokenizer):
    data, _ = rl_batch_with_offsets(trainer, tokenizer, [0.0] * 4, [1.0] * 4)
    with pytest.raises(tinker.RequestFailedError, match=r"\['clip_epsilon'\] are not parameters of 'ppo'"):
        trainer.forward_backward(data, "ppo", loss_fn_config={"clip_epsilon": 0.2}).result(timeout=60)
    with pytest.raises(tinker.RequestFailedError, match="not supported by tinker-local"):
        trainer.forward_backward(data, "gspo").result(timeout=60)


def test_custom_loss_matches_the_builtin_loss_it_reimplements(service, server, tokenizer):
    """forward_backward_custom runs the loss client-side over the server's logprobs; a custom
    weighted negative log-likelihood must give cross_entropy's value and gradient."""
    batch = toy_batch(tokenizer)

    def nll(data, logprobs):
        loss = sum(-(lp * torch.tensor(d.loss_fn_inputs["weights"].to_numpy())).sum() for d, lp in zip(data, logprobs))
        return loss, {"custom_nll": float(loss.detach())}

    steps, values = {}, {}
    for kind in ("builtin", "custom"):
        client = service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=13).result(
            timeout=60
        )
        if kind == "builtin":
            values[kind] = client.forward_backward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"]
        else:
            values[kind] = client.forward_backward_custom(batch, nll).result(timeout=60).metrics["custom_nll"]
        steps[kind] = client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    assert values["custom"] == pytest.approx(values["builtin"], rel=1e-5)
    assert steps["custom"].metrics["grad_norm"] == pytest.approx(steps["builtin"].metrics["grad_norm"], rel=1e-4)


def test_gradients_accumulate_across_forward_backward_calls(service, server, tokenizer):
    batch = toy_batch(tokenizer)

    def client():
        return service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=11).result(timeout=60)

    split, whole = client(), client()
    split.forward_backward(batch[:2], "cross_entropy").result(timeout=60)
    split.forward_backward(batch[2:], "cross_entropy").result(timeout=60)
    split_step = split.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    whole.forward_backward(batch, "cross_entropy").result(timeout=60)
    whole_step = whole.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)

    assert split_step.metrics["accumulated_backward_passes"] == 2
    assert split_step.metrics["grad_norm"] == pytest.approx(whole_step.metrics["grad_norm"], rel=1e-4)
    after_split = split.forward(batch, "cross_entropy").result(timeout=60)
    after_whole = whole.forward(batch, "cross_entropy").result(timeout=60)
    for a, b in zip(after_split.loss_fn_outputs, after_whole.loss_fn_outputs, strict=True):
        assert a["logprobs"].to_numpy() == pytest.approx(b["logprobs"].to_numpy(), abs=1e-5)
    # The step happened: a second optim_step without new gradients reports nothing accumulated.
    assert split.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60).metrics["grad_norm"] == 0


def test_optim_step_lowers_the_loss_on_a_fixed_batch(trainer, tokenizer):
    batch = toy_batch(tokenizer)
    adam = types.AdamParams(learning_rate=5e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.01, grad_clip_norm=5.0)
    losses = []
    for _ in range(10):
        losses.append(trainer.forward_backward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"])
        trainer.optim_step(adam).result(timeout=60)
    # Adam's first step is sign-like and may overshoot; after that the loss falls steadily.
    assert all(later < earlier for earlier, later in zip(losses[2:], losses[3:])), losses
    assert losses[-1] < 0.75 * losses[0], losses


def test_async_forms_train_and_sample(trainer, tokenizer):
    """The trainer's way: submit, then await (from its own event loop)."""
    batch = toy_batch(tokenizer)

    async def run():
        fwd_future = trainer.forward_backward(batch, "cross_entropy")
        step_future = trainer.optim_step(types.AdamParams(learning_rate=1e-2))  # queued behind fwd/bwd
        fwd, step = await fwd_future, await step_future
        sampler = await trainer.save_weights_and_get_sampling_client()
        prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT))
        results = await asyncio.gather(
            *[
                sampler.sample(prompt, 2, types.SamplingParams(max_tokens=4, temperature=1.0, stop=["\n"]))
                for _ in range(3)
            ]
        )
        return fwd, step, results

    fwd, step, results = asyncio.run(run())
    assert fwd.metrics["loss:sum"] > 0 and step.metrics["grad_norm"] > 0
    assert [len(r.sequences) for r in results] == [2, 2, 2]


# ---------------------------------------------------------------------- sampling


def test_sample_logprobs_match_forward_logprobs_at_temperature_1(trainer, tokenizer):
    trainer.forward_backward(toy_batch(tokenizer), "cross_entropy").result(timeout=60)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)  # non-zero LoRA
    sampler = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    prompts = [tokenizer.encode(TOY_PROMPT), tokenizer.encode("Question: Tom has 12 apples.")]
    for prompt in prompts:  # two prompt lengths: left padding must not change anything
        result = sampler.sample(
            types.ModelInput.from_ints(prompt), 4, types.SamplingParams(max_tokens=6, temperature=1.0, stop=[])
        ).result(timeout=60)
        ids = [seq.sequence_id for seq in result.sequences]
        assert len(set(ids)) == 4 and all(isinstance(i, str) and i for i in ids)
        for seq in result.sequences:
            assert len(seq.tokens) == 6 and seq.stop_reason == "length"
            full = prompt + seq.tokens
            datum = types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={"target_tokens": full[1:], "weights": [1.0] * (len(full) - 1)},
            )
            forward = trainer.forward([datum], "cross_entropy").result(timeout=60)
            learner = forward.loss_fn_outputs[0]["logprobs"].to_numpy()[-len(seq.tokens) :]
            assert np.asarray(seq.logprobs) == pytest.approx(learner, abs=1e-4)


def test_sampling_uses_the_saved_snapshot_not_live_weights(trainer, tokenizer):
    prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT + " 7\n"))
    before = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    snapshot_logprobs = before.compute_logprobs(prompt).result(timeout=60)
    batch = toy_batch(tokenizer)
    for _ in range(3):
        trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
        trainer.optim_step(types.AdamParams(learning_rate=5e-2)).result(timeout=60)
    assert before.compute_logprobs(prompt).result(timeout=60) == pytest.approx(snapshot_logprobs, nan_ok=True)
    after = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    trained = after.compute_logprobs(prompt).result(timeout=60)
    assert abs(trained[-2] - snapshot_logprobs[-2]) > 1e-3  # the answer digit moved


def test_inflight_samplers_follow_the_latest_published_weights(trainer, tokenizer):
    prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT + " 7\n"))
    inflight = trainer.save_weights_and_get_sampling_client(kind="inflight").result(timeout=60)
    snapshot = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    first = inflight.compute_logprobs(prompt).result(timeout=60)
    assert snapshot.compute_logprobs(prompt).result(timeout=60) == pytest.approx(first, nan_ok=True)
    batch = toy_batch(tokenizer)
    for _ in range(3):
        trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
        trainer.optim_step(types.AdamParams(learning_rate=5e-2)).result(timeout=60)
    newer = trainer.save_weights_and_get_sampling_client(kind="inflight").result(timeout=60)
    latest = newer.compute_logprobs(prompt).result(timeout=60)
    assert abs(latest[-2] - first[-2]) > 1e-3  # the answer digit moved
    # The first inflight client now samples the published weights; the snapshot keeps its own.
    assert inflight.compute_logprobs(prompt).result(timeout=60) == pytest.approx(latest, nan_ok=True)
    assert snapshot.compute_logprobs(prompt).result(timeout=60) == pytest.approx(first, nan_ok=True)


def test_target_prompt_logprobs_and_prompt_alt_tokens(service, server, tokenizer):
    sampler = service.create_sampling_client(base_model=str(server.model_dir)).result(timeout=60)
    ids = tokenizer.encode(TOY_PROMPT + " 7")
    prompt = types.ModelInput.from_ints(ids)
    params = types.SamplingParams(max_tokens=1, temperature=1.0)
    # Column 0: the prompt's own next token; column 1: token 5 everywhere; last row asks nothing in column 1.
    targets = np.array([[ids[i + 1], 5] for i in range(len(ids) - 1)], dtype=np.int64)
    targets[-1, 1] = -1
    full = sampler.sample(prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=3).result(timeout=60)
    answer = sampler.sample(prompt, 1, params, target_prompt_logprobs=types.TensorData.from_numpy(targets)).result(
        timeout=60
    )
    scored = answer.target_prompt_logprobs.to_numpy()
    assert scored.shape == targets.shape
    assert scored[:, 0] == pytest.approx(np.asarray(full.prompt_logprobs[1:], dtype=np.float32), abs=1e-5)
    assert np.isnan(scored[-1, 1]) and np.all(scored[:-1, 1] < 0)
    top_id, top_lp = full.topk_prompt_logprobs[1][0]  # the best guess after the first token
    best = np.array([[top_id]] + [[-1]] * (len(ids) - 2), dtype=np.int64)
    assert sampler.sample(prompt, 1, params, target_prompt_logprobs=types.TensorData.from_numpy(best)).result(
        timeout=60
    ).target_prompt_logprobs.to_numpy()[0, 0] == pytest.approx(top_lp, abs=1e-5)

    alt = sampler.sample(prompt, 1, params, prompt_alt_tokens_k=4).result(timeout=60).prompt_alt_tokens
    alt_ids, alt_lps = alt.tokens.to_numpy(), alt.logprobs.to_numpy()
    assert alt_ids.shape == alt_lps.shape == (len(ids) - 1, 4)
    assert np.all(alt_lps <= 0)
    # Each draw's logprob is the model's: score the drawn ids of row 2 as targets and compare.
    row2 = np.full((len(ids) - 1, 4), -1, dtype=np.int64)
    row2[2] = alt_ids[2]
    again = sampler.sample(prompt, 1, params, target_prompt_logprobs=types.TensorData.from_numpy(row2)).result(
        timeout=60
    )
    assert again.target_prompt_logprobs.to_numpy()[2] == pytest.approx(alt_lps[2], abs=1e-5)

    with pytest.raises(tinker.BadRequestError, match="record_stability_info is not available locally"):
        stable = service.create_sampling_client(base_model=str(server.model_dir), record_stability_info=True).result(
            timeout=60
        )
        stable.sample(prompt, 1, params).result(timeout=60)


def test_stop_strings_token_ids_and_max_tokens(service, server, tokenizer):
    sampler = service.create_sampling_client(base_model=str(server.model_dir)).result(timeout=60)
    prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT))
    by_string = sampler.sample(prompt, 8, types.SamplingParams(max_tokens=12, temperature=1.0, stop=["\n"])).result(
        timeout=60
    )
    newline = tokenizer.encode("\n")
    by_token = sampler.sample(prompt, 8, types.SamplingParams(max_tokens=12, temperature=1.0, stop=newline)).result(
        timeout=60
    )
    for result in (by_string, by_token):
        for seq in result.sequences:
            text = tokenizer.decode(seq.tokens)
            if seq.stop_reason == "stop":
                assert text.endswith("\n") and text.count("\n") == 1, repr(text)
            else:
                assert len(seq.tokens) == 12 and "\n" not in text
        assert sum(seq.stop_reason == "stop" for seq in result.sequences) >= 6  # the warm-started format
    short = sampler.sample(prompt, 3, types.SamplingParams(max_tokens=1, temperature=0.0)).result(timeout=60)
    assert all(len(s.tokens) == 1 and s.stop_reason == "length" for s in short.sequences)
    assert len({tuple(s.tokens) for s in short.sequences}) == 1  # temperature 0 is greedy
    seeded = [
        sampler.sample(prompt, 4, types.SamplingParams(max_tokens=5, seed=3, stop=["\n"])).result(timeout=60)
        for _ in range(2)
    ]
    assert [s.tokens for s in seeded[0].sequences] == [s.tokens for s in seeded[1].sequences]
    nucleus = sampler.sample(prompt, 6, types.SamplingParams(max_tokens=3, top_k=1, stop=["\n"])).result(timeout=60)
    assert len({tuple(s.tokens) for s in nucleus.sequences}) == 1  # top_k=1 leaves one choice


# ---------------------------------------------------------------------- checkpoints


def test_save_state_and_resume_with_optimizer(service, server, trainer, tokenizer):
    batch = toy_batch(tokenizer)
    trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    saved = trainer.save_state("step-1").result(timeout=60)
    assert saved.path == f"tinker://{trainer.model_id}/weights/step-1"
    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result(timeout=60)
    original = trainer.forward(batch, "cross_entropy").result(timeout=60)
    restored = resumed.forward(batch, "cross_entropy").result(timeout=60)
    assert restored.metrics["loss:sum"] == pytest.approx(original.metrics["loss:sum"], rel=1e-6)
    # Same weights and Adam moments: the next step is identical too.
    for client in (trainer, resumed):
        client.forward_backward(batch, "cross_entropy").result(timeout=60)
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    a = trainer.forward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"]
    b = resumed.forward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"]
    assert a == pytest.approx(b, rel=1e-5)
    with pytest.raises(tinker.RequestFailedError, match="already exists"):
        trainer.save_state("step-1").result(timeout=60)

    sampler_path = trainer.save_weights_for_sampler("final").result(timeout=60).path
    folder = server.checkpoint_dir / trainer.model_id.replace(":", "_") / "sampler_weights" / "final"
    assert (folder / "adapter_model.safetensors").is_file() and (folder / "adapter_config.json").is_file()
    sampler = service.create_sampling_client(model_path=sampler_path).result(timeout=60)
    result = sampler.sample(
        types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT)), 2, types.SamplingParams(max_tokens=4, stop=["\n"])
    ).result(timeout=60)
    assert len(result.sequences) == 2


def test_rest_surface_lists_runs_checkpoints_and_sessions(service, server, trainer, tokenizer):
    rest = rest_client(server)
    trainer.forward_backward(toy_batch(tokenizer), "cross_entropy").result(timeout=60)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    state = trainer.save_state("rest-1").result(timeout=60).path
    sampler_path = trainer.save_weights_for_sampler("rest-s", ttl_seconds=3600).result(timeout=60).path

    run = rest.get_training_run(trainer.model_id).result(timeout=30)
    assert isinstance(run, types.TrainingRun)
    assert (run.training_run_id, run.base_model, run.lora_rank) == (trainer.model_id, str(server.model_dir), 8)
    assert run.last_checkpoint.tinker_path == state and run.last_sampler_checkpoint.tinker_path == sampler_path
    assert rest.get_training_run_by_tinker_path(state).result(timeout=30).training_run_id == trainer.model_id
    runs = rest.list_training_runs(limit=100).result(timeout=30)
    assert trainer.model_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor.total_count >= len(runs.training_runs)

    listed = rest.list_checkpoints(trainer.model_id).result(timeout=30)
    assert {c.tinker_path: c.checkpoint_type for c in listed.checkpoints} == {
        state: "training",
        sampler_path: "sampler",
    }
    assert all(c.size_bytes > 0 for c in listed.checkpoints)
    expiry = {c.tinker_path: c.expires_at for c in listed.checkpoints}
    assert expiry[state] is None and expiry[sampler_path] is not None  # a TTL given at save time is recorded
    mine = rest.list_user_checkpoints().result(timeout=30)
    assert {state, sampler_path} <= {c.tinker_path for c in mine.checkpoints}

    info = rest.get_weights_info_by_tinker_path(state).result(timeout=30)
    assert (info.base_model, info.lora_rank, info.is_lora, info.train_mlp) == (str(server.model_dir), 8, True, True)

    rest.publish_checkpoint_from_tinker_path(state).result(timeout=30)
    rest.set_checkpoint_ttl_from_tinker_path(state, 7200).result(timeout=30)
    record = next(
        c for c in rest.list_checkpoints(trainer.model_id).result(timeout=30).checkpoints if c.tinker_path == state
    )
    assert record.public and record.expires_at is not None
    assert 7000 < (record.expires_at - record.time).total_seconds() < 7400
    rest.unpublish_checkpoint_from_tinker_path(state).result(timeout=30)
    rest.set_checkpoint_ttl_from_tinker_path(state, None).result(timeout=30)
    record = next(
        c for c in rest.list_checkpoints(trainer.model_id).result(timeout=30).checkpoints if c.tinker_path == state
    )
    assert not record.public and record.expires_at is None

    rest.delete_checkpoint_from_tinker_path(sampler_path).result(timeout=30)
    assert [c.tinker_path for c in rest.list_checkpoints(trainer.model_id).result(timeout=30).checkpoints] == [state]
    with pytest.raises(tinker.NotFoundError, match="no checkpoint"):
        rest.delete_checkpoint_from_tinker_path(sampler_path).result(timeout=30)
    with pytest.raises(tinker.BadRequestError, match="no checkpoint"):
        service.create_sampling_client(model_path=sampler_path).result(timeout=60).sample(
            types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=1)
        ).result(timeout=60)

    session = rest.get_session(service.holder.get_session_id()).result(timeout=30)
    assert trainer.model_id in session.training_run_ids
    assert service.holder.get_session_id() in rest.list_sessions(limit=100).result(timeout=30).sessions
    with pytest.raises(tinker.NotFoundError, match="unknown training run"):
        rest.get_training_run("local-missing:train:0").result(timeout=30)


def test_save_weights_external_exports_a_peft_adapter(service, server, trainer, tokenizer):
    from safetensors.numpy import load_file

    trainer.forward_backward(toy_batch(tokenizer), "cross_entropy").result(timeout=60)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    exported = trainer.save_weights_external("export-1").result(timeout=60)
    assert isinstance(exported, types.SaveWeightsExternalResponse)
    assert exported.path == f"tinker://{trainer.model_id}/external_weights/export-1"
    rest = rest_client(server)
    urls = rest.get_external_weights_urls(exported.path).result(timeout=30).urls
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(urls)
    folder = Path(urls["adapter_model.safetensors"][len("file://") :]).parent
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["base_model_name_or_path"]) == ("LORA", 8, str(server.model_dir))
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    assert any(k.endswith("lora_B.weight") and np.abs(v).max() > 0 for k, v in tensors.items())  # trained
    listed = rest.list_checkpoints(trainer.model_id).result(timeout=30).checkpoints
    assert [c.checkpoint_type for c in listed if c.tinker_path == exported.path] == ["external"]
    # The export samples like the sampler checkpoint of the same weights.
    prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT + " 7\n"))
    same = trainer.save_weights_and_get_sampling_client().result(timeout=60).compute_logprobs(prompt).result(timeout=60)
    external = service.create_sampling_client(model_path=exported.path).result(timeout=60)
    assert external.compute_logprobs(prompt).result(timeout=60) == pytest.approx(same, nan_ok=True, abs=1e-5)
    with pytest.raises(tinker.RequestFailedError, match="not an age X25519 recipient"):
        trainer.save_weights_external("export-2", age_encryption_recipients=["age1xyz"]).result(timeout=60)


# ---------------------------------------------------------------------- failures


def test_invalid_requests_fail_fast_with_clear_errors(service, server, trainer, tokenizer):
    batch = toy_batch(tokenizer)
    cases = {
        "unknown base model": lambda: service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result(
            timeout=60
        ),
        "not supported": lambda: trainer.forward_backward(batch, "stable_reinforce").result(timeout=60),
        "target_tokens has shape": lambda: trainer.forward_backward(
            [
                types.Datum(
                    model_input=batch[0].model_input, loss_fn_inputs={"target_tokens": [1, 2], "weights": [1.0, 1.0]}
                )
            ],
            "cross_entropy",
        ).result(timeout=60),
        "unknown model id": lambda: (
            tinker.TrainingClient(
                service.holder, model_seq_id=99, model_id="local-missing:train:0", info=trainer.get_info()
            )
            .optim_step(types.AdamParams(learning_rate=1e-3))
            .result(timeout=60)
        ),
        "unknown or expired sampling session": lambda: (
            tinker.SamplingClient(
                service.holder, sampling_session_id="local-missing:sample:0", base_model=str(server.model_dir)
            )
            .sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2))
            .result(timeout=60)
        ),
    }
    for expected, call in cases.items():
        started = time.monotonic()
        with pytest.raises(Exception, match=expected):
            call()
        assert time.monotonic() - started < 10, f"{expected!r} took {time.monotonic() - started:.1f}s (retries?)"
    # The training client still works after its failed requests.
    assert trainer.forward_backward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"] > 0


def test_calls_with_no_local_meaning_are_refused_naming_the_call(service, server, trainer, tokenizer):
    with pytest.raises(Exception, match="create_model: optimizer 'dimuon' is not available locally"):
        service.create_lora_training_client(
            base_model=str(server.model_dir), rank=4, optimizer=types.DimuonOptimizerConfig()
        ).result(timeout=60)
    trainer.forward_backward(toy_batch(tokenizer), "cross_entropy").result(timeout=60)
    with pytest.raises(tinker.RequestFailedError, match="optim_step: the 'dimuon' optimizer is not available locally"):
        trainer.optim_step(types.DimuonParams(learning_rate=1e-3)).result(timeout=60)
    # The model is unchanged by the refused step and still trains with Adam.
    assert trainer.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=60).metrics["grad_norm"] > 0
    started = time.monotonic()
    with pytest.raises(tinker.NotFoundError, match="tinker-local does not implement GET /api/v1/"):
        tinker.AdminClient().get_audit_log().result(timeout=30)
    assert time.monotonic() - started < 10


def test_heartbeats_and_polls_answer_while_a_long_request_runs(service, server, tokenizer):
    sampler = service.create_sampling_client(base_model=str(server.model_dir)).result(timeout=60)
    prompt = types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT))
    long_request = sampler.sample(prompt, 160, types.SamplingParams(max_tokens=250, stop=[]))
    session_id = service.holder.get_session_id()
    latencies, busy_seen = [], False
    with httpx.Client(base_url=server.url, headers={"X-API-Key": server.api_key}, timeout=10) as http:
        deadline = time.monotonic() + 60
        while not long_request.future().done() and time.monotonic() < deadline:
            started = time.monotonic()
            beat = http.post("/api/v1/session_heartbeat", json={"session_id": session_id})
            latencies.append(time.monotonic() - started)
            assert beat.status_code == 200 and beat.json() == {"type": "session_heartbeat"}
            busy_seen |= http.get("/healthz").json()["worker_busy_s"] > 0.2
            time.sleep(0.05)
    result = long_request.result(timeout=120)
    assert len(result.sequences) == 160 and all(len(s.tokens) == 250 for s in result.sequences)
    assert busy_seen, "the long request never kept the worker busy while heartbeats were sent"
    assert max(latencies) < 1.0, f"heartbeat latencies up to {max(latencies):.2f}s while the worker was busy"


def test_a_real_models_threads_leave_the_cores_other_processes_use(caplog):
    """The server's intra-op threads for a real model (not fixed by --threads) are the cores left free:
    beside a process busy on one of two cores, one thread, and the choice is in the log."""
    import subprocess
    import sys

    from hermes_rl.dataplane.tinker_local.server import ThreadFit

    fit = ThreadFit(cores=2)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(ThreadFit.MIN_WINDOW_S + 0.3)
        with caplog.at_level("INFO", logger="tinker_local"):
            assert fit.choose() == 1
    finally:
        burner.kill()
        burner.wait()
    assert "intra-op threads 1 of 2 cores: other processes want" in caplog.text
    assert fit.choose() == 1  # within the window: the last choice, measured again only after it


def test_a_request_sent_while_a_batch_decodes_joins_it_and_samples_as_it_would_alone(service, server, tokenizer):
    """Continuous batching: a sample request that arrives while a long batch decodes joins that batch at its
    next step (the server counts it) and is answered before the long request ends; with a seed, its samples
    and their logprobs are those it gets alone."""
    sampler = service.create_sampling_client(base_model=str(server.model_dir)).result(timeout=60)
    other = types.ModelInput.from_ints(tokenizer.encode("Question: Tom has 12 apples."))
    seeded = types.SamplingParams(max_tokens=8, temperature=1.0, seed=11, stop=[])
    alone = sampler.sample(other, 3, seeded).result(timeout=60)
    with httpx.Client(base_url=server.url, headers={"X-API-Key": server.api_key}, timeout=10) as http:
        joined_before = http.get("/healthz").json()["sampling"]["joined"]
        long_request = sampler.sample(
            types.ModelInput.from_ints(tokenizer.encode(TOY_PROMPT)), 32, types.SamplingParams(max_tokens=300, stop=[])
        )
        deadline = time.monotonic() + 30
        while http.get("/healthz").json()["sampling"]["rows"] != 32 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the long request decodes
        joined = sampler.sample(other, 3, seeded).result(timeout=60)
        assert not long_request.future().done(), "the short request waited for the long batch to finish"
        assert http.get("/healthz").json()["sampling"]["joined"] == joined_before + 1
    assert all(len(seq.tokens) == 300 for seq in long_request.result(timeout=120).sequences)
    assert [seq.tokens for seq in joined.sequences] == [seq.tokens for seq in alone.sequences]
    for mid, solo in zip(joined.sequences, alone.sequences, strict=True):
        assert np.asarray(mid.logprobs) == pytest.approx(np.asarray(solo.logprobs), abs=1e-4)
