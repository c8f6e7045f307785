"""Bench: time-to-learn of the default local run, against the previous default, in one invocation.

Each run is a real local toy_addition run through the supervisor (run-api, local Tinker server,
trainer, environment), one after the other so they never share the CPU. Per run it prints
  * launch -> each process ready, launch -> trainer ready (goal <= 10 s once the model exists)
  * launch -> first trained step, steady steps/s
  * launch -> greedy eval >= 0.8 and >= 0.9 (seconds; the headline figure), launch -> completed
  * reward/mean: mean of the first 20 steps vs the last 20 (goal: up by >= 0.3)
then the spread over the default's runs and the previous default's / the default's time ratio, and
writes bench/reward_curve.png (reward and eval accuracy against seconds since launch).

    .venv/bin/python bench/bench_training.py [--runs 3] [--no-baseline] [--home DIR] [--duration 300]
    .venv/bin/python bench/bench_training.py --report RUN_DIR     # figures for one existing run folder

"previous" is the default before the current one: the warm start stopped early on right answers only
(tiny_model.EARLY_STOP_WARM_START), lr 5e-4, near misses rewarded up to 0.5; its 400 steps never
reached eval 0.9, so here it trains until --baseline-duration (240 s) to give it the chance. Each variant
has its own $HERMES_HOME under --home; its tiny model is built there on first use (not counted).
Every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL_KEY = "eval/percent_correct"


@dataclass
class Variant:
    name: str
    recipe: str  # name of a tiny_model.WarmStart constant
    profile_overrides: dict = field(default_factory=dict)  # written to $HERMES_HOME/rl/profiles/local.yaml
    env_overrides: dict = field(default_factory=dict)


DEFAULT = Variant("default", "DEFAULT_WARM_START")
# Its 400 steps are not enough to learn; here it may run up to --baseline-duration seconds.
PREVIOUS = Variant(
    "previous",
    "EARLY_STOP_WARM_START",
    {"learning_rate": 5e-4, "total_steps": 100_000},
    {"near_miss_credit": 0.5},
)


@dataclass
class Figures:
    run_id: str
    status: str
    ready: dict[str, float]  # process -> seconds after launch
    created_s: float  # launch -> run.json written (the config probe runs before it)
    env_setup_s: float | None  # launch -> the environment's setup() (its imports done)
    first_step_s: float | None
    steps_per_s: float | None
    eval_first: float | None
    eval_08_s: float | None
    eval_09_s: float | None
    completed_s: float | None
    reward_first20: float | None
    reward_last20: float | None
    curve: dict  # seconds since launch -> values, for the plot


def read_rows(path: Path) -> list[dict]:
    from hermes_rl.core.base.fsutil import read_jsonl

    return read_jsonl(path) if path.exists() else []


def run_variant(variant: Variant, home: Path, duration: float) -> Figures:
    """One real run of `variant` under $HERMES_HOME=home; waits for its end (or `duration` of training)."""
    import yaml

    os.environ["HERMES_HOME"] = str(home)
    from hermes_rl.core import runs
    from hermes_rl.core.base.paths import models_dir, profiles_dir, run_dir
    from hermes_rl.core.base.states import FINAL
    from hermes_rl.core.envs.profiles import LOCAL_MODEL_NAME
    from hermes_rl.dataplane import tiny_model

    started = time.time()
    tiny_model.ensure_model(models_dir() / LOCAL_MODEL_NAME, recipe=getattr(tiny_model, variant.recipe))
    print(f"[{variant.name}] model ready in {time.time() - started:.1f}s (not counted)")
    profiles_dir().mkdir(parents=True, exist_ok=True)
    (profiles_dir() / "local.yaml").write_text(yaml.safe_dump(variant.profile_overrides))

    launched = time.time()
    run = runs.start_run("toy_addition", "local", dict(variant.env_overrides) or None)
    run_id = run["run_id"]
    folder = run_dir(run_id)
    print(f"[{variant.name}] run {run_id} launched; folder {folder}")
    status = run.get("status")
    try:
        while True:
            time.sleep(0.5)
            status = json.loads((folder / "run.json").read_text()).get("status")
            if status in FINAL or time.time() - launched > duration:
                break
    finally:
        if status not in FINAL:
            runs.stop_run(run_id, wait=30)
    return figures(folder, launched)


def figures(folder: Path, launched: float) -> Figures:
    state = json.loads((folder / "run.json").read_text())
    rows = [r for r in read_rows(folder / "metrics.jsonl") if isinstance(r.get("step"), int)]
    evals = [r for r in read_rows(folder / "env_metrics.jsonl") if isinstance(r.get(EVAL_KEY), (int, float))]
    ready = {p["name"]: p["ready_at"] - launched for p in state.get("processes", []) if p.get("ready_at")}
    steady = rows[10:] if len(rows) > 30 else rows
    rate = None
    if len(steady) > 1 and steady[-1]["time"] > steady[0]["time"]:
        rate = (len(steady) - 1) / (steady[-1]["time"] - steady[0]["time"])
    rewards = [r["reward/mean"] for r in rows if r.get("reward/mean") is not None]

    def first_at(threshold: float) -> float | None:
        return next((r["time"] - launched for r in evals if r[EVAL_KEY] >= threshold), None)

    completed = state.get("ended_at") if state.get("status") == "completed" else None
    return Figures(
        run_id=state["run_id"],
        status=str(state.get("status")),
        ready=ready,
        created_s=state["created_at"] - launched,
        env_setup_s=env_setup_at(state, launched),
        first_step_s=rows[0]["time"] - launched if rows else None,
        steps_per_s=rate,
        eval_first=evals[0][EVAL_KEY] if evals else None,
        eval_08_s=first_at(0.8),
        eval_09_s=first_at(0.9),
        completed_s=completed - launched if completed else None,
        reward_first20=statistics.mean(rewards[:20]) if len(rewards) >= 40 else None,
        reward_last20=statistics.mean(rewards[-20:]) if len(rewards) >= 40 else None,
        curve={
            "reward": [(r["time"] - launched, r["reward/mean"]) for r in rows if r.get("reward/mean") is not None],
            "eval": [(r["time"] - launched, r[EVAL_KEY]) for r in evals],
        },
    )


def env_setup_at(state: dict, launched: float) -> float | None:
    """When toy_addition's setup() logged its first line (atroposlib calls it once its imports are done)."""
    from datetime import datetime

    env = next((p for p in state.get("processes", []) if p["name"] == "env"), {})
    try:
        lines = Path(env.get("log") or "").read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if "toy_addition: operands" in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone()
            return stamp.timestamp() - launched
    return None


