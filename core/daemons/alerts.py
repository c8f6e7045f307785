"""Alerts: a run's supervisor tells people when it failed, stalled, completed or a metric crossed a line.

Rules live in `$HERMES_HOME/rl/alerts.yaml` (read again when the file changes):

    webhook:                          # optional
      url: https://hooks.example.com/hermes     # https, or http to a loopback host only
      # url_env: HERMES_RL_ALERT_URL            # or the URL from the environment / .env (a URL with a token)
      secret_env: HERMES_RL_ALERT_SECRET        # optional: the body is signed, X-Hermes-Signature: sha256=HMAC
      timeout_s: 5                              # the whole request, at most 30
    rules:
      - on: failed                    # failed | stalled | completed | metric | audit
      - on: stalled
        after_s: 600                  # default: HERMES_RL_STALL_S (900)
      - on: metric
        metric: eval/percent_correct
        above: 0.9                    # or below:
        channels: [dashboard, webhook]    # default: dashboard, desktop, webhook
      - on: metric
        metric: reward/mean
        below: 0.2
        for_steps: 10                 # past the line in 10 steps in a row (default below)
        # smoothed: 20                # or: the mean of the last 20 values crosses it
      - on: audit                     # the run's audit turns no_signal or suspect (docs/audit.md)

A metric rule fires by default once the value is past the line in DEFAULT_FOR_STEPS (3) steps in a
row (a step counts once, however many rows — trainer, environments, replicas — carry the metric, and
any of its values not past the line breaks the streak): one batch's reward is noisy, and a single one
past the line is no news. An eval/ metric (each
value already a mean over the eval set) fires on one value (`for_steps: 1`).

A run with a budget (budget_usd; docs/cost.md) also alerts once at 80 % of it, with no rule needed.

Each event is delivered once, by the run's own supervisor (no client needs to be open): a line in
`$HERMES_HOME/rl/alerts.jsonl` (an open dashboard shows it as a toast and rings the bell), a desktop
notification through `notify-send` where it exists, and a JSON POST to the webhook (delivered: a 2xx
answer; a redirect is not followed and is not a delivery). Each channel has its own worker thread and
queue, so a webhook that never answers holds neither the supervisor's loop nor the dashboard line and
the desktop notice; every request has a deadline. What was delivered, and how each channel fared, goes
to `<run>/alerts.jsonl` (one line per event, `delivered: false` when a channel failed); what is still
queued or unanswered when the supervisor exits is recorded there as not delivered, with why, and as an
`alert_undelivered` event of the run. The webhook's secret and URL path never reach a log, only its
scheme and host.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import ipaddress
import json
import math
import os
import queue
import shutil
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import BadInput, HermesError
from ..base.fsutil import append_jsonl, iter_jsonl, open_regular, parse_jsonl_line, read_yaml
from ..base.http_deadline import request_within
from ..base.paths import rl_dir
from ..base.secrets import get_key, redact, secret_values
from ..base.stall import progress_logs, stall_fields
from ..base.states import RunStatus
from .run_audit import audit_run_dir
from .spawn import run_bounded

KINDS = ("failed", "stalled", "completed", "metric", "audit")
AUDIT_INTERVAL_S = 10.0  # how often a running run's audit is taken (it reads at most ~1 MB)
AUDIT_ALERTS = ("no_signal", "suspect")
CHANNELS = ("dashboard", "desktop", "webhook")
DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 30.0
MAX_RULES = 50
DEFAULT_FOR_STEPS = 3  # a per-step metric must stay past the line this many values in a row
MAX_WINDOW = 10_000  # for_steps and smoothed at most
NOTIFY_SEND_TIMEOUT_S = 5.0
RESPONSE_MAX_BYTES = 64 * 1024
CHECK_INTERVAL_S = 2.0  # how often the supervisor looks at metrics and activity
METRIC_READ_BYTES = 1 << 20  # what one check reads of a metric file at most
DRAIN_S = 15.0  # at the supervisor's exit: how long pending deliveries may still take, in all
RUN_ALERTS = "alerts.jsonl"  # in the run folder: what was delivered, per channel
SIGNATURE_HEADER = "X-Hermes-Signature"


def alerts_file() -> Path:
    return rl_dir() / "alerts.yaml"


def alert_log() -> Path:
    """Every delivered alert of every run, one JSON line each: what an open dashboard shows."""
    return rl_dir() / "alerts.jsonl"


# -- rules ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    on: str
    channels: tuple[str, ...] = CHANNELS
    metric: str | None = None
    above: float | None = None
    below: float | None = None
    after_s: float | None = None
    for_steps: int | None = None  # steps in a row past the line (None: default_for_steps)
    smoothed: int | None = None  # or: the mean of this many last values is past the line

    def needed(self) -> int:
        """How many steps in a row must be past the line (1 for a smoothed rule: its mean is)."""
        if self.smoothed is not None:
            return 1
        if self.for_steps is not None:
            return self.for_steps
        return 1 if str(self.metric).startswith("eval/") else DEFAULT_FOR_STEPS

    def describe(self) -> str:
        if self.on == "metric":
            side = f"above {self.above:g}" if self.above is not None else f"below {self.below:g}"
            if self.smoothed is not None:
                return f"{self.metric} (mean of the last {self.smoothed}) {side}"
            needed = self.needed()
            return f"{self.metric} {side}" + (f" for {needed} steps" if needed > 1 else "")
        if self.on == "stalled" and self.after_s is not None:
            return f"stalled for {self.after_s:g} s"
        return self.on


@dataclass(frozen=True)
class Webhook:
    url: str = field(repr=False)
    secret: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def target(self) -> str:
        """What may be shown of the URL: its scheme and host (a path or query may hold a token)."""
        parsed = urllib.parse.urlparse(self.url)
        return f"{parsed.scheme}://{parsed.netloc}"


@dataclass(frozen=True)
class AlertConfig:
    rules: tuple[Rule, ...] = ()
    webhook: Webhook | None = None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_webhook_url(url: object, where: str) -> str:
    if not isinstance(url, str) or not url.strip() or len(url) > 2000 or not url.isprintable() or " " in url:
        raise BadInput(f"{where}: the webhook url must be a plain URL", hint="e.g. https://hooks.example.com/hermes")
    url = url.strip()
    try:
        parsed = urllib.parse.urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise BadInput(f"{where}: the webhook url is not a valid URL", hint="check its host and port") from None
    if "@" in parsed.netloc or "\\" in url:
        raise BadInput(f"{where}: the webhook url must not carry credentials", hint="use secret_env for a secret")
    if parsed.scheme == "http" and parsed.hostname and _is_loopback(parsed.hostname):
        return url
    if parsed.scheme != "https" or not parsed.hostname:
        raise BadInput(
            f"{where}: the webhook url must be https (plain http only to a loopback host)",
            hint="alerts carry run details; https keeps them private in transit",
        )
    return url


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        raise BadInput(f"{what} must be a number, got {value!r}"[:160])
    return float(value)


def _rule(raw: object, index: int, where: str) -> Rule:
    here = f"{where}: rules[{index}]"
    if not isinstance(raw, dict):
        raise BadInput(f"{here} must be a mapping with `on:`", hint="e.g. - on: failed")
    if True in raw and "on" not in raw:  # YAML 1.1 reads a bare `on` key as the boolean true
        raw = {("on" if key is True else key): value for key, value in raw.items()}
    unknown = set(raw) - {"on", "channels", "metric", "above", "below", "after_s", "for_steps", "smoothed"}
    if unknown:
        raise BadInput(
            f"{here}: unknown keys {sorted(unknown)}",
            hint="keys: on, channels, metric, above, below, for_steps, smoothed, after_s",
        )
    on = raw.get("on")
    if on not in KINDS:
        raise BadInput(f"{here}: `on` must be one of {', '.join(KINDS)}, got {on!r}"[:200])
    channels = raw.get("channels", list(CHANNELS))
    if isinstance(channels, str):
        channels = [channels]
    if not isinstance(channels, list) or not channels or any(c not in CHANNELS for c in channels):
        raise BadInput(f"{here}: channels must be a list of {', '.join(CHANNELS)}, got {channels!r}"[:200])
    metric = raw.get("metric")
    above = _number(raw["above"], f"{here}: above") if raw.get("above") is not None else None
    below = _number(raw["below"], f"{here}: below") if raw.get("below") is not None else None
    if on == "metric":
        if not isinstance(metric, str) or not metric.strip():
            raise BadInput(f"{here}: a metric rule names its `metric`", hint="e.g. metric: eval/percent_correct")
        if (above is None) == (below is None):
            raise BadInput(f"{here}: a metric rule has exactly one of `above` and `below`")
    elif any(raw.get(k) is not None for k in ("metric", "above", "below", "for_steps", "smoothed")):
        raise BadInput(f"{here}: metric, above, below, for_steps and smoothed belong to `on: metric` rules only")
    windows = {k: _window(raw.get(k), f"{here}: {k}") for k in ("for_steps", "smoothed")}
    if None not in windows.values():
        raise BadInput(f"{here}: a metric rule has at most one of `for_steps` and `smoothed`")
    after_s = raw.get("after_s")
    if after_s is not None:
        if on != "stalled":
            raise BadInput(f"{here}: after_s belongs to `on: stalled` rules only")
        after_s = _number(after_s, f"{here}: after_s")
        if after_s <= 0:
            raise BadInput(f"{here}: after_s must be positive, got {after_s:g}")
    return Rule(on, tuple(dict.fromkeys(channels)), metric, above, below, after_s, **windows)


def _window(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW:
        raise BadInput(f"{what} must be a whole number from 1 to {MAX_WINDOW}, got {value!r}"[:160])
    return value


def load_config(path: Path | None = None) -> AlertConfig:
    """The alert rules; an empty config without the file. BadInput naming the file for a bad one."""
    path = path or alerts_file()
    where = str(path)
    data = read_yaml(path, what="alert rules")
    if data is None:
        return AlertConfig()
    if not isinstance(data, dict):
        raise BadInput(f"{where} must be a mapping with `rules:`", hint="see `hermes-rl alerts --help`")
    unknown = set(data) - {"rules", "webhook"}
    if unknown:
        raise BadInput(f"{where}: unknown keys {sorted(unknown)}", hint="top-level keys: rules, webhook")
    raw_rules = data.get("rules") or []
    if not isinstance(raw_rules, list) or len(raw_rules) > MAX_RULES:
        raise BadInput(f"{where}: rules must be a list of at most {MAX_RULES} rules")
    rules = tuple(_rule(raw, i, where) for i, raw in enumerate(raw_rules))
    webhook = None
    raw_hook = data.get("webhook")
    if raw_hook is not None:
        if not isinstance(raw_hook, dict) or set(raw_hook) - {"url", "url_env", "secret_env", "timeout_s"}:
            raise BadInput(f"{where}: webhook takes url (or url_env), secret_env and timeout_s")
        if ("url" in raw_hook) == ("url_env" in raw_hook):
            raise BadInput(f"{where}: webhook needs exactly one of url and url_env")
        if "url_env" in raw_hook:
            name = raw_hook["url_env"]
            url = get_key(name) if isinstance(name, str) and name else None
            if not url:
                raise BadInput(f"{where}: webhook url_env {name!r} is not set", hint="export it or add it to .env")
        else:
            url = raw_hook["url"]
        url = check_webhook_url(url, where)
        secret = None
        if raw_hook.get("secret_env") is not None:
            name = raw_hook["secret_env"]
            secret = get_key(name) if isinstance(name, str) and name else None
            if not secret:
                raise BadInput(f"{where}: webhook secret_env {name!r} is not set", hint="export it or add it to .env")
        timeout = _number(raw_hook.get("timeout_s", DEFAULT_TIMEOUT_S), f"{where}: webhook timeout_s")
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise BadInput(f"{where}: webhook timeout_s must be above 0 and at most {MAX_TIMEOUT_S:g}")
        webhook = Webhook(url, secret, timeout)
    if webhook is None and any("webhook" in r.channels and r.channels == ("webhook",) for r in rules):
        raise BadInput(f"{where}: a rule sends only to the webhook, but no webhook is configured")
    return AlertConfig(rules, webhook)


# -- delivery -------------------------------------------------------------------------------


def _hidden(config: AlertConfig) -> list[str]:
    """Values no log line may show: the keys, the webhook's secret and its URL (which may hold a token)."""
    values = secret_values()
    if config.webhook is not None:
        values += [v for v in (config.webhook.secret, config.webhook.url) if v]
        path = urllib.parse.urlparse(config.webhook.url)
        values += [v for v in (path.path, path.query) if v and len(v) >= 4]
    return sorted(set(values), key=len, reverse=True)


