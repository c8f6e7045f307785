"""Time per training step: one task served as an Atropos environment and as a verifiers v1 taskset.

    nice -n 10 .venv/bin/python bench/bench_verifiers.py               # local profile, 12 steps each
    nice -n 10 .venv/bin/python bench/bench_verifiers.py --steps 20 --group-size 8 --batch-size 16
    nice -n 10 .venv/bin/python bench/bench_verifiers.py --profile smollm2 --steps 6 --tokens 32   # a real model

The task: single-digit addition asked in the model's chat template, reward 1 for the number alone
(environments/toy_addition with `chat: true`, and tests/data/vf_tasksets/hermes-vf-addition, which asks
the same question with the same reward). Both runs use one profile (the local profile's tiny model, or
--profile smollm2), one after the other, with the same group and batch sizes and completion tokens.
Figures: the mean of each step phase the trainer records (metrics.jsonl's time/*_s), steps 2..N (step 1
includes the environment's start-up), and the verifiers/Atropos ratio of time/step_s. The verifiers venv is
the test suite's (tests/fixtures_verifiers.py: made once per machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _run(env: str, profile: str, overrides: dict, timeout: float) -> list[dict]:
    from hermes_rl.core import runs
    from hermes_rl.core.base.fsutil import read_jsonl
    from hermes_rl.core.base.paths import run_dir

    started = runs.start_run(env, profile, overrides)
    run_id = started["run_id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = runs.get_run(run_id, sample=False)
        if run["status"] in ("completed", "failed", "stopped", "lost"):
            break
        time.sleep(1.0)
    else:
        runs.stop_run(run_id, wait=20)
        raise SystemExit(f"{env}: run {run_id} did not finish in {timeout:g} s")
    if run["status"] != "completed":
        raise SystemExit(f"{env}: run {run_id} {run['status']}: {run.get('reason')}")
    return read_jsonl(run_dir(run_id) / "metrics.jsonl")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--profile", default="local", help="local (the tiny model) or smollm2")
    parser.add_argument("--tokens", type=int, default=6, help="completion tokens")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-verifiers-"))
    os.environ["HERMES_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    from hermes_rl.core.base.paths import models_dir
    from hermes_rl.core.base.states import STEP_PHASES
    from hermes_rl.core.envs import verifiers_envs
    from hermes_rl.dataplane.tiny_model import ensure_model
    from tests.fixtures_verifiers import ensure_verifiers_venv

    python = ensure_verifiers_venv()
    os.environ[verifiers_envs.ENV_PYTHON_VAR] = str(python)
    if args.profile == "local":
        ensure_model(models_dir() / "tiny-toy")
    # both keep groups whose completions all scored the same (toy_addition's default; the bridge's is to drop
    # them), so each step is one batch's worth of groups on both paths, not as many as it takes to differ
    shape = {
        "group_size": args.group_size,
        "batch_size": args.batch_size,
        "total_steps": args.steps,
        "ensure_scores_are_not_same": False,
    }
    tokens = args.tokens
    results = {
        "atropos (toy_addition, chat)": _run(
            "toy_addition", args.profile, {**shape, "chat": True, "max_completion_tokens": tokens}, args.timeout
        ),
        "verifiers (hermes-vf-addition)": _run(
            "hermes-vf-addition", args.profile, {**shape, "max_tokens": tokens}, args.timeout
        ),
    }
    keys = ["time/step_s", *STEP_PHASES]
    load = os.getloadavg()[0]
    print(
        f"{args.profile}: {args.steps} steps each, group {args.group_size}, batch {args.batch_size}, "
        f"{tokens} tokens, load {load:.1f}"
    )
    print("| | " + " | ".join(k.removeprefix("time/") for k in keys) + " | reward/mean | sequences trained |")
    print("| --- |" + " ---: |" * (len(keys) + 2))
    means = {}
    for name, rows in results.items():
        later = [r for r in rows if r["step"] >= 2] or rows
        means[name] = {k: statistics.mean(r.get(k) or 0.0 for r in later) for k in keys}
        reward = statistics.mean(r.get("reward/mean") or 0.0 for r in later)
        trained = statistics.mean(r.get("batch/sequences") or 0 for r in later)
        cells = " | ".join(f"{means[name][k]:.2f}" for k in keys)
        print(f"| {name} | {cells} | {reward:.2f} | {trained:.1f} |")
    # wait_batch_s is the environment's share of a step (serving a batch); the rest is training, which grows
    # with the sequences a batch keeps (groups whose rewards all tie are dropped before training)
    for key in ("time/step_s", "time/wait_batch_s"):
        atropos, verifiers = (means[n][key] for n in results)
        ratio = f"{verifiers / atropos:.2f}x" if atropos else "unknown (atropos took 0 s)"
        print(f"verifiers / atropos {key}: {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
