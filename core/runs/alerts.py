"""Alerts for clients: check the rules in $HERMES_HOME/rl/alerts.yaml, send a sample, read what was sent.

The rules are applied and delivered by each run's supervisor (core.daemons.alerts, where the file's
format is described); clients only check them, test them and show what arrived.
"""

from __future__ import annotations

from ..daemons.alerts import (
    RUN_ALERTS,
    AlertConfig,
    Webhook,
    alert_log,
    alerts_file,
    load_config,
    read_alert_log,
    send_test,
)

__all__ = [
    "RUN_ALERTS",
    "AlertConfig",
    "Webhook",
    "alert_log",
    "alerts_file",
    "load_config",
    "read_alert_log",
    "send_test",
]


def alert_log_end() -> int:
    """Where the shared alert log ends now: a client that opens shows only the alerts that come after."""
    try:
        return alert_log().stat().st_size
    except OSError:
        return 0
