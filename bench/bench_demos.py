"""Bench: the shipped demos do what they claim. Each demo that README and docs say learns is run from a fresh
`$HERMES_HOME` with the command lines exactly as the docs state them, until the run ends (or --minutes pass:
then it is stopped and says so); then the project's own audit gives its verdict, and the figure the docs claim
is set beside the one the run reached.

    .venv/bin/python bench/bench_demos.py                      # every demo, one at a time
    .venv/bin/python bench/bench_demos.py default reasoning-gym [--minutes 20] [--keep]

The commands are read from the docs, not copied here: fenced shell blocks through the docs-command test's own
parser (tests/test_docs_commands.py), and a command a page gives inline in backticks by the same rules. So is
the claimed figure: each demo names the sentence of its page that states it (a pattern), and the numbers come
from the page. Prints, per demo: the commands, the verdict, claimed vs reached, the wall time from the first
command to the run's end, and a docs/benchmarks.md table row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.test_docs_commands import documented_commands  # noqa: E402 - the docs' own parser, from the checkout

HERMES = [sys.executable, "-m", "hermes_rl.core.clients.cli"]


@dataclass
class Demo:
    name: str
    page: str  # the page (README.md, docs/x.md) whose commands and claim these are
    commands: re.Pattern  # which of the page's `hermes-rl` lines are the demo's (in order)
    claim: re.Pattern  # the sentence stating the figure: groups `before`, `after` (numbers on the page)
    metric: str  # what the claim is about: eval/percent_correct (best greedy eval) or reward/mean (last 10 steps)
    inline: bool = False  # the page gives the command in backticks inside a paragraph, not in a shell block


DEMOS = [
    Demo(
        "default",
        "README.md",
        re.compile(r"^bash scripts/main\.sh$"),
        re.compile(r"greedy eval accuracy goes from (?P<before>\d\.\d+) before the first step to (?P<after>\d\.\d+)"),
        "eval/percent_correct",
    ),
    Demo(
        "smollm2",
        "docs/usage.md",
        re.compile(r"^hermes-rl start --env toy_addition --profile smollm2 "),
        re.compile(r"reward/mean (?P<before>\d\.\d+) → (?P<after>\d\.\d+) in (?P<steps>\d+) steps"),
        "reward/mean",
        inline=True,
    ),
    Demo(
        "reasoning-gym",
        "docs/reasoning_gym.md",
        re.compile(r"^hermes-rl (profile new rg-demo|start --env reasoning_gym --profile rg-demo)"),
        re.compile(r"greedy eval (?P<before>\d\.\d+) → (?P<after>\d\.\d+) and"),
        "eval/percent_correct",
    ),
]


def page_text(page: str) -> str:
    return " ".join((ROOT / page).read_text().split())  # a claim may be wrapped over lines


def demo_commands(demo: Demo) -> list[str]:
    """The demo's command lines as its page gives them, in order."""
    name = Path(demo.page).name
    if demo.inline:
        lines = [m for m in re.findall(r"`(hermes-rl [^`]+)`", page_text(demo.page))]
    elif demo.commands.pattern.startswith("^bash"):  # README: `bash scripts/main.sh` in its prose
        lines = re.findall(r"`(bash scripts/main\.sh)`", page_text(demo.page))[:1]
    else:
        lines = [line for page, line in documented_commands() if page == name]
    found = [line for line in lines if demo.commands.search(line)]
    if not found:
        raise SystemExit(f"{demo.name}: no command of {demo.page} matches {demo.commands.pattern!r}")
    return found


def claimed(demo: Demo) -> tuple[float, float, int | None]:
    """(before, after, within how many steps when the claim says)."""
    found = demo.claim.search(page_text(demo.page))
    if not found:
        raise SystemExit(f"{demo.name}: {demo.page} no longer states {demo.claim.pattern!r}")
    steps = found.groupdict().get("steps")
    return float(found.group("before")), float(found.group("after")), int(steps) if steps else None


def argv_of(line: str) -> list[str]:
    words = shlex.split(line)
    if words[:2] == ["bash", "scripts/main.sh"]:  # main.sh bootstraps, then runs `hermes-rl demo`
        return [*HERMES, "demo", *words[2:]]
    assert words[0] == "hermes-rl", line
    return [*HERMES, *words[1:]]


