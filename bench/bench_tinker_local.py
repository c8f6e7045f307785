"""Latency of the local Tinker server's operations, through the real tinker SDK.

    .venv/bin/python -m bench.bench_tinker_local [--model-dir DIR] [--repeats 15]   (from the project root:
    it starts the server with the tests' own helper, tests.fixtures_model)

Prints, per operation, the median wall time through the SDK (HTTP + futures) next to the same
work done directly on the in-process backend (the baseline: pure model time), so the protocol
overhead shows as a ratio. Then one GRPO-shaped step — sample 2 prompts x 16 completions,
forward_backward(importance_sampling) on those 32 sequences, optim_step, new sampling client —
and the steps/s that implies. Also: server start-up (launch -> ready line -> model loaded), the
server's CPU per request for a trivial authenticated call and per GRPO-shaped step (on a tiny model the
HTTP stack costs more than the model), and, when the model has to be built, the build time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.fixtures_model import start_tinker_local

ROOT = Path(__file__).resolve().parent.parent
# Before anything imports the Hugging Face or Tinker libraries (here, or in the server it starts).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")

GROUP = 16
PROMPTS = [(3, 4), (1, 2)]


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a built model (default: build one into a temp folder)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--rl-steps",
        type=int,
        default=0,
        help="also run a minimal GRPO loop on the toy task for this many steps per learning rate",
    )
    parser.add_argument("--rl-lrs", default="4e-5,3e-4,1e-3", help="learning rates for --rl-steps")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-tinker-local-"))
    from hermes_rl.dataplane.tiny_model import ensure_model, read_marker

    if args.model_dir is None:
        started = time.perf_counter()
        model_dir = ensure_model(work / "tiny-toy")
        print(
            f"model build: {time.perf_counter() - started:.1f}s wall "
            f"(marker: {read_marker(model_dir)['build_seconds']}s)"
        )
    else:
        model_dir = ensure_model(args.model_dir)
    warm = read_marker(model_dir)["warm_start"]
    print(
        f"warm start: {warm['steps']} steps, p(correct digit) {warm['p_correct_digit']:.2f}, "
        f"mean toy score at T=1: {warm['toy_score_t1']:.3f}"
    )

    launched = time.perf_counter()
    with start_tinker_local(model_dir, work / "checkpoints") as server:
        ready_s = time.perf_counter() - launched
        import httpx

        while not httpx.get(server.url + "/healthz").json()["model_loaded"]:
            time.sleep(0.05)
        loaded_s = time.perf_counter() - launched
        print(f"server start-up: ready line {ready_s:.2f}s, model loaded {loaded_s:.2f}s after launch")
        os.environ.update(server.env())
        request_cpu(server)
        report(model_dir, work, args.repeats, server)
        for lr in (float(x) for x in args.rl_lrs.split(",")) if args.rl_steps else ():
            toy_grpo(model_dir, lr, args.rl_steps)
    return 0


def server_cpu_s(server) -> float:
    """CPU seconds the server process has used so far (user + system, from /proc)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_cpu(server, count: int = 1000) -> None:
    """The server's CPU per request: `count` authenticated calls that do no work (the credential check,
    routing, the JSON body in and out), on one kept-alive connection."""
    import httpx

    headers = {"X-API-Key": server.api_key}
    with httpx.Client(base_url=server.url, headers=headers) as client:
        client.post("/api/v1/session_heartbeat", json={"session_id": "none"})  # connect
        before, started = server_cpu_s(server), time.perf_counter()
        for _ in range(count):
            client.post("/api/v1/session_heartbeat", json={"session_id": "none"})  # 404: no such session
        wall = time.perf_counter() - started
        used = server_cpu_s(server) - before
    print(f"server CPU per request: {used / count * 1000:.2f} ms ({count} requests in {wall:.1f}s)")


