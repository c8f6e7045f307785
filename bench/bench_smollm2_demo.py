"""Bench: a real pretrained model learning offline. SmolLM2-135M-Instruct (the smollm2 profile) learns, on
2 CPU cores within minutes, to answer sums: toy_addition asked in the model's chat template ("What is
a + b? Answer with the number only.", operands 0..9) after two worked examples, reward 1 for the number alone,
0 otherwise.

    .venv/bin/python bench/bench_smollm2_demo.py [--steps 60] [--home DIR]
    .venv/bin/python bench/bench_smollm2_demo.py --report RUN_DIR      # figures for an existing run

The run is the documented command with total_steps from a derived profile:

    hermes-rl profile new smollm2-demo --from smollm2 --set total_steps=60
    hermes-rl start --env toy_addition --profile smollm2-demo --set chat=true --set chat_examples=2 \\
        --set max_operand=9 --set group_size=8 --set batch_size=16 --set max_completion_tokens=16 \\
        --set wordy_credit=0 --set learning_rate=0.0002

Prints launch -> first step, seconds per step, reward/mean over the first and last 10 steps, the greedy
eval, the wall time, and writes bench/smollm2_reward_curve.png (reward/mean per step and its 10-step mean).
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

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 10
SETTINGS = [
    "chat=true",
    "chat_examples=2",
    "max_operand=9",
    "group_size=8",
    "batch_size=16",
    "max_completion_tokens=16",
    "wordy_credit=0",
    "learning_rate=0.0002",
]


def report(folder: Path, plot_path: Path) -> None:
    from hermes_rl.core.base.fsutil import read_jsonl

    run = json.loads((folder / "run.json").read_text())
    metrics = [r for r in read_jsonl(folder / "metrics.jsonl") if r.get("reward/mean") is not None]
    evals = [
        (r["step"], r["eval/percent_correct"])
        for r in read_jsonl(folder / "env_metrics.jsonl")
        if "eval/percent_correct" in r
    ]
    if not metrics:
        raise SystemExit(f"{folder}: no trained steps yet")
    started = float(run.get("created_at") or metrics[0]["time"])
    rewards = [r["reward/mean"] for r in metrics]
    first, last = statistics.mean(rewards[:WINDOW]), statistics.mean(rewards[-WINDOW:])
    span = metrics[-1]["time"] - metrics[0]["time"]
    print(f"run {run.get('run_id')} ({run.get('environment')}, profile {run.get('profile')}): {run.get('status')}")
    print(
        f"  launch -> first step {metrics[0]['time'] - started:.0f} s; {len(metrics)} steps, "
        f"{span / max(1, len(metrics) - 1):.1f} s per step; launch -> last step {metrics[-1]['time'] - started:.0f} s"
    )
    print(f"  reward/mean: first {WINDOW} steps {first:.3f} -> last {WINDOW} steps {last:.3f} ({last - first:+.3f})")
    print("  greedy eval (number alone): " + ", ".join(f"step {s}: {v:.2f}" for s, v in evals))
    plot(metrics, started, plot_path)
    print(f"  wrote {plot_path}")


def plot(metrics: list[dict], started: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in metrics]
    rewards = [r["reward/mean"] for r in metrics]
    smooth = [statistics.mean(rewards[max(0, i - WINDOW + 1) : i + 1]) for i in range(len(rewards))]
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ax.plot(steps, rewards, color="#9ecae1", linewidth=1.0, label="reward/mean per step")
    ax.plot(steps, smooth, color="#08519c", linewidth=1.8, label=f"{WINDOW}-step mean")
    minutes = (metrics[-1]["time"] - started) / 60
    ax.set_title(f"SmolLM2-135M-Instruct learning to answer sums offline, 2 CPU cores ({minutes:.1f} min)")
    ax.set_xlabel("step (16 completions each)")
    ax.set_ylabel("reward (1: the number alone, else 0)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--home", type=Path, help="$HERMES_HOME for the run (default: a temporary one)")
    parser.add_argument("--report", type=Path, help="only the figures of an existing run folder")
    parser.add_argument("--plot", type=Path, default=ROOT / "bench" / "smollm2_reward_curve.png")
    args = parser.parse_args()
    if args.report:
        report(args.report, args.plot)
        return 0
    home = args.home or Path(tempfile.mkdtemp(prefix="bench-smollm2-"))
    env = {**os.environ, "HERMES_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "hermes_rl.core.clients.cli"]
    subprocess.run(
        [*cli, "profile", "new", "smollm2-demo", "--from", "smollm2", "--set", f"total_steps={args.steps}"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    sets = [item for pair in (("--set", s) for s in SETTINGS) for item in pair]
    out = subprocess.run(
        [*cli, "start", "--env", "toy_addition", "--profile", "smollm2-demo", *sets, "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    run_id = json.loads(out)["run_id"]
    print(f"run {run_id} in {home} (the model is prepared on first use)", flush=True)
    folder = home / "rl" / "runs" / run_id
    try:
        while json.loads((folder / "run.json").read_text()).get("status") not in ("completed", "failed", "stopped"):
            time.sleep(5)
    finally:
        subprocess.run([*cli, "stop", run_id], env=env, capture_output=True)
    report(folder, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