def seconds(value: float | None) -> str:
    return f"{value:6.1f}s" if value is not None else "   never"


def print_figures(name: str, fig: Figures) -> None:
    print(f"\n[{name}] run {fig.run_id}: {fig.status}")
    print(
        f"  after launch: run created {fig.created_s:.1f}s (config probe), ready "
        + ", ".join(f"{k} {v:.1f}s" for k, v in fig.ready.items())
        + f"; env setup() {seconds(fig.env_setup_s).strip()} (atroposlib then waits 5 s before its first rollout)"
    )
    if "trainer" in fig.ready:
        print(f"  launch -> trainer ready {fig.ready['trainer']:.1f}s (goal <= 10 s)")
    print(f"  launch -> first trained step {seconds(fig.first_step_s)}")
    if fig.steps_per_s:
        print(f"  steady {fig.steps_per_s:.1f} steps/s")
    first = f"{fig.eval_first:.2f}" if fig.eval_first is not None else "none"
    print(
        f"  greedy eval: first {first}; launch -> >= 0.8 {seconds(fig.eval_08_s)}, >= 0.9 {seconds(fig.eval_09_s)}; "
        f"launch -> completed {seconds(fig.completed_s)} (goal: 0.9 and completed within 180 s)"
    )
    if fig.reward_first20 is not None:
        gain = fig.reward_last20 - fig.reward_first20
        print(
            f"  reward/mean first 20 steps {fig.reward_first20:.3f} -> last 20 {fig.reward_last20:.3f}: "
            f"{gain:+.3f} (goal >= +0.3)"
        )


