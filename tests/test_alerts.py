"""Alerts: rules in alerts.yaml, applied by the run's real supervisor, reach a real local HTTP server once
per event (failed, completed, a metric crossing, a stall), signed, with the secret in no file; bad rules
are refused with the reason; `hermes-rl alerts test` sends a sample."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import logs_dir, run_dir
from hermes_rl.core.clients import cli
from hermes_rl.core.runs import alerts
from tests.fixtures_core import PY, wait_status, wait_until

SECRET = "whsec-test-3f9a1c77d2"


class Hook:
    """A local webhook receiver: every POST's path, headers and JSON body, in arrival order."""

    def __init__(self, delay_s: float = 0.0):
        received = self.received = []
        delay = delay_s

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                try:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except BrokenPipeError:
                    pass  # the sender gave up waiting (the deadline test)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook/token-in-path-5521"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.received]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    server = Hook()
    yield server
    server.close()


def write_rules(hermes_home, text: str) -> None:
    path = hermes_home / "rl" / "alerts.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def all_text_under(folder) -> str:
    """Every file's text but the rules the user wrote (which hold the webhook's URL)."""
    return "\n".join(
        p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.name != "alerts.yaml"
    )


def test_webhook_gets_each_event_once_signed_and_the_secret_is_in_no_file(specs, hook, hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_RL_ALERT_SECRET", SECRET)
    write_rules(
        hermes_home,
        f"""
webhook:
  url: {hook.url}
  secret_env: HERMES_RL_ALERT_SECRET
rules:
  - on: completed
    channels: [webhook, dashboard]
  - on: failed
    channels: [webhook]
  - on: metric
    metric: reward/mean
    above: 0.5
    channels: [webhook, dashboard]
""",
    )
    pipeline = [specs.complete(steps=6)]
    run = runs.launch(pipeline, environment="toy", profile="local", total_steps=6)
    run_id = run["run_id"]
    assert wait_status(run_id, ("completed", "failed"))["status"] == "completed"
    wait_until(lambda: len(hook.received) >= 2, 15, what="two webhook posts")
    time.sleep(3)  # more than a supervisor check interval: nothing is sent twice
    events = hook.events()
    assert sorted(e["event"] for e in events) == ["completed", "metric"], events
    metric = next(e for e in events if e["event"] == "metric")
    # reward/mean is step/6: rows above 0.5 from step 4; the third in a row (the default) is step 6
    assert metric["run_id"] == run_id and metric["step"] == 6 and metric["value"] == pytest.approx(1.0)
    completed = next(e for e in events if e["event"] == "completed")
    assert completed["status"] == "completed" and completed["step"] == 6
    for request in hook.received:  # signed with the secret: the receiver can check who sent it
        want = "sha256=" + hmac.new(SECRET.encode(), request["body"], hashlib.sha256).hexdigest()
        assert request["headers"]["X-Hermes-Signature"] == want
        assert request["path"] == "/hook/token-in-path-5521"
    # what the run recorded about its deliveries, and what a dashboard reads
    delivered = read_jsonl(run_dir(run_id) / "alerts.jsonl")
    assert sorted(d["event"] for d in delivered) == ["completed", "metric"]
    assert all(d["channels"]["webhook"] == "delivered (HTTP 200)" for d in delivered)
    shared = read_jsonl(hermes_home / "rl" / "alerts.jsonl")
    assert sorted(d["event"] for d in shared) == ["completed", "metric"]
    files = all_text_under(run_dir(run_id)) + all_text_under(logs_dir()) + all_text_under(hermes_home / "rl")
    assert SECRET not in files
    assert "token-in-path-5521" not in files


def test_a_failed_run_alerts_once_with_its_reason(specs, hook, hermes_home):
    write_rules(hermes_home, f"webhook:\n  url: {hook.url}\nrules:\n  - on: failed\n  - on: completed\n")
    run = runs.launch([specs.crash("trainer", after=0.2, code=3, required=True)], environment="toy", profile="local")
    assert wait_status(run["run_id"], ("failed", "completed"))["status"] == "failed"
    wait_until(lambda: hook.received, 15, what="the failure's post")
    time.sleep(2.5)
    events = hook.events()
    assert [e["event"] for e in events] == ["failed"]
    assert "trainer exited with code 3" in events[0]["message"] and events[0]["status"] == "failed"


def test_a_supervisor_killed_outright_still_alerts_once_through_its_watchdog(specs, hook, hermes_home):
    import os
    import signal

    write_rules(hermes_home, f"webhook:\n  url: {hook.url}\nrules:\n  - on: failed\n")
    run = runs.launch([specs.sleeper("trainer")], environment="toy", profile="local")
    running = wait_status(run["run_id"], ("running",))
    os.kill(running["supervisor"]["pid"], signal.SIGKILL)
    assert wait_status(run["run_id"], ("failed",))["reason"].startswith("supervisor died")
    wait_until(lambda: hook.received, 15, what="the watchdog's post")
    time.sleep(2)
    events = hook.events()
    assert [e["event"] for e in events] == ["failed"] and "supervisor died" in events[0]["message"]


def test_a_stall_alerts_once_per_quiet_spell(specs, hook, hermes_home):
    write_rules(hermes_home, f"webhook:\n  url: {hook.url}\nrules:\n  - on: stalled\n    after_s: 1\n")
    quiet = specs.ProcessSpec(
        name="trainer",
        argv=[PY, "-c", "import time; time.sleep(3600)"],
        completes_run=True,
        completion_file="{run_dir}/done",
    )
    run = runs.launch([quiet], environment="toy", profile="local")
    wait_status(run["run_id"], ("running",))
    wait_until(lambda: hook.received, 20, what="the stall's post")
    time.sleep(4)  # still quiet: the same stall is not told again
    assert [e["event"] for e in hook.events()] == ["stalled"]
    assert hook.events()[0]["stalled_for_s"] >= 1
    runs.stop_run(run["run_id"])


def test_a_slow_webhook_is_cut_off_at_its_deadline():
    slow = Hook(delay_s=10)
    try:
        config = alerts.AlertConfig(webhook=alerts.Webhook(slow.url, None, 1.0))
        began = time.monotonic()
        outcome = alerts.send_test(config)["channels"]["webhook"]
        assert time.monotonic() - began < 6  # 1 s, and the cut-off connection's second to close
        assert outcome == "not delivered: no answer within 1 s"
    finally:
        slow.close()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("webhook:\n  url: http://hooks.example.com/x\n", "must be https"),
        ("webhook:\n  url: https://user:pw@hooks.example.com/x\n", "must not carry credentials"),
        ("webhook:\n  url_env: NOT_SET_ANYWHERE\n", "'NOT_SET_ANYWHERE' is not set"),
        ("rules:\n  - on: exploded\n", "`on` must be one of failed, stalled, completed, metric"),
        ("rules:\n  - on: metric\n    metric: reward/mean\n", "exactly one of `above` and `below`"),
        ("rules:\n  - on: failed\n    channels: [pager]\n", "channels must be a list of dashboard, desktop, webhook"),
        ("rules:\n  - on: failed\n    after_s: 5\n", "after_s belongs to `on: stalled` rules only"),
        ("rules:\n  - on: metric\n    metric: m\n    above: 1\n    for_steps: 0\n", "for_steps must be a whole number"),
        ("rules:\n  - on: metric\n    metric: m\n    above: 1\n    for_steps: 2\n    smoothed: 3\n", "at most one of"),
        ("webhook:\n  url: https://h.example.com\n  timeout_s: 600\n", "timeout_s must be above 0 and at most 30"),
    ],
)
def test_bad_rules_are_refused_naming_the_problem(hermes_home, text, says):
    write_rules(hermes_home, text)
    with pytest.raises(BadInput) as caught:
        alerts.load_config()
    assert says in caught.value.message and "alerts.yaml" in caught.value.message


