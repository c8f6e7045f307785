"""Bench: training one GRPO group whose rows share their prompt, the prompt run once (engine.shared_prefixes)
against every row run whole, on SmolLM2-135M-Instruct, interleaved rounds in one process.

    .venv/bin/python -m bench.bench_shared_prefix --model-dir DIR [--threads 1 2] [--rounds 3]

The batch is the smollm2 profile's: a 198-token prompt (the length of the gsm8k chat prompt) and 4 completions
of 88-120 tokens, LoRA rank 16 on the attention and MLP linears, the loss on the completions only (as
forward_backward masks the prompt), forward and backward. Prints seconds per forward_backward (median of the
rounds) each way, the ratio, and the largest difference of the logprobs and of the gradients between the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import hermes_rl.dataplane.tinker_local  # noqa: E402, F401  (the server's OpenMP settings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="a prepared smollm2-135m-instruct folder")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    from hermes_rl.dataplane.tinker_local import engine

    lm = engine.CausalLM(args.model_dir)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, lm.vocab_size, (198,), generator=generator).tolist()
    sequences = [
        prompt + torch.randint(100, lm.vocab_size, (n,), generator=generator).tolist() for n in (95, 110, 88, 120)
    ]
    targets = [torch.tensor(seq[1:] + [0]) for seq in sequences]
    mask = torch.zeros(len(sequences), max(map(len, sequences)), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        mask[row, len(prompt) : len(seq)] = True
    adapter = lm.new_adapter(16, lm.lora_modules(True, True, False), seed=0)
    params = {name: (a.requires_grad_(True), b.requires_grad_(True)) for name, (a, b) in adapter.items()}
    least = engine.SHARED_PREFIX_TOKENS

    def forward_backward(shared: bool) -> tuple[float, torch.Tensor, list[torch.Tensor]]:
        engine.SHARED_PREFIX_TOKENS = least if shared else 1 << 30
        for a, b in params.values():
            a.grad = b.grad = None
        began = time.perf_counter()
        out = lm.target_logprobs(sequences, targets, params, engine.LORA_ALPHA / 16, mask)
        (out * mask).sum().backward()
        seconds = time.perf_counter() - began
        return seconds, out.detach(), [t.grad.clone() for pair in params.values() for t in pair]

    tokens = sum(map(len, sequences))
    print(f"{lm.describe()['dtype']}; {len(sequences)} rows, {tokens} tokens, prompt {len(prompt)} shared")
    for threads in args.threads:
        torch.set_num_threads(threads)
        forward_backward(True), forward_backward(False)  # warm-up: oneDNN builds its kernels per shape
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for shared in (False, True):
                seconds, out, grads = forward_backward(shared)
                times[shared].append(seconds)
                if shared:
                    shared_out, shared_grads = out, grads
                else:
                    whole_out, whole_grads = out, grads
        logprob_gap = float((shared_out - whole_out)[mask].abs().max())
        grad_gap = max(
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)) for a, b in zip(shared_grads, whole_grads)
        )
        whole, shared = statistics.median(times[False]), statistics.median(times[True])
        print(
            f"{threads} thread(s), load {os.getloadavg()[0]:.1f}: each row whole {whole:.2f} s, prompt once "
            f"{shared:.2f} s: {whole / shared:.2f}x; logprobs differ by at most {logprob_gap:.3g} nat, "
            f"gradients by at most {grad_gap:.3g} of their largest",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
