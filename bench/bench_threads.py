"""The local server's thread choice (ThreadFit) against the thread count that was faster, beside busy processes.

    .venv/bin/python -m bench.bench_threads [--model-dir DIR] [--burners 0 1 2 4] [--rounds 3] [--shape 8x32]

For each number of busy-loop processes started beside it (another run's trainer and environments, or
other work): what ThreadFit chooses after a 2-second window, then the engine sampling SmolLM2-135M-Instruct
(one gsm8k chat prompt, N samples of T tokens) with every thread count from 1 to the cores, interleaved
rounds; tokens/s per count (median), the faster count, and whether the choice was it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import hermes_rl.dataplane.tinker_local  # noqa: E402, F401  (the server's OpenMP settings)

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a prepared smollm2-135m-instruct folder")
    parser.add_argument("--burners", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shape", default="8x32", help="SAMPLESxTOKENS")
    args = parser.parse_args()

    import logging

    import torch
    from transformers import AutoTokenizer

    from hermes_rl.core.envs.profiles import SMOLLM2_MODEL_NAME
    from hermes_rl.dataplane import models
    from hermes_rl.dataplane.tinker_local.decoding import SampleSpec, sample
    from hermes_rl.dataplane.tinker_local.engine import CausalLM
    from hermes_rl.dataplane.tinker_local.server import ThreadFit
    from hermes_rl.environments.gsm8k import SYSTEM_PROMPT

    logging.getLogger("tinker_local").setLevel(logging.WARNING)
    model_dir = models.ensure_model(
        args.model_dir or Path(tempfile.mkdtemp(prefix="bench-threads-")) / SMOLLM2_MODEL_NAME
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    row = json.loads((ROOT / "environments/data/gsm8k_sample.jsonl").read_text().splitlines()[0])
    chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
    prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    samples, tokens = (int(n) for n in args.shape.split("x"))
    lm = CausalLM(model_dir)
    fit = ThreadFit()
    counts = list(range(1, fit.cores + 1))
    spec = SampleSpec(prompt=prompt, num_samples=samples, max_tokens=tokens, temperature=1.0)

    def rate(threads: int, seed: int) -> float:
        torch.set_num_threads(threads)
        started = time.perf_counter()
        result = sample(lm, [spec], None, 1.0, generator=torch.Generator().manual_seed(seed))
        return sum(len(seq.tokens) for seq in result[0].sequences) / (time.perf_counter() - started)

    for threads in counts:
        rate(threads, 0)  # warm-up
    print(f"{samples} x {tokens} tokens, {fit.cores} cores, {args.rounds} rounds per count")
    for burners in args.burners:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
        try:
            fit.measure()  # the window starts now
            time.sleep(2.0)
            fit.threads = 0
            chosen = fit.choose()
            rates: dict[int, list[float]] = {n: [] for n in counts}
            for round_ in range(args.rounds):
                for threads in counts if round_ % 2 == 0 else counts[::-1]:
                    rates[threads].append(rate(threads, round_ + 1))
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        medians = {n: statistics.median(r) for n, r in rates.items()}
        best = max(medians, key=lambda n: medians[n])
        shown = ", ".join(f"{n} thread(s) {medians[n]:.1f} tok/s" for n in counts)
        verdict = "right" if chosen == best else f"{medians[chosen] / medians[best]:.2f}x of the faster"
        print(
            f"  {burners} busy process(es), load {os.getloadavg()[0]:.1f}: {shown}; faster: {best}; "
            f"ThreadFit chose {chosen} ({verdict})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