def spread(label: str, values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return f"{label}: never"
    missing = len(values) - len(got)
    text = f"{label}: min {min(got):.1f}s, median {statistics.median(got):.1f}s, max {max(got):.1f}s"
    return text + (f" ({missing} of {len(values)} runs never got there)" if missing else "")


def plot(results: list[tuple[str, Figures]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    styles = {"default": ("#08519c", "#e6550d", 1.0), "previous": ("#9e9e9e", "#616161", 0.9)}
    labelled: set[str] = set()
    for name, figures_ in results:
        reward_colour, eval_colour, alpha = styles[name]
        window = 20
        times = [t for t, _ in figures_.curve["reward"]]
        values = [v for _, v in figures_.curve["reward"]]
        smooth = [statistics.mean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]
        first = name not in labelled
        labelled.add(name)
        ax.plot(
            times,
            smooth,
            color=reward_colour,
            linewidth=1.6,
            alpha=alpha,
            label=f"{name}: reward/mean ({window}-step mean{', near misses 0.5' if name == 'previous' else ''})"
            if first
            else None,
        )
        if figures_.curve["eval"]:
            ax.plot(
                *zip(*figures_.curve["eval"]),
                "o-" if name == "default" else "s--",
                color=eval_colour,
                markersize=3,
                linewidth=1.2,
                alpha=alpha,
                label=f"{name}: greedy eval accuracy" if first else None,
            )
    ax.axhline(0.9, color="#31a354", linewidth=0.8, linestyle=":")
    ax.set_xlim(left=0)
    ax.set_title("toy_addition on the local profile (tiny model, 2 CPU cores): default vs previous default")
    ax.set_xlabel("seconds since launch")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"\nplot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the default (the spread is over these)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the previous default's run")
    parser.add_argument("--duration", type=float, default=300.0, help="most seconds a run may take (then stopped)")
    parser.add_argument("--baseline-duration", type=float, default=240.0, help="seconds the previous default trains")
    parser.add_argument("--home", default="/tmp/hermes-rl-bench", help="parent of each variant's $HERMES_HOME")
    parser.add_argument("--plot", default=str(ROOT / "bench" / "reward_curve.png"))
    parser.add_argument("--report", metavar="RUN_DIR", help="only print the figures of an existing run folder")
    parser.add_argument(
        "--no-rollouts", action="store_true", help="run without rollout recording (to compare the step time)"
    )
    args = parser.parse_args()

    if args.report:
        folder = Path(args.report)
        state = json.loads((folder / "run.json").read_text())
        print_figures("run", figures(folder, state["created_at"]))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for key in ("TINKER_API_KEY", "WANDB_API_KEY"):
        os.environ.pop(key, None)
    if args.no_rollouts:
        os.environ["HERMES_RL_ROLLOUTS"] = "0"
    home = Path(args.home)
    plan = ([] if args.no_baseline else [PREVIOUS]) + [DEFAULT] * args.runs
    results: list[tuple[str, Figures]] = []
    for variant in plan:
        limit = args.baseline_duration if variant is PREVIOUS else args.duration
        fig = run_variant(variant, home / variant.name, limit)
        print_figures(variant.name, fig)
        results.append((variant.name, fig))

    defaults = [fig for name, fig in results if name == "default"]
    if defaults:
        print(f"\ndefault, {len(defaults)} runs:")
        for label, attr in (
            ("launch -> trainer ready", None),
            ("launch -> first trained step", "first_step_s"),
            ("launch -> greedy eval >= 0.8", "eval_08_s"),
            ("launch -> greedy eval >= 0.9", "eval_09_s"),
            ("launch -> completed", "completed_s"),
        ):
            values = [f.ready.get("trainer") if attr is None else getattr(f, attr) for f in defaults]
            print("  " + spread(label, values))
        gains = [f.reward_last20 - f.reward_first20 for f in defaults if f.reward_first20 is not None]
        if gains:
            print(f"  reward/mean gain (last 20 - first 20): min {min(gains):+.3f}, max {max(gains):+.3f}")
    previous = next((fig for name, fig in results if name == "previous"), None)
    if previous and defaults:
        best = statistics.median([f.eval_09_s for f in defaults if f.eval_09_s is not None] or [float("nan")])
        if previous.eval_09_s is not None:
            print(f"\nprevious / default, launch -> eval >= 0.9: {previous.eval_09_s / best:.1f}x")
        else:
            ran = max((t for t, _ in previous.curve["reward"]), default=0.0)
            top = max((v for _, v in previous.curve["eval"]), default=float("nan"))
            print(
                f"\nprevious default never reached greedy eval 0.9 (best {top:.2f} in its {ran:.0f}s); "
                f"default: {best:.1f}s (ratio > {ran / best:.1f}x)"
            )
    plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