def post_webhook(hook: Webhook, payload: dict) -> str:
    """POST the payload as JSON; 'delivered (HTTP 200)' or why not. The whole request (connect, send,
    answer) ends within hook.timeout_s: a server that trickles its answer is cut off."""
    import http.client  # noqa: PLC0415 - 20 ms of ssl and email imports, paid only when a webhook is posted

    body = json.dumps(payload, sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "hermes-rl-alerts"}
    if hook.secret:
        digest = hmac.new(hook.secret.encode(), body, hashlib.sha256).hexdigest()
        headers[SIGNATURE_HEADER] = f"sha256={digest}"
    try:
        status, _, _ = request_within(
            hook.url, hook.timeout_s, "POST", body=body, headers=headers, max_bytes=RESPONSE_MAX_BYTES
        )
    except TimeoutError:
        return f"not delivered: no answer within {hook.timeout_s:g} s"
    except (OSError, http.client.HTTPException) as exc:
        return f"not delivered: {type(exc).__name__}: {exc}"
    if status and 200 <= status < 300:
        return f"delivered (HTTP {status})"
    if status and 300 <= status < 400:  # a redirect is not followed (it could lead anywhere): not delivered
        return f"not delivered: HTTP {status} redirect (redirects are not followed)"
    return f"refused (HTTP {status})"


