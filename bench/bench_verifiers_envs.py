"""Each verifiers environment started for a few steps on a profile: one JSON line per environment (status,
steps trained, reward range, the audit, why nothing trained), the figures of docs/verifiers.md's table.

    HERMES_HOME=/tmp/vf-table HERMES_RL_ENV_PYTHON=~/vf-envs/bin/python \\
      .venv/bin/python bench/bench_verifiers_envs.py local 150 out.jsonl interception kuhn-poker code-golf ...

Arguments: profile, seconds each environment may take, the JSON-lines file to append to, the environments.
Each run is 3 steps of group 4, batch 8, 48 tokens a turn (BENCH_SETTINGS, a JSON object, changes or adds
settings); one still running at its time is stopped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hermes_rl.core import runs
    from hermes_rl.core.base.errors import HermesError
    from hermes_rl.core.base.fsutil import read_jsonl
    from hermes_rl.core.base.paths import run_dir

    profile, timeout, out, envs = argv[0], float(argv[1]), argv[2], argv[3:]
    for env in envs:
        row: dict = {"env": env, "profile": profile}
        started_at = time.time()
        try:
            settings = {"total_steps": 3, "group_size": 4, "batch_size": 8, "max_tokens": 48}
            settings |= json.loads(os.environ.get("BENCH_SETTINGS") or "{}")  # e.g. {"invalid_retries": 2}
            started = runs.start_run(env, profile, settings)
        except HermesError as exc:
            row.update(status="refused", reason=exc.message)
        else:
            run_id = started["run_id"]
            while time.time() - started_at < timeout:
                if runs.get_run(run_id, sample=False)["status"] in ("completed", "failed", "stopped", "lost"):
                    break
                time.sleep(2)
            else:
                runs.stop_run(run_id, wait=30)
            run = runs.get_run(run_id, sample=False)
            folder = run_dir(run_id)
            metrics = read_jsonl(folder / "metrics.jsonl") if (folder / "metrics.jsonl").exists() else []
            env_rows = read_jsonl(folder / "env_metrics.jsonl") if (folder / "env_metrics.jsonl").exists() else []
            rewards = [r["train/reward_mean"] for r in env_rows if "train/reward_mean" in r]
            log = Path(run["logs"]["env"]).read_text(errors="replace") if run.get("logs", {}).get("env") else ""
            audit = run.get("audit") or {}
            row.update(
                run=run_id,
                status=run["status"],
                reason=run.get("reason"),
                steps=len(metrics),
                wall_s=round(time.time() - started_at),
                reward_min=min(rewards) if rewards else None,
                reward_max=max(rewards) if rewards else None,
                audit=audit.get("verdict"),
                not_trained=[line for line in log.splitlines() if "not trained" in line][-2:],
            )
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:300], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
