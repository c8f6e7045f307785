"""`hermes-rl` commands that take a run's data out and tell people about runs: sample, metrics, report,
alerts. Registered by core.clients.cli's parser (`add_commands`); each is a thin wrapper over core.runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

ALERTS_EPILOG = """\
Rules live in $HERMES_HOME/rl/alerts.yaml and are applied by each run's own supervisor, so nothing
needs to be open for an alert to go out. Each event is delivered once:

  webhook:
    url: https://hooks.example.com/hermes   # https; plain http only to 127.0.0.1 / ::1 / localhost
    # url_env: HERMES_RL_ALERT_URL          # or read the URL from the environment or .env
    secret_env: HERMES_RL_ALERT_SECRET      # optional: X-Hermes-Signature: sha256=<HMAC of the body>
    timeout_s: 5                            # the whole request; at most 30
  rules:
    - on: failed
    - on: completed
      channels: [dashboard]                 # default: dashboard, desktop (notify-send), webhook
    - on: stalled
      after_s: 600                          # default: HERMES_RL_STALL_S (900)
    - on: metric
      metric: eval/percent_correct
      above: 0.9                            # or below:

`hermes-rl alerts test` sends a sample through the channels the rules use."""


def _exit(code: int) -> Any:
    from hermes_rl.core.clients.cli import _Exit  # the CLI's own "exit with this code" result

    return _Exit(code)


def cmd_alerts(args) -> Any:
    from hermes_rl.core.runs import alerts

    if args.action == "test":
        outcome = alerts.send_test()
        if args.json:
            return outcome
        print(f"rules: {', '.join(outcome['rules']) or 'none (a sample goes to every channel)'}")
        if outcome["webhook"]:
            print(f"webhook: {outcome['webhook']}")
        for channel, result in outcome["channels"].items():
            print(f"  {channel:<10} {result}")
        failed = [c for c, r in outcome["channels"].items() if not r.startswith(("delivered", "skipped"))]
        return _exit(1) if failed else None
    config = alerts.load_config()
    shown = {
        "file": str(alerts.alerts_file()),
        "rules": [{"on": r.on, "rule": r.describe(), "channels": list(r.channels)} for r in config.rules],
        "webhook": config.webhook.target if config.webhook else None,
    }
    if args.json:
        return shown
    print(f"{shown['file']}: {len(config.rules)} rule(s)" + (f", webhook {shown['webhook']}" if config.webhook else ""))
    for rule in shown["rules"]:
        print(f"  {rule['rule']:<36} → {', '.join(rule['channels'])}")
    return None


def cmd_metrics(args) -> Any:
    from hermes_rl.core.runs import export

    keys = [k for item in args.keys or [] for k in item.split(",")]
    columns, rows = export.metrics_table(args.run_id, keys)
    text = export.format_metrics(columns, rows, "json" if args.json else args.format)
    if args.output:
        from hermes_rl.core.base.fsutil import atomic_write_text

        atomic_write_text(Path(args.output), text, mode=0o644)
        print(f"{len(rows)} rows × {len(columns)} columns → {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return None


def cmd_report(args) -> Any:
    from hermes_rl.core.runs import export

    path = export.write_report(args.run_id, args.output)
    if args.json:
        return {"run_id": args.run_id, "path": str(path), "bytes": path.stat().st_size}
    print(f"report of run {args.run_id}: {path} ({path.stat().st_size / 1024:.0f} KB, opens offline in any browser)")
    return None


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register this module's commands with the CLI's `add(name, handler, help, epilog)`."""
    cmd = add(
        "metrics", cmd_metrics, "a run's metrics, every step, as CSV or JSON (trainer and environment rows merged)"
    )
    cmd.add_argument("run_id")
    cmd.add_argument("--keys", nargs="+", metavar="KEY", help="these metrics only (default: all); commas also work")
    cmd.add_argument("--format", choices=("csv", "json"), default="csv")
    cmd.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    cmd = add(
        "report",
        cmd_report,
        "one self-contained HTML page of a run: charts, evals, config, best and worst rollouts, processes",
    )
    cmd.add_argument("run_id")
    cmd.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: <run folder>/report.html)")
    cmd = add("alerts", cmd_alerts, "alert rules (alerts.yaml): show them, or send a sample", epilog=ALERTS_EPILOG)
    cmd.add_argument("action", nargs="?", choices=("show", "test"), default="show")
