"""A trainer stand-in that never finishes: prints "ready", then every --step-s appends one metric row
to {run_dir}/metrics.jsonl (through fsutil.append_jsonl, the real trainer's writer) and one log line
naming its run id and port (cross-talk checks read them).

With --health-port it answers GET /health as the real trainer's inference server does, with its step and
`waiting_for_batch_s`; with --wait-from-step N it stops stepping at step N and waits for a batch that never
comes (as the real trainer does once its environments stop delivering)."""

import argparse
import http.server
import json
import os
import threading
import time

from hermes_rl.core.base.fsutil import append_jsonl

parser = argparse.ArgumentParser()
parser.add_argument("--run-dir", required=True)
parser.add_argument("--run-id", required=True)
parser.add_argument("--port", default="")
parser.add_argument("--step-s", type=float, default=0.1)
parser.add_argument("--health-port", type=int, default=0)
parser.add_argument("--wait-from-step", type=int, default=0)
args = parser.parse_args()
state = {"step": 0, "waiting_since": None}


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's naming
        since = state["waiting_since"]
        waiting = None if since is None else round(time.monotonic() - since, 1)
        body = json.dumps({"status": "ok", "step": state["step"], "waiting_for_batch_s": waiting}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


if args.health_port:
    server = http.server.HTTPServer(("127.0.0.1", args.health_port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print(f"ready run={args.run_id} port={args.port}", flush=True)
metrics = os.path.join(args.run_dir, "metrics.jsonl")
while True:
    if args.wait_from_step and state["step"] >= args.wait_from_step:
        if state["waiting_since"] is None:
            state["waiting_since"] = time.monotonic()
            print(f"step {state['step']}: waiting for a batch", flush=True)
        time.sleep(0.1)
        continue
    state["step"] += 1
    step = state["step"]
    append_jsonl(metrics, {"step": step, "time": time.time(), "train/loss": 1.0 / step, "reward/mean": 0.5})
    print(f"step {step} run={args.run_id} port={args.port}", flush=True)
    time.sleep(args.step_s)