def notify_desktop(title: str, text: str, urgent: bool) -> str:
    program = shutil.which("notify-send")
    if program is None:
        return "skipped: notify-send is not installed"
    argv = [program, "--app-name=hermes-rl", f"--urgency={'critical' if urgent else 'normal'}", title, text]
    # a helper in its own session, ended whole (with whatever it forked) when it is done or out of time
    try:
        done = run_bounded(argv, NOTIFY_SEND_TIMEOUT_S, env=dict(os.environ))
    except OSError as exc:
        return f"not delivered: {type(exc).__name__}"
    if done.timed_out:
        return f"not delivered: notify-send did not end within {NOTIFY_SEND_TIMEOUT_S:g} s"
    if done.returncode:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return f"not delivered: notify-send exited {done.returncode}" + (f" ({why[-1][:120]})" if why else "")
    return "delivered"


def send_channel(channel: str, event: dict, config: AlertConfig) -> str:
    """Deliver one (redacted) event through one channel; the outcome in words."""
    if channel == "webhook":
        if config.webhook is None:
            return "skipped: no webhook in alerts.yaml"
        return post_webhook(config.webhook, event)
    if channel == "desktop":
        urgent = event.get("event") in ("failed", "stalled")
        return notify_desktop(f"hermes-rl: {event.get('title')}", str(event.get("message")), urgent)
    try:
        append_jsonl(alert_log(), event)
    except (OSError, HermesError) as exc:
        return f"not delivered: {exc}"
    return "delivered"