def test_http_is_allowed_to_loopback_hosts_only(hermes_home):
    for host in ("127.0.0.1:9", "[::1]:9", "localhost:9"):
        write_rules(hermes_home, f"webhook:\n  url: http://{host}/x\n")
        assert alerts.load_config().webhook.target == f"http://{host}"


def test_alerts_test_command_posts_one_sample(hook, hermes_home, capsys):
    write_rules(
        hermes_home, f"webhook:\n  url: {hook.url}\nrules:\n  - on: failed\n    channels: [webhook, dashboard]\n"
    )
    assert cli.main(["alerts", "test"]) == 0
    out = capsys.readouterr().out
    assert "webhook    delivered (HTTP 200)" in out and "dashboard  delivered" in out
    assert "token-in-path" not in out  # only the scheme and host are shown
    (event,) = hook.events()
    assert event["event"] == "test" and event["test"] is True
    assert [row["event"] for row in read_jsonl(hermes_home / "rl" / "alerts.jsonl")] == ["test"]


def test_a_refused_sample_fails_the_command(hermes_home, capsys):
    write_rules(hermes_home, "webhook:\n  url: http://127.0.0.1:9/x\nrules:\n  - on: failed\n    channels: [webhook]\n")
    assert cli.main(["alerts", "test"]) == 1
    assert "webhook    not delivered: ConnectionRefusedError" in capsys.readouterr().out


