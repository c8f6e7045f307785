"""OpenMP's wait policy on a shared CPU: decoding-sized matmuls with spinning, bounded-spin and passive threads.

    .venv/bin/python -m bench.bench_omp_wait [--rows 8] [--repeats 200] [--burners 4]

Runs the same (rows x 576) @ (576 x 1536) matmul (one SmolLM2-135M MLP projection for a batch of
`--rows` sampled sequences, in the dtype tinker-local picks here for that model) in child processes
with torch's default thread count under three policies: OMP_WAIT_POLICY=ACTIVE (threads spin while
idle), PASSIVE (they sleep at once) and GOMP_SPINCOUNT=10000 (a bounded spin, what tinker-local sets:
dataplane/tinker_local/__init__.py); first on the machine as it is, then beside `--burners` busy-loop
processes (another run's work). Prints milliseconds per call and the load average. The policy is read
when torch loads, hence the children.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

POLICIES = {
    "OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
}
BURNER = "while True: pass"
CHILD = """
import time, torch, torch.nn.functional as F
from hermes_rl.dataplane.tinker_local.engine import choose_dtype
dtype = choose_dtype(torch.device("cpu"), "auto", 135_000_000)
x, w = torch.randn({rows}, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
for _ in range(20):
    F.linear(x, w)
started = time.perf_counter()
for _ in range({repeats}):
    F.linear(x, w)
print((time.perf_counter() - started) / {repeats} * 1e3, torch.get_num_threads(), str(dtype)[6:])
"""


def measure(label: str, rows: int, repeats: int) -> None:
    code = CHILD.format(rows=rows, repeats=repeats)
    for name, settings in POLICIES.items():
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        out = subprocess.run([sys.executable, "-c", code], env={**env, **settings}, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr.strip().splitlines()[-1])
        ms, threads, dtype = out.stdout.split()
        print(
            f"{label:>12}  {name:<24} {float(ms):8.2f} ms per call ({threads} threads, {dtype}, "
            f"load {os.getloadavg()[0]:.1f})",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--burners", type=int, default=4, help="busy processes beside the second measurement")
    args = parser.parse_args()
    print(f"{args.rows} x 576 @ 576 x 1536, {os.cpu_count()} cores")
    measure("as is", args.rows, args.repeats)
    if args.burners:
        burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(args.burners)]
        try:
            measure(f"+{args.burners} busy", args.rows, args.repeats)
        finally:
            for burner in burners:
                burner.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
