"""What recording a step's phases (the trainer's time/… metrics) costs per step (prints it; not a test).

    .venv/bin/python bench/bench_step_phases.py [--steps 20000] [--step-s 0.05]

The trainer's per-step phase bookkeeping, measured as the trainer does it: the perf_counter reads
around each phase, the phases dict, and the larger metrics row (seven time/… keys and their sum
instead of none) written with the same append_jsonl to a real file. Baseline in the same run: the
same row without the time/… keys written the same way. The extra cost is shown against a step of
--step-s seconds (0.05 s: the local profile's step on 2 cores, docs/benchmarks.md "Local training run").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from hermes_rl.core.base.fsutil import append_jsonl
from hermes_rl.core.base.states import STEP_PHASES, STEP_TIME

BASE_ROW = {
    "step": 1,
    "time": 0.0,
    "train/loss": 0.01,
    "train/learning_rate": 1e-4,
    "reward/mean": 0.5,
    "logprobs/mean": -1.2,
    "logprobs/mean_training": -1.2,
    "logprobs/diff": 0.0,
    "advantages/mean": 0.0,
    "advantages/std": 0.3,
    "batch/sequences": 16,
    "batch/groups": 2,
    "batch/groups_dropped": 0,
    "tinker/loss:sum": 1.0,
    "tinker/optim/step": 1,
}


def with_phases(step: int, waited: float, carried: dict) -> dict:
    """The trainer's bookkeeping for one step (dataplane/trainer/loop.py: train_step and run)."""
    t0 = time.perf_counter()
    t_logged = time.perf_counter()
    logging_s = time.perf_counter() - t_logged
    t_sent = time.perf_counter()
    t_fb = time.perf_counter()
    t_optim = time.perf_counter()
    t_sampler = time.perf_counter()
    row = {
        "time/forward_backward_s": t_fb - t_sent,
        "time/optim_step_s": t_optim - t_fb,
        "time/sampler_refresh_s": t_sampler - t_optim,
    }
    waits = {
        key: row.pop(key, 0.0) for key in ("time/forward_backward_s", "time/optim_step_s", "time/sampler_refresh_s")
    }
    phases = {
        "time/wait_batch_s": waited,
        "time/prepare_s": max(0.0, time.perf_counter() - t0 - logging_s - sum(waits.values())),
        **waits,
        "time/checkpoint_s": carried["time/checkpoint_s"],
        "time/log_s": logging_s + carried["time/log_s"],
    }
    carried.update({"time/checkpoint_s": 0.0, "time/log_s": 0.0})
    out = {**BASE_ROW, "step": step, STEP_TIME: sum(phases.values()), **phases}
    t_write = time.perf_counter()
    return out, t_write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    assert set(STEP_PHASES) <= set(with_phases(1, 0.0, {"time/checkpoint_s": 0.0, "time/log_s": 0.0})[0])
    baseline, timed = [], []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeat):
            path = Path(folder) / "plain.jsonl"
            start = time.perf_counter()
            for step in range(args.steps):
                append_jsonl(path, {**BASE_ROW, "step": step})
            baseline.append((time.perf_counter() - start) / args.steps)
            path.unlink()
            path = Path(folder) / "phases.jsonl"
            carried = {"time/checkpoint_s": 0.0, "time/log_s": 0.0}
            start = time.perf_counter()
            for step in range(args.steps):
                row, t_write = with_phases(step, 0.001, carried)
                append_jsonl(path, row)
                carried["time/log_s"] += time.perf_counter() - t_write
            timed.append((time.perf_counter() - start) / args.steps)
            path.unlink()
    carried = {"time/checkpoint_s": 0.0, "time/log_s": 0.0}
    start = time.perf_counter()
    for step in range(args.steps):
        with_phases(step, 0.001, carried)
    bookkeeping = (time.perf_counter() - start) / args.steps
    row = with_phases(1, 0.001, carried)[0]
    plain_bytes, phased_bytes = len(json.dumps({**BASE_ROW, "step": 1})), len(json.dumps(row))
    base, phased = statistics.median(baseline), statistics.median(timed)
    extra = phased - base
    print(f"row without phases: {base * 1e6:.1f} us/step (append_jsonl, median of {args.repeat} x {args.steps})")
    print(f"row with phases:    {phased * 1e6:.1f} us/step  ratio {phased / base:.2f}x")
    print(f"of which the bookkeeping alone (perf_counter reads, dicts): {bookkeeping * 1e6:.1f} us; the row grows")
    print(f"  from {plain_bytes} to {phased_bytes} bytes (the rest is encoding and writing the longer line)")
    print(f"phase timing costs {extra * 1e6:.1f} us/step = {extra / args.step_s:.3%} of a {args.step_s:g} s step")


if __name__ == "__main__":
    main()
