"""Bench: a real local toy_addition run through the supervisor (run-api, local Tinker server, trainer, env).

Prints
  * launch -> each process ready, launch -> trainer ready (goal <= 10 s once the model exists)
  * launch -> first trained step
  * steady RL steps/s (goal >= 2, aim 5), from metric timestamps after warm-up
  * reward/mean: mean of the first 20 steps vs the last 20 (goal: up by >= 0.3)
  * the size of rollouts.jsonl (--no-rollouts runs without recording, to compare the step time)
and writes bench/reward_curve.png.

    .venv/bin/python bench/bench_training.py [--duration 300] [--steps 3000] [--home DIR] [--model-dir DIR]

The run uses its own $HERMES_HOME (default /tmp/hermes-rl-bench); the tiny model is built there on
first use (minutes, not counted), or reused from --model-dir. Every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read_rows(path: Path) -> list[dict]:
    from hermes_rl.core.base.fsutil import read_jsonl

    return read_jsonl(path) if path.exists() else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of training before the run is stopped")
    parser.add_argument(
        "--steps", type=int, default=3000, help="total_steps of the run (it stops at --duration or here)"
    )
    parser.add_argument("--home", default="/tmp/hermes-rl-bench", help="$HERMES_HOME for the bench run")
    parser.add_argument("--model-dir", default=None, help="an already built tiny model to reuse")
    parser.add_argument("--plot", default=str(ROOT / "bench" / "reward_curve.png"))
    parser.add_argument("--report", metavar="RUN_DIR", help="only print figures and plot for an existing run folder")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="an editable config value for this run, e.g. --set batch_size=16",
    )
    parser.add_argument(
        "--no-rollouts", action="store_true", help="run without rollout recording (to compare the step time)"
    )
    args = parser.parse_args()

    if args.report:
        folder = Path(args.report)
        state = json.loads((folder / "run.json").read_text())
        return report(folder, state["created_at"], args.plot)
    os.environ["HERMES_HOME"] = args.home
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for key in ("TINKER_API_KEY", "WANDB_API_KEY"):
        os.environ.pop(key, None)
    if args.no_rollouts:
        os.environ["HERMES_RL_ROLLOUTS"] = "0"

    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import models_dir, profiles_dir, run_dir
    from hermes_rl.core.base.states import FINAL
    from hermes_rl.core.envs.profiles import LOCAL_MODEL_NAME

    model = models_dir() / LOCAL_MODEL_NAME
    if args.model_dir and not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        model.symlink_to(Path(args.model_dir).resolve())
    t = time.time()
    from hermes_rl.dataplane.tiny_model import ensure_model

    ensure_model(model)
    print(f"model ready at {model} ({time.time() - t:.1f}s, not counted)")
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "local.yaml").write_text(f"total_steps: {args.steps}\n")

    launched = time.time()
    overrides = dict(item.split("=", 1) for item in args.set)
    run = runs.start_run("toy_addition", "local", overrides or None)
    run_id = run["run_id"]
    folder = run_dir(run_id)
    print(f"run {run_id} launched; folder {folder}")
    status = run.get("status")
    try:
        first_step_at = None
        while True:
            time.sleep(1.0)
            state = json.loads((folder / "run.json").read_text())
            status = state.get("status")
            rows = read_rows(folder / "metrics.jsonl")
            if rows and first_step_at is None:
                first_step_at = rows[0]["time"]
                print(f"first trained step {first_step_at - launched:.1f}s after launch")
            if status in FINAL:
                break
            if first_step_at is not None and time.time() - first_step_at > args.duration:
                break
            if first_step_at is None and time.time() - launched > 300:
                print("no trained step within 300 s")
                break
    finally:
        if status not in FINAL:
            runs.stop_run(run_id, wait=30)
    return report(folder, launched, args.plot)


def report(folder: Path, launched: float, plot_path: str) -> int:
    state = json.loads((folder / "run.json").read_text())
    run_id = state["run_id"]
    rows = [r for r in read_rows(folder / "metrics.jsonl") if isinstance(r.get("step"), int)]
    env_rows = read_rows(folder / "env_metrics.jsonl")

    print(f"\nrun {run_id}: {state.get('status')} ({state.get('reason')})")
    for proc in state.get("processes", []):
        ready = proc.get("ready_at")
        if ready:
            print(f"  {proc['name']:8s} ready {ready - launched:6.1f}s after launch")
        else:
            print(f"  {proc['name']:8s} {proc.get('state')}")
    trainer = next((p for p in state.get("processes", []) if p["name"] == "trainer"), {})
    if trainer.get("ready_at"):
        print(f"launch -> trainer ready: {trainer['ready_at'] - launched:.1f}s (goal <= 10 s)")
    if not rows:
        print("no metrics")
        return 1
    print(f"launch -> first trained step: {rows[0]['time'] - launched:.1f}s")
    steady = rows[10:] if len(rows) > 30 else rows
    if len(steady) > 1:
        span = steady[-1]["time"] - steady[0]["time"]
        rate = (len(steady) - 1) / span if span > 0 else float("nan")
        step_s = statistics.median(r["timing/step_s"] for r in steady)
        wait_s = statistics.median(r.get("timing/wait_batch_s") or 0.0 for r in steady)
        print(
            f"steady: {rate:.2f} steps/s over {len(steady)} steps (goal >= 2, aim 5); "
            f"median train step {step_s * 1000:.0f} ms, median wait for batch {wait_s * 1000:.0f} ms"
        )
        parts = ["timing/forward_backward_s", "timing/optim_s", "timing/sampler_refresh_s"]
        if all(steady[0].get(p) is not None for p in parts):
            trained = [r for r in steady if r.get(parts[0]) is not None]
            medians = ", ".join(
                f"{p.split('/')[1][:-2]} {statistics.median(r[p] for r in trained) * 1000:.0f} ms" for p in parts
            )
            print(
                f"  median {medians} ({len(steady) - len(trained)} steps had no group with a reward spread: "
                "nothing to train)"
            )
    recorded = folder / "rollouts.jsonl"
    print(f"rollouts.jsonl: {recorded.stat().st_size / 1e6:.2f} MB" if recorded.exists() else "rollouts: not recorded")
    rewards = [r["reward/mean"] for r in rows if r.get("reward/mean") is not None]
    if len(rewards) >= 40:
        first, last = statistics.mean(rewards[:20]), statistics.mean(rewards[-20:])
        print(f"reward/mean first 20 steps {first:.3f} -> last 20 steps {last:.3f}: {last - first:+.3f} (goal >= +0.3)")
    correct = [(r["step"], r["train/percent_correct"]) for r in env_rows if "train/percent_correct" in r]
    evals = [(r["step"], r["eval/percent_correct"]) for r in env_rows if "eval/percent_correct" in r]
    if correct:
        print(f"train/percent_correct first {correct[0][1]:.2f} -> last {correct[-1][1]:.2f}")
    if evals:
        print("eval/percent_correct: " + ", ".join(f"step {s}: {v:.2f}" for s, v in evals))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows if r.get("reward/mean") is not None]
    window = 20
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(steps, rewards, color="#9ecae1", linewidth=0.8, label="reward/mean (per step)")
    if len(rewards) >= window:
        smooth = [statistics.mean(rewards[max(0, i - window + 1) : i + 1]) for i in range(len(rewards))]
        ax.plot(steps, smooth, color="#08519c", linewidth=2, label=f"reward/mean ({window}-step mean)")
    if correct:
        values = [v for _, v in correct]
        smooth_correct = [statistics.mean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]
        ax.plot(
            [s for s, _ in correct],
            smooth_correct,
            color="#31a354",
            linewidth=1.5,
            label=f"train/percent_correct (env, {window}-row mean)",
        )
    if evals:
        ax.plot(
            [s for s, _ in evals], [v for _, v in evals], "o-", color="#e6550d", label="eval/percent_correct (greedy)"
        )
    elapsed = rows[-1]["time"] - rows[0]["time"]
    ax.set_title(f"toy_addition, local profile (tiny model, CPU): {len(rows)} steps in {elapsed:.0f} s")
    ax.set_xlabel("trainer step")
    ax.set_ylabel("reward / fraction correct")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(plot_path)
    print(f"plot: {plot_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