def redacted(event: dict, config: AlertConfig) -> dict:
    return {**event, "message": redact(str(event.get("message")), _hidden(config))}  # a reason may quote anything


def delivered(outcome: str) -> bool:
    return outcome.startswith(("delivered", "skipped"))


def deliver(event: dict, channels: tuple[str, ...], config: AlertConfig) -> dict[str, str]:
    """Send one event through its channels, one after the other, the local ones first; {channel: outcome}.
    For `alerts test`; a run's supervisor delivers through one worker per channel (AlertMonitor)."""
    event = redacted(event, config)
    hidden = _hidden(config)
    order = [c for c in ("dashboard", "desktop", "webhook") if c in channels]
    return {channel: redact(send_channel(channel, event, config), hidden) for channel in order}


class ChannelWorker:
    """One channel's own thread and queue: a channel that hangs (a webhook that never answers) holds
    only its own queue, never the others' deliveries nor the supervisor's loop."""

    def __init__(self, channel: str, done):
        self.channel = channel
        self.done = done  # (event, channel, outcome) once a delivery ended
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.current: dict | None = None  # the event being delivered now

    def put(self, event: dict, config: AlertConfig) -> None:
        self.queue.put((event, config))
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name=f"hermes-rl-alerts-{self.channel}")
            self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            event, config = item
            self.current = event
            try:
                outcome = redact(send_channel(self.channel, event, config), _hidden(config))
            except Exception as exc:  # noqa: BLE001 - a channel's bug is its outcome, never the worker's end
                outcome = f"not delivered: {type(exc).__name__}: {exc}"
            self.current = None
            self.done(event, self.channel, outcome)

    def finish(self, deadline: float) -> None:
        """Let what is queued go out until `deadline` (monotonic), then leave the thread behind."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join(max(0.0, deadline - time.monotonic()))


def make_event(kind: str, run: dict, message: str, *, event_id: str, rule: Rule | None, **fields) -> dict:
    run_id = run.get("run_id")
    title = f"run {run_id} {kind}" if kind != "metric" else f"run {run_id}: {rule.describe() if rule else kind}"
    return {
        "id": event_id,
        "event": kind,
        "title": title,
        "message": message,
        "time": time.time(),
        "run_id": run_id,
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "status": run.get("status"),
        "rule": rule.describe() if rule else None,
        **fields,
    }


# -- the supervisor's side ---------------------------------------------------------------------

BUDGET_ALERT_AT = 0.8  # the share of a run's budget_usd that fires its budget alert


def run_budget(run: dict) -> float | None:
    """The run's budget_usd (config.yaml's tinker.budget_usd), or None."""
    path = run.get("config_path")
    if not path:
        return None
    try:
        config = read_yaml(Path(path), max_bytes=4 << 20, what="run config")
    except HermesError:
        return None
    value = ((config or {}).get("tinker") or {}).get("budget_usd") if isinstance(config, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


class _MetricTail:
    """The newest value of each numeric metric in one JSONL file, read incrementally."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.mtime: float | None = None

    def read(self) -> list[dict]:
        try:
            with open_regular(self.path) as handle:
                size = handle.seek(0, os.SEEK_END)
                if size < self.offset:
                    self.offset = 0
                handle.seek(self.offset)
                data = handle.read(METRIC_READ_BYTES)
                self.mtime = os.fstat(handle.fileno()).st_mtime
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        rows = [parse_jsonl_line(line) for line in data[: end + 1].splitlines()]
        return [row for row in rows if row]