def test_an_open_dashboard_shows_an_alert_as_a_toast_and_rings_the_bell(hermes_home):
    """The supervisor's side writes the shared alert log; the dashboard, open before, shows what arrives."""
    import asyncio

    from hermes_rl.tui.app import HermesDashboard
    from tests.fixtures_tui import fixed_clock, wait_for

    write_rules(hermes_home, "rules:\n  - on: failed\n    channels: [dashboard]\n")
    old = {"id": "old", "event": "failed", "title": "run 0ld0ld00 failed", "message": "long ago", "time": 1.0}
    (hermes_home / "rl" / "alerts.jsonl").write_text(json.dumps(old) + "\n")

    async def scenario():
        app = HermesDashboard(clock=fixed_clock)
        rings = []
        app.bell = lambda: rings.append(1)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(1.5)  # the live loop has looked at the log once: what was there is old news
            alerts.send_test(alerts.load_config())
            await wait_for(
                pilot,
                lambda: any("alert test" in n.title for n in app._notifications),
                what="the alert's toast",
            )
            assert rings, "the bell rang"
            assert not any("long ago" in n.message for n in app._notifications)

    asyncio.run(scenario())


def _monitor(hermes_home, rule_text: str, run_id: str = "abcd0001"):
    write_rules(hermes_home, f"rules:\n  - on: metric\n{rule_text}    channels: [dashboard]\n")
    folder = hermes_home / "rl" / "runs" / run_id
    folder.mkdir(parents=True)
    from hermes_rl.core.daemons.alerts import AlertMonitor

    return AlertMonitor(folder, {"run_id": run_id, "status": "running"}, lambda: [])


def _fed(monitor, values: list[float], metric: str = "reward/mean") -> list[dict]:
    """The metric events the monitor fires on these values (one row per step)."""
    monitor._check_metrics([{"step": step, metric: value} for step, value in enumerate(values, 1)])
    monitor.close()
    path = monitor.dir / "alerts.jsonl"
    return [row for row in read_jsonl(path) if row.get("event") == "metric"] if path.exists() else []


def test_a_metric_rule_ignores_one_noisy_batch_by_default(hermes_home):
    """By default a per-step metric fires once it is past the line 3 values in a row, not on one batch."""
    monitor = _monitor(hermes_home, "    metric: reward/mean\n    above: 0.3\n")
    (event,) = _fed(monitor, [0.3125, 0.1, 0.4, 0.35, 0.1, 0.5, 0.6, 0.7, 0.9])
    assert event["step"] == 8 and event["rule"] == "reward/mean above 0.3 for 3 steps"


def test_a_metric_rule_for_n_steps_or_on_the_smoothed_value(hermes_home):
    monitor = _monitor(hermes_home, "    metric: reward/mean\n    below: 0.5\n    for_steps: 2\n")
    assert [e["step"] for e in _fed(monitor, [0.4, 0.6, 0.4, 0.3])] == [4]
    monitor = _monitor(hermes_home, "    metric: reward/mean\n    above: 0.5\n    smoothed: 4\n", "abcd0002")
    (event,) = _fed(monitor, [0.9, 0.1, 0.9, 0.1, 0.9, 0.9])  # means of 4: 0.5, 0.5, 0.7
    assert event["step"] == 6 and event["value"] == pytest.approx(0.7)
    assert event["rule"] == "reward/mean (mean of the last 4) above 0.5"


def test_an_eval_metric_rule_fires_on_one_value(hermes_home):
    """An eval value is already a mean over the eval set: the default needs one."""
    monitor = _monitor(hermes_home, "    metric: eval/percent_correct\n    above: 0.9\n")
    (event,) = _fed(monitor, [0.5, 0.95], metric="eval/percent_correct")
    assert event["step"] == 2 and event["rule"] == "eval/percent_correct above 0.9"