def toy_grpo(model_dir: Path, lr: float, steps: int, prompts_per_step: int = 8) -> None:
    """Reward of a bare GRPO loop on the toy task (advantage = reward - group mean, no std
    normalisation), to show the server + model give RL a signal; the real trainer is bench_training."""
    import random

    import tinker
    from tinker import types

    from hermes_rl.environments.toy_task import make_problem, score

    rng = random.Random(0)
    service = tinker.ServiceClient()
    trainer = service.create_lora_training_client(base_model=str(model_dir), rank=32, seed=0).result()
    tokenizer = trainer.get_tokenizer()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=["\n"])
    adam = types.AdamParams(learning_rate=lr, beta1=0.9, beta2=0.95)
    rewards, started = [], time.perf_counter()
    for _ in range(steps):
        problems = [make_problem(rng) for _ in range(prompts_per_step)]
        futures = [sampler.sample(types.ModelInput.from_ints(tokenizer.encode(p)), GROUP, params) for p, _ in problems]
        datums, step_rewards = [], []
        for (prompt, answer), future in zip(problems, futures, strict=True):
            prompt_ids = tokenizer.encode(prompt)
            seqs = future.result().sequences
            group = [score(tokenizer.decode(s.tokens), answer) for s in seqs]
            mean = sum(group) / len(group)
            step_rewards += group
            for seq, reward in zip(seqs, group, strict=True):
                full = prompt_ids + seq.tokens
                pad = [0.0] * (len(prompt_ids) - 1)
                datums.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(full[:-1]),
                        loss_fn_inputs={
                            "target_tokens": full[1:],
                            "logprobs": pad + list(seq.logprobs),
                            "advantages": pad + [reward - mean] * len(seq.tokens),
                        },
                    )
                )
        fwd = trainer.forward_backward(datums, "importance_sampling")
        opt = trainer.optim_step(adam)
        fwd.result(), opt.result()
        sampler = trainer.save_weights_and_get_sampling_client().result()
        rewards.append(sum(step_rewards) / len(step_rewards))
    window = max(1, min(10, steps // 3))
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window
    elapsed = time.perf_counter() - started
    print(
        f"toy GRPO lr={lr:g}: reward {first:.3f} (first {window} steps) -> {last:.3f} (last {window}), "
        f"{steps} steps of {prompts_per_step}x{GROUP} in {elapsed:.0f}s ({steps / elapsed:.1f} steps/s)"
    )
    service.close("success").result()


def report(model_dir: Path, work: Path, repeats: int, server) -> None:
    import numpy as np
    import tinker
    import torch
    from tinker import types

    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec
    from hermes_rl.dataplane.tinker_local.model_state import ModelState
    from hermes_rl.dataplane.tinker_local.wire import Datum, ForwardBackwardRequest

    torch.set_num_threads(1)
    service = tinker.ServiceClient()
    trainer = service.create_lora_training_client(base_model=str(model_dir), rank=32, seed=0).result()
    tokenizer = trainer.get_tokenizer()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, temperature=1.0, stop=["\n"])
    prompts = [tokenizer.encode(f"Q: {a}+{b}=\nA:") for a, b in PROMPTS]

    # 32 short sequences shaped like a GRPO batch: prompt + sampled answer, IS loss inputs.
    sequences = []
    for prompt in prompts:
        for seq in sampler.sample(types.ModelInput.from_ints(prompt), GROUP, params).result().sequences:
            sequences.append((prompt, seq.tokens, seq.logprobs))
    rng = np.random.default_rng(0)
    datums, raw = [], []
    for prompt, completion, logprobs in sequences:
        full = prompt + completion
        n = len(full) - 1
        q = np.array([0.0] * (len(prompt) - 1) + list(logprobs), dtype=np.float32)
        adv = np.array([0.0] * (len(prompt) - 1) + [float(rng.normal())] * len(completion), dtype=np.float32)
        targets = np.array(full[1:], dtype=np.int64)
        datums.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={"target_tokens": targets, "logprobs": q, "advantages": adv},
            )
        )
        raw.append(Datum(full[:-1], {"target_tokens": targets, "logprobs": q, "advantages": adv}))
        assert len(targets) == n
    tokens = sum(len(d.tokens) for d in raw)
    adam = types.AdamParams(learning_rate=4e-5, beta1=0.9, beta2=0.95)

    sdk = {
        "forward_backward (32 seqs, IS)": lambda: trainer.forward_backward(datums, "importance_sampling").result(),
        "optim_step": lambda: trainer.optim_step(adam).result(),
        "save_weights_and_get_sampling_client": lambda: trainer.save_weights_and_get_sampling_client().result(),
        f"sample 1 prompt x {GROUP} (max 8 tokens)": lambda: sampler.sample(
            types.ModelInput.from_ints(prompts[0]), GROUP, params
        ).result(),
        f"sample 8 requests x {GROUP} concurrently": lambda: [
            f.result()
            for f in [sampler.sample(types.ModelInput.from_ints(prompts[i % 2]), GROUP, params) for i in range(8)]
        ],
    }

    backend = ModelState(model_dir, work / "direct-checkpoints")
    model_id = backend.create_model(
        {"session_id": "bench", "model_seq_id": 0, "base_model": str(model_dir), "lora_config": {"rank": 32, "seed": 0}}
    )["model_id"]
    direct_sampler = backend.sampler(backend.save_weights_for_sampler({"model_id": model_id})["sampling_session_id"])
    spec = SampleSpec(
        prompt=prompts[0],
        num_samples=GROUP,
        max_tokens=8,
        temperature=1.0,
        stop_strings=("\n",),
        stop_token_ids=backend.lm.eos_token_ids,
    )
    direct = {
        "forward_backward (32 seqs, IS)": lambda: backend.forward_backward(
            ForwardBackwardRequest(model_id, 1, "importance_sampling", {}, False, raw)
        ),
        "optim_step": lambda: backend.optim_step({"model_id": model_id, "adam_params": adam.model_dump()}),
        "save_weights_and_get_sampling_client": lambda: backend.save_weights_for_sampler({"model_id": model_id}),
        f"sample 1 prompt x {GROUP} (max 8 tokens)": lambda: backend.sample([(direct_sampler, spec)]),
        f"sample 8 requests x {GROUP} concurrently": lambda: backend.sample([(direct_sampler, spec)] * 8),
    }

    print(f"\nbatch: {len(datums)} sequences, {tokens} tokens; medians of {repeats} runs")
    print(f"{'operation':<42}{'via SDK':>10}{'direct':>10}{'ratio':>8}")
    results = {}
    for name, call in sdk.items():
        via, base = median_time(call, repeats), median_time(direct[name], repeats)
        results[name] = via
        print(f"{name:<42}{via * 1000:>8.1f}ms{base * 1000:>8.1f}ms{via / base:>7.1f}x")

    def rl_step():
        sampled = [sampler.sample(types.ModelInput.from_ints(p), GROUP, params) for p in prompts]
        [f.result() for f in sampled]
        fwd = trainer.forward_backward(datums, "importance_sampling")
        step = trainer.optim_step(adam)
        fwd.result(), step.result()
        return trainer.save_weights_and_get_sampling_client().result()

    before = server_cpu_s(server)
    step_s = median_time(rl_step, repeats)
    step_cpu = (server_cpu_s(server) - before) / (repeats + 1)  # median_time runs one warm-up call more
    print(
        f"\nGRPO-shaped step (sample {len(prompts)}x{GROUP}, fwd/bwd + optim on 32 seqs, new sampler): "
        f"{step_s * 1000:.0f}ms -> {1 / step_s:.1f} steps/s (server side only; the trainer's own work adds to it); "
        f"server CPU {step_cpu * 1000:.0f} ms per step"
    )
    service.close("success").result()


if __name__ == "__main__":
    sys.exit(main())