class AlertMonitor:
    """Applied by the run's supervisor: `tick()` from its loop, `on_final()` when the run ends, `close()`
    before it exits. Events fire once per run (a stall once per quiet spell)."""

    def __init__(self, run_dir: Path, run: dict, processes):
        self.dir = run_dir
        self.run = run
        self.processes = processes  # () -> the process records (for the stall rule's logs)
        self.config = AlertConfig()
        self.config_sig: tuple | None = None
        self.fired: set[str] = set()
        for _, row in iter_jsonl(run_dir / RUN_ALERTS) if (run_dir / RUN_ALERTS).exists() else ():
            if isinstance(row.get("id"), str):
                self.fired.add(row["id"])
        self.tails = [_MetricTail(run_dir / "metrics.jsonl"), _MetricTail(run_dir / "env_metrics.jsonl")]
        self.stall_spell = 0
        # metric rule -> (steps in a row past its line, the newest of them): a step counts once, however
        # many rows it has (the trainer's and each environment's, each replica's)
        self.streaks: dict[int, tuple[int, int | None]] = {}
        self.recent: dict[int, collections.deque] = {}  # smoothed metric rule -> its last values
        self.last_step: int | None = None  # the trainer's newest step
        self.stalled: set[int] = set()  # rules whose current stall has been told
        self.next_check = 0.0
        self.budget_usd = run_budget(run)
        self.workers = {channel: ChannelWorker(channel, self._delivered) for channel in CHANNELS}
        self.pending: dict[str, tuple[dict, tuple[str, ...], dict[str, str]]] = {}  # id -> event, channels, outcomes
        self.lock = threading.Lock()
        self.closed = False
        self.reload()

    def reload(self) -> None:
        path = alerts_file()
        try:
            st = os.stat(path)
            sig: tuple | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        if sig == self.config_sig:
            return
        self.config_sig = sig
        try:
            self.config = load_config(path)
        except HermesError as exc:
            self._record({"id": None, "event": "config_error", "message": str(exc), "time": time.time()}, {})

    def _record(self, event: dict, outcomes: dict) -> None:
        failed = [c for c, outcome in outcomes.items() if not delivered(outcome)]
        row = {**event, "channels": outcomes, "delivered": not failed, **({"undelivered": failed} if failed else {})}
        with contextlib.suppress(OSError, HermesError):
            append_jsonl(self.dir / RUN_ALERTS, row)

    def _fire(self, event_id: str, kind: str, rule: Rule, message: str, **fields) -> None:
        if event_id in self.fired:
            return
        self.fired.add(event_id)
        event = redacted(make_event(kind, self.run, message, event_id=event_id, rule=rule, **fields), self.config)
        with self.lock:
            self.pending[event_id] = (event, rule.channels, {})
        for channel in rule.channels:
            self.workers[channel].put(event, self.config)

    def _delivered(self, event: dict, channel: str, outcome: str) -> None:
        """A channel's worker is done with an event: once every channel is, the run records how each fared."""
        with self.lock:
            entry = self.pending.get(event["id"])
            if self.closed or entry is None:
                return  # close() has recorded it as not delivered already
            entry[2][channel] = outcome
            if set(entry[2]) != set(entry[1]):
                return
            del self.pending[event["id"]]
        self._record(event, entry[2])

    def tick(self, now: float) -> None:
        if now < self.next_check:
            return
        self.next_check = now + CHECK_INTERVAL_S
        self.reload()
        if not self.config.rules and not self.budget_usd:
            return  # nothing to watch for: no file is read
        rows = self._read_rows()
        self._check_budget(rows)
        self._check_metrics(rows)
        self._check_stall(self.config.rules)
        self._check_audit(now)

    next_audit = 0.0

    def _check_audit(self, now: float) -> None:
        """`on: audit` rules: once per run and verdict, when the audit turns no_signal or suspect."""
        rules = [(i, r) for i, r in enumerate(self.config.rules) if r.on == "audit"]
        if not rules or now < self.next_audit or self.run.get("status") != RunStatus.RUNNING:
            return
        self.next_audit = now + AUDIT_INTERVAL_S

        result = audit_run_dir(self.dir)
        if result["verdict"] not in AUDIT_ALERTS:
            return
        for index, rule in rules:
            self._fire(
                f"{self.run.get('run_id')}:audit:{index}:{result['verdict']}",
                "audit",
                rule,
                f"audit {result['verdict']}: {(result['reasons'] or [''])[0]}",
                verdict=result["verdict"],
                reasons=result["reasons"],
            )

    def _check_budget(self, rows: list[dict]) -> None:
        """A run with a budget: one alert once the trainer's budget/used reaches BUDGET_ALERT_AT (no rule
        needed; the trainer itself stops the run at 100 %)."""
        for row in rows:
            used = row.get("budget/used")
            if isinstance(used, (int, float)) and not isinstance(used, bool) and used >= BUDGET_ALERT_AT:
                self._fire(
                    f"{self.run.get('run_id')}:budget:{BUDGET_ALERT_AT:g}",
                    "budget",
                    Rule("budget"),
                    f"{used:.0%} of the ${self.budget_usd:g} budget spent at step {row.get('step')}"
                    + (f" (${row['cost/usd']:.4f})" if isinstance(row.get("cost/usd"), (int, float)) else ""),
                    value=float(used),
                    step=row.get("step"),
                )
                return

    def _check_metrics(self, rows: list[dict]) -> None:
        metric_rules = [(i, r) for i, r in enumerate(self.config.rules) if r.on == "metric"]
        # by step (the trainer's rows are read before the environments'): rows of one step come together
        rows = sorted(rows, key=lambda r: r["step"] if type(r.get("step")) is int else math.inf)
        for row in rows:  # every row: a value that crosses and comes back between checks is still seen
            for index, rule in metric_rules:
                value = row.get(rule.metric)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                if rule.smoothed is not None:
                    recent = self.recent.setdefault(index, collections.deque(maxlen=rule.smoothed))
                    recent.append(float(value))
                    if len(recent) < rule.smoothed:
                        continue  # a mean of fewer values than asked is not the smoothed value
                    value = sum(recent) / len(recent)
                if rule.above is not None:
                    past = value > rule.above
                else:
                    assert rule.below is not None  # a metric rule has one of them (AlertRule's check)
                    past = value < rule.below
                if not past:
                    self.streaks[index] = (0, None)
                    continue
                count, newest = self.streaks.get(index, (0, None))
                step = row.get("step") if type(row.get("step")) is int else None
                if step is None or newest is None or step > newest:  # a step already counted adds nothing
                    count, newest = count + 1, step if step is not None else newest
                self.streaks[index] = (count, newest)
                if count >= rule.needed():
                    self._fire(
                        f"{self.run.get('run_id')}:metric:{index}:{rule.describe()}",
                        "metric",
                        rule,
                        f"{rule.metric} = {value:.4g} at step {row.get('step')} ({rule.describe()})",
                        metric=rule.metric,
                        value=float(value),
                        step=row.get("step"),
                    )

    def _read_rows(self) -> list[dict]:
        """The metric rows (trainer's and environments') written since the last read."""
        rows = []
        for tail in self.tails:
            for row in tail.read():
                if tail is self.tails[0] and isinstance(row.get("step"), int):
                    self.last_step = row["step"]
                rows.append(row)
        return rows

    def _check_stall(self, rules: tuple[Rule, ...]) -> None:
        stall_rules = [(i, r) for i, r in enumerate(rules) if r.on == "stalled"]
        if not stall_rules:
            return
        mtimes = [t.mtime for t in self.tails if t.mtime is not None]
        last_metric = {"time": max(mtimes)} if mtimes else None
        logs = progress_logs(self.processes())
        any_quiet = False
        for index, rule in stall_rules:
            verdict = stall_fields(self.run.get("status"), self.run.get("started_at"), last_metric, logs, rule.after_s)
            if not verdict["stalled"]:
                continue
            any_quiet = True
            if index in self.stalled:
                continue
            self.stalled.add(index)
            idle = verdict["stalled_for_s"] or 0
            self._fire(
                f"{self.run.get('run_id')}:stalled:{index}:{self.stall_spell}",
                "stalled",
                rule,
                f"no training step or trainer log line for {idle:.0f} s",
                stalled_for_s=idle,
            )
        if not any_quiet and self.stalled:  # progress again: a later stall is a new event
            self.stalled.clear()
            self.stall_spell += 1

    def on_final(self, status: str, reason: str) -> None:
        kind = {RunStatus.FAILED.value: "failed", RunStatus.COMPLETED.value: "completed"}.get(status)
        if kind is None:
            return
        with contextlib.suppress(Exception):  # an alert never keeps a run's end from being recorded
            self.reload()
            rows = self._read_rows()
            self._check_budget(rows)  # a run that spent its budget between two checks
            self._check_metrics(rows)
        for index, rule in enumerate(self.config.rules):
            if rule.on == kind:
                message = f"{reason} (step {self.last_step})" if self.last_step is not None else reason
                self._fire(
                    f"{self.run.get('run_id')}:{kind}:{index}",
                    kind,
                    rule,
                    message,
                    status=str(status),
                    reason=reason,
                    step=self.last_step,
                )

    def close(self, timeout_s: float = DRAIN_S) -> None:
        """Let pending deliveries finish (at most timeout_s in all, the channels in parallel), then record
        what is still queued or unanswered as not delivered, and why: nothing is dropped silently."""
        deadline = time.monotonic() + timeout_s
        for worker in self.workers.values():
            worker.finish(deadline)
        with self.lock:
            self.closed = True
            left, self.pending = self.pending, {}
        for event, channels, outcomes in left.values():
            missing = [c for c in channels if c not in outcomes]
            for channel in missing:
                outcomes[channel] = (
                    f"not delivered: no answer within the {timeout_s:g} s left at the run's end"
                    if self.workers[channel].current is event
                    else f"not delivered: still queued behind a slow {channel} delivery at the run's end"
                )
            self._record(event, {c: outcomes[c] for c in channels})
            with contextlib.suppress(OSError, HermesError):
                append_jsonl(
                    self.dir / "events.jsonl",
                    {
                        "time": time.time(),
                        "event": "alert_undelivered",
                        "alert_id": event.get("id"),
                        "alert": event.get("event"),
                        "channels": {c: outcomes[c] for c in missing},
                        "message": f"alert {event.get('title')} not delivered through {', '.join(missing)}",
                    },
                )


