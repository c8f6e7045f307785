"""Bench: does SmolLM2-135M-Instruct (the smollm2 profile) learn a reasoning-gym task offline?

    .venv/bin/python bench/bench_reasoning_gym.py --task chain_sum [--steps 40] [--minutes 10] [--set FIELD=VALUE ...]
    .venv/bin/python bench/bench_reasoning_gym.py --report RUN_DIR      # figures for an existing run

The run is the documented command (docs/reasoning_gym.md) with total_steps from a derived profile:

    hermes-rl profile new rg-bench-… --from smollm2 --set total_steps=STEPS --set group_size=G --set batch_size=B \
        [--set learning_rate=LR]
    hermes-rl start --env reasoning_gym --profile rg-bench --set task=TASK [--set ...]

It stops the run after --minutes of training if it has not ended, then prints reward/mean and
reasoning-gym's correctness (train/percent_correct) and format rate over the first and last 10 steps (halves
under 20 steps),
the greedy held-out eval before and after, the curriculum level, wall minutes and the load average
(sampled every 5 s: the machine's other work slows a step), and a docs/benchmarks.md table row.
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

WINDOW = 10
DEFAULT_SETS = ["eval_size=24", "max_completion_tokens=12", "steps_per_eval=5", "temperature=0.8"]


def _window(rows: list[dict], key: str, last: bool) -> float | None:
    """Mean of the first (last) 10 values, or of the first (last) half when there are fewer than 20."""
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    if not values:
        return None
    size = min(WINDOW, max(1, len(values) // 2))
    return statistics.mean(values[-size:] if last else values[:size])


def _fmt(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def report(folder: Path, loads: list[float] | None = None, wall_s: float | None = None) -> None:
    from hermes_rl.core.base.fsutil import read_jsonl

    run = json.loads((folder / "run.json").read_text())
    config = (folder / "config.yaml").read_text() if (folder / "config.yaml").exists() else ""
    metrics = [r for r in read_jsonl(folder / "metrics.jsonl") if r.get("reward/mean") is not None]
    env_rows = list(read_jsonl(folder / "env_metrics.jsonl")) if (folder / "env_metrics.jsonl").exists() else []
    train = [r for r in env_rows if "train/percent_correct" in r]
    evals = [r for r in env_rows if "eval/percent_correct" in r]
    if not metrics:
        raise SystemExit(f"{folder}: no trained steps")
    task = next(
        (line.split(":", 1)[1].strip() for line in config.splitlines() if line.strip().startswith("task:")), "?"
    )
    started = float(run.get("created_at") or metrics[0]["time"])
    wall = wall_s if wall_s is not None else metrics[-1]["time"] - started
    first, last = _window(metrics, "reward/mean", False), _window(metrics, "reward/mean", True)
    c_first, c_last = _window(train, "train/percent_correct", False), _window(train, "train/percent_correct", True)
    f_first, f_last = _window(train, "train/format_rate", False), _window(train, "train/format_rate", True)
    level = max((r.get("curriculum/level", 0) for r in train), default=0)
    e_before = evals[0]["eval/percent_correct"] if evals else None
    e_after = evals[-1]["eval/percent_correct"] if len(evals) > 1 else None
    fe_before = evals[0].get("eval/format_rate") if evals else None
    fe_after = evals[-1].get("eval/format_rate") if len(evals) > 1 else None
    load = f"{statistics.mean(loads):.1f} (max {max(loads):.1f})" if loads else "unknown"
    print(f"run {run.get('run_id')} ({task}, profile {run.get('profile')}): {run.get('status')}, {len(metrics)} steps")
    size = min(WINDOW, max(1, len(metrics) // 2))
    print(f"  reward/mean first {size} steps {_fmt(first)} -> last {size} {_fmt(last)}")
    print(f"  train correct first {_fmt(c_first)} -> last {_fmt(c_last)}; format {_fmt(f_first)} -> {_fmt(f_last)}")
    print("  held-out greedy eval: " + ", ".join(f"step {r['step']}: {r['eval/percent_correct']:.2f}" for r in evals))
    bar = evals[0].get("eval/constant_answer_baseline") if evals else None
    print(f"  always one answer would score {_fmt(bar)} on the held-out items (the bar eval must pass)")
    print(f"  highest curriculum level {level}; wall {wall / 60:.1f} min; load average {load}")
    print(
        f"| {task} | {len(metrics)} | {_fmt(first)} → {_fmt(last)} | {_fmt(c_first)} → {_fmt(c_last)} | "
        f"{_fmt(f_first)} → {_fmt(f_last)} | {_fmt(e_before)} → {_fmt(e_after)} (bar {_fmt(bar)}) | "
        f"{_fmt(fe_before)} → {_fmt(fe_after)} | "
        f"{level} | {wall / 60:.1f} | {load} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="chain_sum")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--minutes", type=float, default=10.0, help="stop the run after this long")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument(
        "--learning-rate", type=float, default=3e-4, help="over smollm2's (a locked field: the derived profile's)"
    )
    parser.add_argument("--set", action="append", default=[], help="more environment fields, FIELD=VALUE")
    parser.add_argument("--home", type=Path, help="$HERMES_HOME for the run (default: a temporary one)")
    parser.add_argument("--report", type=Path, help="only the figures of an existing run folder")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return 0
    home = args.home or Path(tempfile.mkdtemp(prefix="bench-rg-"))
    env = {**os.environ, "HERMES_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "hermes_rl.core.clients.cli"]
    profile = f"rg-bench-{args.steps}-{args.group_size}x{args.batch_size // args.group_size}"
    sets = ["total_steps", str(args.steps), "group_size", str(args.group_size), "batch_size", str(args.batch_size)]
    if args.learning_rate:
        profile += f"-lr{args.learning_rate:.0e}".replace("+", "")
        sets += ["learning_rate", str(args.learning_rate)]
    if not (home / "rl" / "profiles" / f"{profile}.yaml").exists():
        subprocess.run(
            [*cli, "profile", "new", profile, "--from", "smollm2"]
            + [x for k, v in zip(sets[::2], sets[1::2]) for x in ("--set", f"{k}={v}")],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    sets = [x for s in [f"task={args.task}", *DEFAULT_SETS, *args.set] for x in ("--set", s)]
    command = [*cli, "start", "--env", "reasoning_gym", "--profile", profile, *sets, "--json"]
    print("HERMES_HOME=" + str(home), " ".join(command[3:]), flush=True)
    started = time.time()
    run_id = json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)["run_id"]
    folder = home / "rl" / "runs" / run_id
    loads: list[float] = []
    try:
        while json.loads((folder / "run.json").read_text()).get("status") not in ("completed", "failed", "stopped"):
            loads.append(os.getloadavg()[0])
            if time.time() - started > args.minutes * 60:
                print(f"  stopping after {args.minutes} min", flush=True)
                break
            time.sleep(5)
    finally:
        wall = time.time() - started
        subprocess.run([*cli, "stop", run_id], env=env, capture_output=True)
    report(folder, loads, wall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
