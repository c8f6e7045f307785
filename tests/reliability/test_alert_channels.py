"""Alerts: one slow channel never silences the others, and nothing is dropped silently. Delivery used
to run the channels of every event one after the other in one thread, the webhook first: a webhook that
never answers held the dashboard line (and with it the dashboard's toast and bell) and the desktop
notice for its whole deadline, per event; what was still queued when the supervisor exited was dropped
with no record, and a 302 counted as delivered. Now each channel has its own worker, what is undelivered
at exit is recorded with why (the run's alerts.jsonl, `delivered: false`, and an `alert_undelivered`
event), and only a 2xx answer is a delivery. Real local servers: one that accepts and never answers,
one that answers 302."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import rl_dir, run_dir
from hermes_rl.core.base.states import RunStatus
from hermes_rl.core.daemons import alerts
from tests.reliability.helpers import assert_no_orphans, launch_standin, proc_record, wait_for, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]


class Silent:
    """A webhook that accepts every connection, reads the request and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)  # kept open, never answered
            self.accepted += 1

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class Redirect:
    """A webhook that answers every POST with 302 Found."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(302)
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def silent():
    server = Silent()
    yield server
    server.close()


def monitor_with(hermes_home, rules: tuple[alerts.Rule, ...], url: str, timeout_s: float) -> alerts.AlertMonitor:
    folder = run_dir("a1e27000")
    folder.mkdir(parents=True, mode=0o700)
    run = {"run_id": "a1e27000", "environment": "standin", "profile": "local", "status": "running"}
    monitor = alerts.AlertMonitor(folder, run, lambda: [])
    monitor.reload = lambda: None  # the config given here, not alerts.yaml
    monitor.config = alerts.AlertConfig(rules, alerts.Webhook(url, None, timeout_s))
    return monitor


def dashboard_lines() -> list[dict]:
    return read_jsonl(alerts.alert_log())


def test_a_webhook_that_never_answers_holds_no_other_channel_and_is_recorded_undelivered(hermes_home, silent):
    rules = (alerts.Rule("metric", metric="reward/mean", above=0.5, for_steps=1), alerts.Rule("completed"))
    monitor = monitor_with(hermes_home, rules, silent.url, timeout_s=30)
    began = time.monotonic()
    monitor._check_metrics([{"step": 3, "reward/mean": 0.9}])
    monitor.on_final(RunStatus.COMPLETED.value, "trainer finished")
    lines = wait_for(lambda: len(dashboard_lines()) >= 2 and dashboard_lines(), 5)
    took = time.monotonic() - began
    assert lines and sorted(line["event"] for line in lines) == ["completed", "metric"], lines
    assert took < 5, f"the dashboard lines waited {took:.1f} s behind the webhook"
    assert wait_for(lambda: silent.accepted >= 1, 5), "the webhook was tried"

    closing = time.monotonic()
    monitor.close(timeout_s=1.0)
    assert time.monotonic() - closing < 3
    rows = {row["event"]: row for row in read_jsonl(run_dir("a1e27000") / alerts.RUN_ALERTS)}
    assert set(rows) == {"metric", "completed"}, rows  # the completed alert is not dropped
    for _kind, row in rows.items():
        assert row["delivered"] is False and row["undelivered"] == ["webhook"], row
        assert row["channels"]["dashboard"] == "delivered", row
    assert rows["metric"]["channels"]["webhook"].startswith("not delivered: no answer within"), rows["metric"]
    assert "still queued" in rows["completed"]["channels"]["webhook"], rows["completed"]
    told = [e for e in read_jsonl(run_dir("a1e27000") / "events.jsonl") if e["event"] == "alert_undelivered"]
    assert sorted(e["alert"] for e in told) == ["completed", "metric"], told


def test_a_302_answer_is_not_delivered(hermes_home):
    server = Redirect()
    try:
        config = alerts.AlertConfig((alerts.Rule("completed", channels=("webhook",)),), alerts.Webhook(server.url))
        outcome = alerts.send_test(config)["channels"]["webhook"]
        assert outcome.startswith("not delivered") and "302" in outcome, outcome

        rules = (alerts.Rule("completed", channels=("webhook", "dashboard")),)
        monitor = monitor_with(hermes_home, rules, server.url, timeout_s=5)
        monitor.on_final(RunStatus.COMPLETED.value, "trainer finished")
        monitor.close(timeout_s=5)
        (row,) = read_jsonl(run_dir("a1e27000") / alerts.RUN_ALERTS)
        assert row["delivered"] is False and "302" in row["channels"]["webhook"], row

        (rl_dir() / "alerts.yaml").write_text(f"webhook:\n  url: {server.url}\nrules:\n  - on: completed\n")
        cli = subprocess.run(
            [sys.executable, "-m", "hermes_rl.core.clients.cli", "alerts", "test"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 1 and "302" in cli.stdout, (cli.returncode, cli.stdout, cli.stderr)
    finally:
        server.close()


@pytest.mark.slow
@pytest.mark.usefixtures("run_processes_cleanup")
def test_a_live_run_behind_a_silent_webhook_shows_its_alerts_and_records_what_never_went_out(hermes_home, silent):
    """The real supervisor: a metric alert reaches the dashboard while the webhook hangs; the run fails,
    its supervisor exits within its drain time and the failure alert's webhook delivery is recorded as
    not delivered, in the run's alerts and its events."""
    rl_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    (rl_dir() / "alerts.yaml").write_text(
        f"webhook:\n  url: {silent.url}\n  timeout_s: 30\n"
        "rules:\n"
        "  - on: metric\n    metric: reward/mean\n    above: 0.1\n    channels: [dashboard, webhook]\n"
        "  - on: failed\n    channels: [dashboard, webhook]\n"
    )
    run = wait_running(launch_standin()["run_id"])
    run_id = run["run_id"]
    began = time.monotonic()
    shown = wait_for(lambda: [a for a in dashboard_lines() if a.get("run_id") == run_id], 15)
    assert shown and shown[0]["event"] == "metric", shown
    assert time.monotonic() - began < 10, "the dashboard line waited behind the webhook"

    os.kill(proc_record(run, "trainer")["pid"], signal.SIGKILL)
    failed = wait_for(lambda: (r := runs.get_run(run_id, sample=False))["status"] == "failed" and r, 20)
    assert failed, runs.get_run(run_id, sample=False)
    assert wait_for(lambda: any(a["event"] == "failed" for a in dashboard_lines() if a.get("run_id") == run_id), 5)
    sup = run["supervisor"]["pid"]
    gone = wait_for(lambda: not os.path.exists(f"/proc/{sup}") or _zombie(sup), alerts.DRAIN_S + 10, max_interval=0.5)
    assert gone, "the supervisor exits within its drain time"
    rows = {row["event"]: row for row in read_jsonl(run_dir(run_id) / alerts.RUN_ALERTS)}
    assert set(rows) == {"metric", "failed"}, rows
    assert rows["failed"]["delivered"] is False and rows["failed"]["channels"]["dashboard"] == "delivered", rows
    assert rows["failed"]["channels"]["webhook"].startswith("not delivered"), rows["failed"]
    told = [e for e in read_jsonl(run_dir(run_id) / "events.jsonl") if e["event"] == "alert_undelivered"]
    assert any(e["alert"] == "failed" for e in told), told
    assert_no_orphans(run)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
