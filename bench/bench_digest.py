"""Bench: a long run's first look. Building the metrics digest (core/readers/metrics_digest.py) of a run of
`--rows` steps whose digest does not exist yet (written by an older version, or a trainer that died), against
reading the same bytes and against the row-by-row `json.loads` scan the digest was built by before.

    .venv/bin/python bench/bench_digest.py [--rows 1000000] [--rounds 2] [--against REV]

Builds, in a temporary $HERMES_HOME, one run of `--rows` trainer steps (bench_scale.build_long_run: a trainer
row of 9 metrics and an environment row per step, an eval every 10 steps; ~295 MB). Then, interleaved over
`--rounds` rounds, each in this process (wall and CPU seconds; the machine may be shared, so the CPU ratio is
the steadier one):

- read: the files' bytes read and split into lines (what no parser can beat);
- json.loads scan: each line parsed by Python's json, nothing else (the floor of the digest as it was built);
- previous digest (with `--against REV`): the digest module of that git revision (e.g. the commit before the
  fast build) building the same digest;
- digest, line by line: MetricsDigest(run).update() from no digest, each line parsed by orjson (as a build is
  where polars is not installed, and as a short update always is);
- digest: MetricsDigest(run).update() from no digest, as it builds a long run (columns read by polars);

and `hermes-rl results RUN` from no digest, as a user runs it (a fresh process; its progress line on stderr), then
`hermes-rl metrics RUN --format csv` (every row, read by fsutil.parse_jsonl_line: orjson first too).
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
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
RUN_ID = "10ae0000"


def timed(action) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def read_lines(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 22):
                chunk.split(b"\n")


def json_scan(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as handle:
            for line in handle:
                json.loads(line)


def previous_digest(rev: str) -> types.ModuleType:
    """core/readers/metrics_digest.py as it was at `rev`, importable beside today's (its relative imports made
    absolute)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:core/readers/metrics_digest.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    source = source.replace("from ..base.", "from hermes_rl.core.base.")
    module = types.ModuleType(f"metrics_digest_{rev}")
    exec(compile(source, f"{rev}:core/readers/metrics_digest.py", "exec"), module.__dict__)  # noqa: S102 - our own file
    return module


def build(module, folder: Path, columnar: bool = True) -> None:
    (folder / ".metrics_digest.json").unlink(missing_ok=True)
    threshold = getattr(module, "COLUMNAR_BYTES", None)
    if not columnar:
        module.COLUMNAR_BYTES = 1 << 62
    try:
        module.MetricsDigest(folder).update()
    finally:
        if threshold is not None:
            module.COLUMNAR_BYTES = threshold


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--against", help="a git revision whose digest module to time beside today's")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hermes-digest-"))
    os.environ["HERMES_HOME"] = str(home)
    try:
        import bench_scale

        from hermes_rl.core.readers import metrics_digest

        began = time.perf_counter()
        folder = bench_scale.build_long_run(RUN_ID, args.rows)
        files = [folder / name for name in metrics_digest.FILES]
        size = sum(p.stat().st_size for p in files)
        print(f"built a {args.rows:,}-row run ({size / 1e6:.0f} MB) in {time.perf_counter() - began:.1f} s", flush=True)
        cases = {
            "read (bytes, split into lines)": lambda: read_lines(files),
            "json.loads scan (line by line)": lambda: json_scan(files),
            "digest, line by line": lambda: build(metrics_digest, folder, columnar=False),
            "digest (now)": lambda: build(metrics_digest, folder),
        }
        if args.against:
            old = previous_digest(args.against)
            cases[f"digest at {args.against}"] = lambda: build(old, folder)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        loads = []
        for _ in range(args.rounds):
            for name, action in cases.items():
                times[name].append(timed(action))
                loads.append(os.getloadavg()[0])
        (folder / ".metrics_digest.json").unlink(missing_ok=True)
        env = dict(os.environ, NO_COLOR="1")
        t = time.perf_counter()
        cli = subprocess.run(
            [sys.executable, "-m", "hermes_rl.core.clients.cli", "results", RUN_ID],
            env=env,
            capture_output=True,
            text=True,
        )
        cli_wall = time.perf_counter() - t
        progress = [line for line in cli.stderr.splitlines() if "metrics digest" in line]
        t = time.perf_counter()
        with open(os.devnull, "w") as sink:
            exported = subprocess.run(
                [sys.executable, "-m", "hermes_rl.core.clients.cli", "metrics", RUN_ID, "--format", "csv"],
                env=env,
                stdout=sink,
            )
        export_wall = time.perf_counter() - t

        print(f"\n{args.rows:,} rows, {size / 1e6:.0f} MB, {args.rounds} round(s), load {statistics.mean(loads):.1f}")
        print("| what | wall s | CPU s | MB/s (CPU) |")
        print("| --- | --- | --- | --- |")
        medians = {}
        for name, got in times.items():
            wall, cpu = statistics.median(w for w, _ in got), statistics.median(c for _, c in got)
            medians[name] = (wall, cpu)
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {size / 1e6 / max(cpu, 1e-9):.0f} |")
        now = medians["digest (now)"]
        scan = medians["json.loads scan (line by line)"]
        lines = medians["digest, line by line"]
        read = medians["read (bytes, split into lines)"]
        print(f"\ndigest (now) vs json.loads scan: {scan[1] / now[1]:.1f}x less CPU, {scan[0] / now[0]:.1f}x wall")
        print(f"digest (now) vs line by line: {lines[1] / now[1]:.1f}x less CPU, {lines[0] / now[0]:.1f}x wall")
        print(f"digest (now) vs reading the bytes: {now[1] / read[1]:.1f}x the CPU, {now[0] / read[0]:.1f}x the wall")
        if args.against:
            then = medians[f"digest at {args.against}"]
            print(f"digest (now) vs at {args.against}: {then[1] / now[1]:.1f}x less CPU, {then[0] / now[0]:.1f}x wall")
        print(f"hermes-rl results {RUN_ID} (no digest): {cli_wall:.1f} s, exit {cli.returncode}")
        print(f"hermes-rl metrics {RUN_ID} --format csv (digest warm): {export_wall:.1f} s, exit {exported.returncode}")
        print("its progress on stderr: " + (" / ".join(progress[:2] + progress[-1:]) if progress else "none"))
        return cli.returncode
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