def send_test(config: AlertConfig | None = None) -> dict:
    """A sample event through every channel the rules use (all of them without rules); what happened."""
    config = config if config is not None else load_config()
    channels = tuple(dict.fromkeys(c for r in config.rules for c in r.channels)) or CHANNELS
    run = {"run_id": "test", "environment": "toy_addition", "profile": "local", "status": "running"}
    event = make_event(
        "test",
        run,
        "a sample alert from `hermes-rl alerts test`: the rules in alerts.yaml reach you",
        event_id=f"test:{time.time_ns()}",
        rule=None,
        test=True,
    )
    event["title"] = "alert test"
    outcomes = deliver(event, channels, config)
    return {
        "rules": [r.describe() for r in config.rules],
        "webhook": config.webhook.target if config.webhook else None,
        "channels": outcomes,
    }


def read_alert_log(offset: int) -> tuple[list[dict], int]:
    """Alerts appended to the shared log since `offset`; (alerts, new offset)."""
    path = alert_log()
    rows = []
    try:
        with open_regular(path) as handle:
            size = handle.seek(0, os.SEEK_END)
            if size < offset:
                offset = 0
            handle.seek(offset)
            data = handle.read(1 << 20)
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    for line in data[: end + 1].splitlines():
        row = parse_jsonl_line(line)
        if row:
            rows.append(row)
    return rows, offset + end + 1
