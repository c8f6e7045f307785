"""`hermes-rl alerts`: the alert rules of alerts.yaml, shown, or a sample sent through them (core.runs.alerts)."""

from __future__ import annotations

from typing import Any

from .output import Exit, say

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


def cmd_alerts(args) -> Any:
    from ...runs import alerts

    if args.action == "test":
        outcome = alerts.send_test()
        if args.json:
            return outcome
        say(f"rules: {', '.join(outcome['rules']) or 'none (a sample goes to every channel)'}")
        if outcome["webhook"]:
            say(f"webhook: {outcome['webhook']}")
        for channel, result in outcome["channels"].items():
            say(f"  {channel:<10} {result}")
        failed = [c for c, r in outcome["channels"].items() if not r.startswith(("delivered", "skipped"))]
        return Exit(1) if failed else None
    config = alerts.load_config()
    shown: dict[str, Any] = {
        "file": str(alerts.alerts_file()),
        "rules": [{"on": r.on, "rule": r.describe(), "channels": list(r.channels)} for r in config.rules],
        "webhook": config.webhook.target if config.webhook else None,
    }
    if args.json:
        return shown
    say(f"{shown['file']}: {len(config.rules)} rule(s)" + (f", webhook {shown['webhook']}" if config.webhook else ""))
    for rule in shown["rules"]:
        say(f"  {rule['rule']:<36} → {', '.join(rule['channels'])}")
    return None
