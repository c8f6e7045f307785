"""OpenMP's wait policy on a shared CPU: one decoding-sized matmul, spinning threads against passive ones.

    .venv/bin/python -m bench.bench_omp_wait [--rows 8] [--repeats 200]

Runs the same (rows x 576) @ (576 x 1536) float32 matmul (one SmolLM2-135M MLP projection for a batch
of `--rows` sampled sequences) in two child processes, OMP_WAIT_POLICY=ACTIVE (what spinning threads
do) and PASSIVE (what tinker-local sets, dataplane/tinker_local/__init__.py), with torch's default
thread count, and prints milliseconds per call and the ratio with the load average. The policy is read
when torch loads, hence the children.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import time, torch, torch.nn.functional as F
x, w = torch.randn({rows}, 576), torch.randn(1536, 576)
for _ in range(20):
    F.linear(x, w)
started = time.perf_counter()
for _ in range({repeats}):
    F.linear(x, w)
print((time.perf_counter() - started) / {repeats} * 1e3, torch.get_num_threads())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    results = {}
    for policy in ("ACTIVE", "PASSIVE"):
        env = {**os.environ, "OMP_WAIT_POLICY": policy}
        code = CHILD.format(rows=args.rows, repeats=args.repeats)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        ms, threads = out.stdout.split()
        results[policy] = float(ms)
        print(f"OMP_WAIT_POLICY={policy}: {float(ms):.2f} ms per call ({threads} threads)", flush=True)
    print(
        f"{args.rows} x 576 @ 576 x 1536: passive is {results['ACTIVE'] / results['PASSIVE']:.1f}x faster "
        f"(load {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
