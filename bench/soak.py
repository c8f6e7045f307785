"""Soak: a long local run with the dashboard open; prints RSS over time per process, the dashboard's
CPU, and whether every metrics line is present.

    .venv/bin/python bench/soak.py --minutes 30 [--sample-s 30] [--out bench/soak_results.json]
    .venv/bin/python bench/soak.py --minutes 5 --sample-s 10 --rollouts-after 2.5 --model-dir /tmp/tiny-toy

With --rollouts-after MIN the dashboard's rollouts view is opened (o) that many minutes in, and the
dashboard's CPU is given for each view, with their ratio. --model-dir reuses a built tiny model (it is
built there first when missing) instead of building one in the temporary home.

Needs tmux (the dashboard runs in a real terminal, as a person would have it). Uses its own
$HERMES_HOME (a temp folder, removed at the end unless --keep) and a profile override so the run
lasts longer than the soak; the run is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mb(value: float) -> str:
    return f"{value / 2**20:.0f} MB"


def _slope_mb_per_10min(times: list[float], values: list[float]) -> float:
    """Least-squares growth over the given samples, in MB per 10 minutes (≈ 0 once memory has levelled off)."""
    if len(times) < 2:
        return 0.0
    mean_t, mean_v = statistics.mean(times), statistics.mean(values)
    var = sum((t - mean_t) ** 2 for t in times)
    if var == 0:
        return 0.0
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values)) / var  # bytes per second
    return round(slope * 600 / 2**20, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--rollouts-after", type=float, default=None, metavar="MIN", help="open the rollouts view")
    parser.add_argument("--model-dir", type=Path, default=None, help="a tiny model folder to reuse")
    args = parser.parse_args()
    if not shutil.which("tmux"):
        print("soak needs tmux (apt-get install tmux)", file=sys.stderr)
        return 1

    home = Path(tempfile.mkdtemp(prefix="hermes-soak-"))
    os.environ["HERMES_HOME"] = str(home)
    (home / "rl" / "profiles").mkdir(parents=True)
    (home / "rl" / "profiles" / "local.yaml").write_text("total_steps: 1000000\n")
    if args.model_dir is not None:
        args.model_dir.parent.mkdir(parents=True, exist_ok=True)
        (home / "rl" / "models").mkdir(parents=True)
        (home / "rl" / "models" / "tiny-toy").symlink_to(args.model_dir.resolve(), target_is_directory=True)

    import psutil

    from hermes_rl.core import runs
    from hermes_rl.core.base.fsutil import read_jsonl
    from hermes_rl.core.base.states import RunStatus

    run = runs.start_run("toy_addition", profile="local")
    run_id = run["run_id"]
    session = f"hermes-soak-{run_id}"
    pythonpath = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    dashboard_command = (
        f"HERMES_HOME={home} {pythonpath}{ROOT}/.venv/bin/python -m hermes_rl.tui dashboard --run {run_id}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", dashboard_command], check=True)
    pane_pid = int(
        subprocess.run(
            ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
        ).stdout.split()[0]
    )
    dashboard = psutil.Process(pane_pid)
    dashboard.cpu_percent(None)
    print(f"soak: run {run_id}, dashboard pid {pane_pid}, {args.minutes:g} min, HERMES_HOME={home}")

    samples: list[dict] = []
    started = time.monotonic()
    deadline = started + args.minutes * 60
    view = "default"
    rollouts_at = None if args.rollouts_after is None else started + args.rollouts_after * 60
    try:
        while time.monotonic() < deadline:
            time.sleep(args.sample_s)
            if rollouts_at is not None and view == "default" and time.monotonic() >= rollouts_at:
                subprocess.run(["tmux", "send-keys", "-t", session, "o"], check=False)
                view = "rollouts"
                dashboard.cpu_percent(None)  # the next sample covers the rollouts view only
                continue
            state = runs.get_run(run_id, sample=True)
            if state["status"] not in (RunStatus.STARTING, RunStatus.RUNNING):
                print(f"run ended early: {state['status']} {state.get('reason')}")
                break
            row = {
                "t": round(time.monotonic() - started, 1),
                "step": (state.get("last_metric") or {}).get("step"),
                "dashboard_rss": dashboard.memory_info().rss,
                "dashboard_cpu": dashboard.cpu_percent(None),
                "view": view,
            }
            for proc in state["processes"]:
                if proc.get("rss"):
                    row[f"{proc['name']}_rss"] = proc["rss"]
            samples.append(row)
            print(json.dumps(row), flush=True)
    finally:
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        time.sleep(2)
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
        try:
            runs.stop_run(run_id)
        except Exception as exc:  # noqa: BLE001 - report and go on to the figures
            print(f"stop: {exc}")

    rows = read_jsonl(home / "rl" / "runs" / run_id / "metrics.jsonl")
    steps = [row.get("step") for row in rows]
    missing = sorted(set(range(1, max(steps) + 1)) - set(steps)) if steps else []
    keys = sorted({k for s in samples for k in s if k.endswith("_rss")})
    window = max(1, len(samples) // 6)
    summary = {
        "run_id": run_id,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "steps": len(steps),
        "missing_steps": len(missing),
        "processes": {},
    }
    print(f"\n{'process':<12} {'first 1/6':>12} {'last 1/6':>12} {'max':>10} {'growth':>8} {'2nd half slope':>16}")
    for key in keys:
        values = [s[key] for s in samples if key in s]
        first = statistics.median(values[:window])
        last = statistics.median(values[-window:])
        name = key[:-4]
        times = [s["t"] for s in samples if key in s]
        slope = _slope_mb_per_10min(times[len(times) // 2 :], values[len(values) // 2 :])
        summary["processes"][name] = {
            "first_median": first,
            "last_median": last,
            "max": max(values),
            "growth_pct": round(100 * (last - first) / first, 1),
            "second_half_mb_per_10min": slope,
        }
        growth = 100 * (last - first) / first
        print(
            f"{name:<12} {_mb(first):>12} {_mb(last):>12} {_mb(max(values)):>10} {growth:>7.1f}% "
            f"{slope:>+10.1f} MB/10min"
        )
    cpu = [s["dashboard_cpu"] for s in samples[1:]]
    if cpu:
        summary["dashboard_cpu_mean"] = round(statistics.mean(cpu), 2)
        summary["dashboard_cpu_max"] = round(max(cpu), 2)
        print(f"dashboard CPU: mean {statistics.mean(cpu):.1f} % of a core, max {max(cpu):.1f} %")
    if args.rollouts_after is not None:
        by_view = {}
        for name in ("default", "rollouts"):
            # the first sample of each view is left out: start-up, or the view opening
            values = [s["dashboard_cpu"] for s in samples if s["view"] == name][1:]
            if values:
                by_view[name] = statistics.mean(values)
                steps_in = [s["step"] for s in samples if s["view"] == name and s["step"] is not None]
                rate = ""
                times = [s["t"] for s in samples if s["view"] == name and s["step"] is not None]
                if len(steps_in) > 1 and times[-1] > times[0]:
                    rate = f", {(steps_in[-1] - steps_in[0]) / (times[-1] - times[0]):.1f} steps/s"
                print(
                    f"dashboard CPU, {name} view: mean {by_view[name]:.1f} % of a core "
                    f"(median {statistics.median(values):.1f}, max {max(values):.1f}; {len(values)} samples{rate})"
                )
        if len(by_view) == 2 and by_view["default"]:
            print(f"rollouts view / default view: ×{by_view['rollouts'] / by_view['default']:.2f}")
        summary["dashboard_cpu_by_view"] = {k: round(v, 2) for k, v in by_view.items()}
    print(f"metrics lines: {len(steps)} steps, {len(missing)} missing")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
    if not args.keep:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