def hermes_json(home: Path, *args: str) -> object:
    out = subprocess.run(
        [*HERMES, *args, "--json"], env=env_for(home), capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout)


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_RL_ENV_")}
    env.update(HERMES_HOME=str(home), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    for key in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"):
        env.pop(key, None)  # a fresh user's machine: the offline profiles
    return env


def figures(run_dir: Path, metric: str, within: int | None) -> dict:
    from hermes_rl.core.base.fsutil import read_jsonl

    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if within is None or (r.get("step") or 0) <= within]
    env_rows = list(read_jsonl(run_dir / "env_metrics.jsonl")) if (run_dir / "env_metrics.jsonl").exists() else []
    steps = max((r.get("step") or 0 for r in rows if isinstance(r.get("step"), int)), default=0)
    if metric == "reward/mean":
        values = [r[metric] for r in rows if isinstance(r.get(metric), (int, float))]
        first = statistics.mean(values[:10]) if values else None
        reached = statistics.mean(values[-10:]) if values else None
    else:
        values = [r[metric] for r in [*rows, *env_rows] if isinstance(r.get(metric), (int, float))]
        first = values[0] if values else None
        reached = max(values) if values else None
    return {"steps": steps, "first": first, "reached": reached, "last": values[-1] if values else None}


def run_demo(demo: Demo, minutes: float, keep: bool) -> dict:
    home = Path(tempfile.mkdtemp(prefix=f"hermes-demo-{demo.name}-"))
    commands = demo_commands(demo)
    before, after, within = claimed(demo)
    print(f"\n== {demo.name} ({demo.page}): {len(commands)} command(s), home {home}", flush=True)
    began = time.monotonic()
    capped = False
    log = open(home / "bench.log", "w")
    for line in commands:
        print(f"$ {line}", flush=True)
        proc = subprocess.Popen(argv_of(line), env=env_for(home), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            code = proc.wait(timeout=max(1.0, minutes * 60 - (time.monotonic() - began)))
        except subprocess.TimeoutExpired:
            capped = True
            proc.terminate()  # the watch only; the run is stopped below
            proc.wait(timeout=30)
            break
        if code != 0:
            print(f"   exited {code}: {(home / 'bench.log').read_text()[-800:]}", flush=True)
    listing = hermes_json(home, "runs", "--all")
    run = (listing if isinstance(listing, list) else listing.get("runs", []))[0]
    run_id = run["run_id"]
    while not capped:  # a command without --watch returns at once: wait for the run's end (or the claim's step)
        status = hermes_json(home, "status", run_id)
        step = (status.get("metrics") or {}).get("step") or 0
        if status.get("status") in ("completed", "failed", "stopped", "lost"):
            break
        if within is not None and step >= within:
            capped = True  # the claim is about its first `within` steps: the run is stopped there
            break
        if time.monotonic() - began > minutes * 60:
            capped = True
            break
        time.sleep(5)
    wall = time.monotonic() - began
    if capped:
        subprocess.run([*HERMES, "stop", run_id], env=env_for(home), capture_output=True, timeout=120)
    results = hermes_json(home, "results", run_id)
    audit = results.get("audit") or {}
    got = figures(home / "rl" / "runs" / run_id, demo.metric, within)
    reached_ok = got["reached"] is not None and round(got["reached"], 2) >= after  # at the claim's precision
    row = {
        "demo": demo.name,
        "status": results.get("status"),
        "verdict": audit.get("verdict"),
        "reason": (audit.get("reasons") or [None])[0],
        "claimed": f"{demo.metric} {before:.2f} → {after:.2f}",
        "reached": "unknown"
        if got["reached"] is None
        else f"{got['first']:.2f} → {got['reached']:.2f}" + (" (best)" if demo.metric.startswith("eval") else ""),
        "reaches_claim": reached_ok,
        "steps": got["steps"],
        "wall_s": round(wall, 1),
        "capped": capped,
        "commands": commands,
    }
    print(json.dumps(row, indent=1, ensure_ascii=False), flush=True)
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("demos", nargs="*", help=f"which ({', '.join(d.name for d in DEMOS)}); default: all")
    parser.add_argument("--minutes", type=float, default=20.0, help="stop a run that has not ended by then")
    parser.add_argument("--keep", action="store_true", help="keep each fresh home (its runs, logs) for a look")
    args = parser.parse_args()
    unknown = set(args.demos) - {d.name for d in DEMOS}
    if unknown:
        parser.error(f"unknown demo(s): {', '.join(sorted(unknown))}")
    chosen = [d for d in DEMOS if not args.demos or d.name in args.demos]
    rows = [run_demo(demo, args.minutes, args.keep) for demo in chosen]
    load = os.getloadavg()[0]
    print(f"\n| demo | command's page | claimed | reached | audit | steps | wall | (load {load:.1f})")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for demo, row in zip(chosen, rows):
        mark = "" if row["reaches_claim"] else " (short of the claim)"
        cap = " (capped)" if row["capped"] else ""
        print(
            f"| {row['demo']} | {demo.page} | {row['claimed']} | {row['reached']}{mark} | {row['verdict']} | "
            f"{row['steps']} | {row['wall_s'] / 60:.1f} min{cap} |"
        )
    return 0 if all(r["reaches_claim"] and r["verdict"] == "learning" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
