"""A run's data out of the tool: its metrics as CSV or JSON, and one self-contained HTML report.

`metrics_table(run_id, keys)` is every step's row (trainer and environment rows merged by step, nothing
thinned); `format_metrics` writes it as CSV (a `step` and `time` column, then one per key) or JSON.

`html_report(run_id)` is one page that opens in any browser with no network: the run's identity and
fate, its headline numbers, a chart per metric as inline SVG (raw values and their moving average), the
eval table, the config, the best and worst completions of its first and last recorded steps, and its
processes with how each ended. No script, no external file, no font or image fetched.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from .. import runs
from ..base.audit_rule import signal_summary
from ..base.errors import BadInput, HermesError
from ..base.formatting import human_duration, process_id_text, process_place_text
from ..base.fsutil import atomic_write_text, epoch_seconds, iter_jsonl
from ..base.paths import run_dir
from ..base.records import RunView
from ..base.states import HEADLINE_METRICS, Metric
from ..readers import rollouts
from ..readers.metrics import (
    DIGEST_BYTES,
    ENV_FILE,
    MAX_ROWS,
    TRAINER_FILE,
    RunMetrics,
    merge_row,
    metric_keys,
    metric_summary,
    metrics_bytes,
    ordered_keys,
    row_step,
)
from ..readers.metrics_digest import MetricsDigest
from .compare import config_values
from .cost import cost_card
from .report import process_summaries, run_audit, running_time_s, wandb_url
from .results import checkpoint_paths

FORMATS = ("csv", "json")
CHART_POINTS = 600  # points drawn per headline series at most: a 100k-step run stays a small page
# Points for all the other charts together: a run logs dozens of metrics (signals/, tokens/, time/...), and
# 600 points each made a 45-metric run's page 382 KB. Each gets its share, never below SMALL_CHART_MIN.
SMALL_CHARTS_POINTS = 4000
SMALL_CHART_MIN = 60
MARKED_POINTS = 80  # an unsmoothed series of at most this many points is drawn with a dot on each
SMOOTH_WEIGHT = (
    0.6  # the moving average over each chart's drawn values: the past's weight, as W&B's and the dashboard's
)
SMOOTH_MIN_POINTS = 30  # a shorter series (evals) is drawn as it is, each point marked: an average would lag it
ROLLOUT_CHARS = 600
ROLLOUTS_PER_SIDE = 3
EVAL_PREFIX = "eval/"
EVAL_TABLE_ROWS = 200  # a longer eval history is shown evenly thinned (`hermes-rl metrics` has all of it)


# -- metrics ----------------------------------------------------------------------------------


def _all_metrics(run_id: str, bounded: bool = False):
    """A RunMetrics over every row of the run's metrics files (nothing thinned); `bounded`: at most
    MAX_ROWS rows, a long run's from its digest (every block's extremes kept)."""
    runs.get_run(run_id, sample=False)  # NotFound for an unknown run, before any file is read
    long = bounded and metrics_bytes(run_dir(run_id)) > DIGEST_BYTES
    metrics = RunMetrics(run_dir(run_id), max_rows=MAX_ROWS if long else sys.maxsize)
    metrics.poll()
    return metrics


def _all_rows(run_id: str) -> list[dict]:
    return _all_metrics(run_id).rows


def metrics_table(run_id: str, keys: list[str] | None = None) -> tuple[list[str], list[dict]]:
    """(columns, rows): step and time, then `keys` (default: every numeric metric, headline ones first).
    BadInput naming the unknown keys and the known ones."""
    rows = _all_rows(run_id)
    known = metric_keys(rows)
    wanted = _wanted_keys(run_id, keys, known)
    columns = ["step", "time", *wanted]
    return columns, [{c: row.get(c) for c in columns} for row in rows]


def _wanted_keys(run_id: str, keys: list[str] | None, known: list[str]) -> list[str]:
    """The metric columns asked for (every known one when none): BadInput naming unknown ones."""
    if not keys:
        return known
    wanted = list(dict.fromkeys(k.strip() for k in keys if k.strip()))
    unknown = [k for k in wanted if k not in known]
    if unknown:
        raise BadInput(
            f"run {run_id} has no metric {', '.join(map(repr, unknown))}"[:300],
            hint=f"its metrics: {', '.join(known)}"[:600] if known else "it has logged no metrics yet",
        )
    return wanted


def format_metrics(columns: list[str], rows: list[dict], fmt: str) -> str:
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return json.dumps(rows, indent=None, separators=(",", ":")) + "\n"
    out = io.StringIO()
    # Text cells quoted: a carriage return inside an environment's metric name stays inside its cell.
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow([inert_cell(c) for c in columns])
    for row in rows:
        writer.writerow([number_cell(row.get(c)) for c in columns])
    return out.getvalue()


def stream_metrics(run_id: str, keys: list[str] | None, fmt: str, out: TextIO) -> tuple[int, int]:
    """metrics_table written as format_metrics writes it, row by row: memory bounded whatever the run's
    length (the key names come from the run's digest, readers.metrics_digest). (rows, columns) written.
    Rows are merged by step as the files go; a run whose files hold a step out of order (rare: a writer
    that started again) is merged in memory by metrics_table."""
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    runs.get_run(run_id, sample=False)  # NotFound for an unknown run, before any file is read
    digest = MetricsDigest(run_dir(run_id)).update()
    known = ordered_keys(digest.keys())
    wanted = _wanted_keys(run_id, keys, known)
    columns = ["step", "time", *wanted]
    if not digest.ordered():  # steps written out of order are merged as metrics_table merges them: in memory
        columns, rows = metrics_table(run_id, keys)
        out.write(format_metrics(columns, rows, fmt))
        return len(rows), len(columns)
    count = 0
    if fmt == "json":
        out.write("[")
        for row in merged_rows(run_dir(run_id), digest.environments()):
            out.write(("," if count else "") + json.dumps({c: row.get(c) for c in columns}, separators=(",", ":")))
            count += 1
        out.write("]\n")
        return count, len(columns)
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow([inert_cell(c) for c in columns])
    for row in merged_rows(run_dir(run_id), digest.environments()):
        writer.writerow([number_cell(row.get(c)) for c in columns])
        count += 1
    return count, len(columns)


def merged_rows(folder: Path, environments: list[str]) -> Iterator[dict]:
    """Trainer and environment rows merged by step as RunMetrics merges them (the trainer's time wins,
    an environment's values follow the trainer's; KEY@ENVIRONMENT keys when there are several), streamed."""
    several = len(environments) > 1
    streams = [_stepped(folder / TRAINER_FILE), _stepped(folder / ENV_FILE)]
    heads = [next(stream, None) for stream in streams]
    pending: dict[int, dict] = {}
    while heads[0] is not None or heads[1] is not None:
        # the stream whose next step is smaller goes first; at a tie the trainer's row is merged first
        side = 0 if heads[1] is None or (heads[0] is not None and heads[0][0] <= heads[1][0]) else 1
        step, row = heads[side]  # type: ignore[misc]  # the side chosen has a row
        merge_row(pending.setdefault(step, {"step": step}), row, from_env=bool(side), several=several)
        heads[side] = next(streams[side], None)
        low = min((h[0] for h in heads if h is not None), default=None)
        for done in sorted(s for s in pending if low is None or s < low):
            yield pending.pop(done)


def _stepped(path: Path) -> Iterator[tuple[int, dict]]:
    for _end, row in iter_jsonl(path):
        step = row_step(row)
        if step is not None:
            yield step, row


# A spreadsheet runs a cell starting with one of these as a formula (=HYPERLINK(…), +cmd|…, @SUM…).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(text: Any) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading quote.
    Metric names are chosen by environments, so every header goes through here."""
    text = str(text)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def number_cell(value: Any) -> Any:
    """Every export column is numeric (step, time, metrics): a finite number stays, anything else an
    environment logged in its place (a text value, NaN) is left empty."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ""
    return value


# -- the report's pieces ------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def _when(value: Any) -> str:
    seconds = epoch_seconds(value)
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds)) if seconds else "–"


def _thin(points: list, limit: int = CHART_POINTS) -> list:
    """At most `limit` of `points`, evenly spaced, the first and the last kept."""
    if len(points) <= limit:
        return points
    stride = (len(points) - 1) / (limit - 1)
    return [points[round(i * stride)] for i in range(limit)]


def _extremes(points: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """At most about `limit` of a series' points: per bucket its lowest and highest (in step order), the
    first and the last kept, so a spike or a collapse stays on the chart however long the run."""
    if len(points) <= limit:
        return points
    buckets = max(1, (limit - 2) // 2)
    size = (len(points) - 2) / buckets
    out = [points[0]]
    for b in range(buckets):
        chunk = points[1 + round(b * size) : 1 + round((b + 1) * size)]
        if chunk:
            low, high = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
            out.extend(sorted({low, high}))
    out.append(points[-1])
    return out


def _ema(points: list[tuple[int, float]], weight: float = SMOOTH_WEIGHT) -> list[tuple[int, float]]:
    out, average = [], None
    for step, value in points:
        average = value if average is None else weight * average + (1 - weight) * value
        out.append((step, average))
    return out


def _axis_num(value: float) -> str:
    """An axis label that fits the chart's left margin (at most 9 characters)."""
    if value == 0:
        return "0"
    if abs(value) < 1e-3 or abs(value) >= 1e6:
        return f"{value:.2e}"
    return f"{value:.4g}"


def smoothable(title: str, points: list[tuple[int, float]]) -> bool:
    """Whether a series gets a moving average: a dense per-step series of at least SMOOTH_MIN_POINTS. An
    evaluation, or a sparse series (logged at under half of the steps it spans), is drawn as it is: an
    average over points far apart lags what was measured by as many steps."""
    if title.startswith(EVAL_PREFIX) or len(points) < SMOOTH_MIN_POINTS:
        return False
    span = points[-1][0] - points[0][0] + 1
    return len(points) * 2 >= span


def svg_chart(
    title: str, points: list[tuple[int, float]], width: int = 560, height: int = 200, limit: int = CHART_POINTS
) -> str:
    """A line chart of (step, value) as inline SVG: the raw values faint, their moving average bold
    (dense per-step series only: smoothable), the value range on the left and the step range below."""
    left, right, top, bottom = 64, 12, 26, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    raw = _extremes(points, limit)
    smooth = _ema(_thin(points, limit)) if smoothable(title, points) else []
    steps = [s for s, _ in points]
    values = [v for _, v in points]
    low, high = min(values), max(values)
    if high - low < 1e-12:  # a constant: an axis around its value (±10 %), not one a unit wide
        pad = abs(low) * 0.1 or 0.5
        low, high = low - pad, high + pad
    first, last = min(steps), max(steps)
    span = max(1, last - first)

    def xy(step: int, value: float) -> str:
        x = left + (step - first) / span * plot_w
        y = top + (1 - (value - low) / (high - low)) * plot_h
        return f"{x:.1f},{y:.1f}"

    def dot(step: int, value: float, cls: str, radius: float) -> str:
        x, y = xy(step, value).split(",")
        return f'<circle class="{cls}" cx="{x}" cy="{y}" r="{radius}"/>'

    def line(series, cls: str) -> str:
        if len(series) == 1:
            step, value = series[0]
            return dot(step, value, cls, 3)
        return f'<polyline class="{cls}" points="{" ".join(xy(s, v) for s, v in series)}"/>'

    grid = "".join(
        f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{top + f * plot_h:.1f}" y2="{top + f * plot_h:.1f}"/>'
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    last_value = values[-1]
    # a dot per point where points are few (evaluations): hundreds of dots only weigh the page down
    marks = "" if smooth or len(raw) > MARKED_POINTS else "".join(dot(s, v, "mark", 2.5) for s, v in raw)
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<text class="title" x="{left}" y="16">{_e(title)}</text>'
        f'<text class="last" x="{width - right}" y="16" text-anchor="end">last {_e(_num(last_value))}</text>'
        f"{grid}"
        f'<rect class="frame" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>'
        f'<text class="axis" x="{left - 6}" y="{top + 4}" text-anchor="end">{_e(_axis_num(high))}</text>'
        f'<text class="axis" x="{left - 6}" y="{top + plot_h}" text-anchor="end">{_e(_axis_num(low))}</text>'
        f'<text class="axis" x="{left}" y="{height - 8}">step {first}</text>'
        f'<text class="axis" x="{left + plot_w}" y="{height - 8}" text-anchor="end">step {last}</text>'
        + (line(raw, "raw") + line(smooth, "smooth") if smooth else line(raw, "smooth") + marks)
        + "</svg>"
    )


def _all_series(rows: list[dict], keys: list[str]) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of every key, in one pass over the rows (finite numbers only)."""
    wanted = set(keys)
    out: dict[str, list[tuple[int, float]]] = {key: [] for key in keys}
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for key, value in row.items():
            if key in wanted and type(value) in (int, float) and math.isfinite(value):
                out[key].append((step, float(value)))
    return out


def _table(headers: list[str] | None, rows: list[list[Any]], cls: str = "") -> str:
    """A table of cells already escaped; no header row without `headers`."""
    head = "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead>" if headers else ""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{cls}">{head}<tbody>{body}</tbody></table>'


def _rollout_section(run_id: str) -> str:
    try:
        latest = rollouts.read_rollouts(run_id, order="best", chars=ROLLOUT_CHARS)
    except (HermesError, OSError):
        return "<p class='muted'>This run recorded no rollouts.</p>"
    steps = [latest["first_step"], latest["step"]] if latest["first_step"] != latest["step"] else [latest["step"]]
    parts = []
    for step in steps:
        try:
            data = latest if step == latest["step"] else rollouts.read_rollouts(run_id, step=step, chars=ROLLOUT_CHARS)
        except (HermesError, OSError):
            continue
        ranked = [c for c in data["completions"] if c.get("reward") is not None]
        ranked.sort(key=lambda c: c["reward"], reverse=True)
        # The worst are those below the best reward: when every answer scored the same there are none.
        below = [c for c in ranked[::-1] if c["reward"] < ranked[0]["reward"]] if ranked else []
        if ranked and not below:
            parts.append(f"<h3>step {step}: all {len(ranked)} completions scored {_e(_num(ranked[0]['reward']))}</h3>")
        for side, chosen in (("best", ranked[:ROLLOUTS_PER_SIDE]), ("worst", below[:ROLLOUTS_PER_SIDE])):
            if not chosen:
                continue
            cards = "".join(
                f'<div class="rollout {side}"><div class="meta">reward {_e(_num(c.get("reward")))} · '
                f"advantage {_e(_num(c.get('advantage')))} · group {_e(c.get('group'))}"
                f"{' · ' + _e(c['finish']) if c.get('finish') else ''}</div>"
                f'<div class="prompt">{_e(c.get("prompt"))}</div><pre>{_e(c.get("text"))}</pre></div>'
                for c in chosen
            )
            parts.append(f"<h3>step {step}: {side} {len(chosen)} of {len(ranked)}</h3>{cards}")
    return "".join(parts)


def _process_section(run: RunView) -> str:
    failures: dict[str, str] = {}
    try:
        for event in runs.run_events(run["run_id"]):
            if event.get("event") == "process_state" and event.get("state") == "failed" and event.get("process"):
                failures[str(event["process"])] = str(event.get("detail") or event.get("message") or "")
    except (HermesError, OSError):
        pass
    rows = []
    procs = process_summaries(run)
    # where each ran, once any ran elsewhere than here: its job and its launcher's line, as `status` says it
    elsewhere = any((proc.get("launcher") or "local") != "local" for proc in procs)
    for proc in procs:
        name = str(proc.get("name"))
        exit_code = proc.get("exit_code")
        where = process_place_text(proc, "–")
        if (proc.get("launcher") or "local") != "local":
            where = f"{process_id_text(proc, '')} {where}".strip()
        rows.append(
            [
                _e(name),
                *([_e(where)] if elsewhere else []),
                f'<span class="state {_e(proc.get("state"))}">{_e(proc.get("state"))}</span>',
                _e("–" if exit_code is None else exit_code),
                _e(proc.get("restarts", 0)),
                f"<pre>{_e(failures[name][-1500:])}</pre>" if name in failures else "",
            ]
        )
    columns = ["process", *(["where"] if elsewhere else []), "how it ended", "exit code", "restarts", "failure"]
    return _table(columns, rows, "procs")


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;color:#1b1f24;
background:#fff;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:14px;margin:14px 0 6px}.muted{color:#57606a}.status{font-weight:600;padding:1px 8px;border-radius:10px}
.status.completed{background:#dafbe1;color:#116329}.status.failed,.status.lost{background:#ffebe9;color:#a40e26}
.status.stopped{background:#fff8c5;color:#7d4e00}.status.running,.status.starting{background:#ddf4ff;color:#0a3069}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}.card{border:1px solid #d0d7de;border-radius:6px;
padding:8px 14px;min-width:150px}.card b{display:block;font-size:20px}
.charts{display:flex;flex-wrap:wrap;gap:10px}.chart{border:1px solid #d0d7de;border-radius:6px;background:#fff}
.chart .title{font-weight:600;font-size:13px}.chart .last,.chart .axis{font-size:11px;fill:#57606a}
.chart .grid{stroke:#eaeef2}.chart .frame{fill:none;stroke:#d0d7de}
.chart .raw{fill:none;stroke:#8cb4e8;stroke-width:1}.chart circle.raw{fill:#8cb4e8}
.chart .smooth{fill:none;stroke:#0550ae;stroke-width:2.2}.chart .mark,.chart circle.smooth{fill:#0550ae}
table{border-collapse:collapse;margin:6px 0;font-size:13px}th,td{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}td pre{margin:0;max-width:640px}
pre{white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
.rollout{border-left:4px solid #d0d7de;padding:4px 10px;margin:6px 0;background:#f6f8fa}
.rollout.best{border-color:#1a7f37}.rollout.worst{border-color:#cf222e}.rollout .meta{font-size:12px;color:#57606a}
.rollout .prompt{font-size:12px;color:#57606a;white-space:pre-wrap;max-height:5.5em;overflow:hidden}
.state.failed{color:#a40e26;font-weight:600}.state.exited{color:#116329}
.config{columns:2;column-gap:24px}.config td:first-child{font-family:ui-monospace,Menlo,monospace}
"""


def _audit_section(run: RunView) -> str:
    """The audit: verdict, one line per reason, the signals (core.base.audit_rule; docs/audit.md)."""
    result = run_audit(run)
    reasons = "".join(f"<li>{_e(r)}</li>" for r in result["reasons"])
    return (
        f'<p><span class="status">{_e(result["verdict"])}</span> {_e(signal_summary(result["signals"]))}</p>'
        + (f"<ul>{reasons}</ul>" if reasons else "")
        + "<p class='muted'>What each signal means and what to do: docs/audit.md.</p>"
    )


def html_report(run_id: str) -> str:
    """The run's report as one HTML page (see the module's docstring). NotFound for an unknown run."""
    run = runs.get_run(run_id, sample=False)
    metrics = _all_metrics(run_id, bounded=True)  # charts thin to CHART_POINTS anyway
    rows = metrics.rows
    keys = metric_keys(rows)
    status = str(run.get("status"))
    series = _all_series(rows, keys)
    card_html = _cards_html(run, metrics.trainer_step or 0, series)
    charts = _charts_html(keys, series)
    eval_html = _evals_html(run_id, rows, keys)
    config_html = _config_html(run_id)
    facts_html = _facts_html(run_id, run)
    reason = run.get("reason")
    subtitle = f" — {_e(reason)}" if reason else ""
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>hermes-rl run {_e(run_id)}</title><style>{CSS}</style></head>
<body>
<h1>run {_e(run_id)} <span class="status {_e(status)}">{_e(status)}</span></h1>
<p class="muted">{_e(run.get("environment"))} on the {_e(run.get("profile"))} profile{subtitle}</p>
<div class="cards">{card_html}</div>
{facts_html}
<h2>Audit: is it learning?</h2>{_audit_section(run)}
<h2>Metrics</h2>
<p class="muted">Faint: every logged value; bold: its exponential moving average (smoothing {SMOOTH_WEIGHT},
as W&amp;B's); an evaluation, a series of fewer than {SMOOTH_MIN_POINTS} values or one logged at under half of
its steps is drawn as it is, each value marked.</p>
<div class="charts">{charts or "<p class='muted'>No metrics logged.</p>"}</div>
<h2>Evaluations</h2>{eval_html}
<h2>Rollouts</h2>{_rollout_section(run_id)}
<h2>Processes</h2>{_process_section(run)}
<h2>Config</h2><div class="config">{config_html}</div>
<p class="muted">Written by hermes-rl on {generated}.</p>
</body></html>
"""


def _cards_html(run: RunView, steps_done: int, series: dict) -> str:
    """The cards at the top: steps, running time, eval accuracy, recent reward, cost."""
    total = run.get("total_steps")
    accuracy = metric_summary(series.get(str(Metric.EVAL_PERCENT_CORRECT), []), Metric.EVAL_PERCENT_CORRECT) or {}
    reward = series.get(str(Metric.REWARD_MEAN), [])
    tail = [v for _, v in reward[-20:]]
    cards = [
        ("steps", f"{steps_done:,}" + (f" / {total:,}" if isinstance(total, int) else "")),
        ("running time", human_duration(running_time_s(run) or 0)),
        ("eval accuracy, first → best → last", " → ".join(_num(accuracy.get(k), 3) for k in ("first", "best", "last")))
        if accuracy
        else ("eval accuracy", "–"),
        (f"reward/mean, mean of last {len(tail)} steps", _num(sum(tail) / len(tail), 3) if tail else "–"),
        ("cost", cost_card(run)),
    ]
    card_html = "".join(f'<div class="card"><span class="muted">{_e(k)}</span><b>{_e(v)}</b></div>' for k, v in cards)

    return card_html


def _charts_html(keys: list[str], series: dict) -> str:
    """The headline metrics' charts large, every other metric's small (their points shared out)."""
    headline = [str(k) for k in HEADLINE_METRICS if str(k) in keys]
    ordered = headline + [k for k in keys if k not in headline]
    small = [k for k in ordered if k not in headline and series.get(k)]
    small_limit = max(SMALL_CHART_MIN, SMALL_CHARTS_POINTS // max(1, len(small)))
    return "".join(
        svg_chart(key, series[key]) if key in headline else svg_chart(key, series[key], 368, 150, small_limit)
        for key in ordered
        if series.get(key)
    )


def _evals_html(run_id: str, rows: list[dict], keys: list[str]) -> str:
    """The table of evaluations, thinned to EVAL_TABLE_ROWS (the command for all of them said)."""
    eval_keys = [k for k in keys if k.startswith(EVAL_PREFIX)]
    evaluated = [row for row in rows if any(isinstance(row.get(k), (int, float)) for k in eval_keys)]
    shown = _thin(evaluated, EVAL_TABLE_ROWS)
    eval_rows = [[_e(row["step"]), *(_e(_num(row.get(k))) for k in eval_keys)] for row in shown]
    eval_note = (
        f"<p class='muted'>{len(shown)} of {len(evaluated)} evaluations, evenly spaced; all of them: "
        f"<code>hermes-rl metrics {_e(run_id)} --keys {_e(' '.join(eval_keys))}</code></p>"
        if len(shown) < len(evaluated)
        else ""
    )
    return (
        eval_note + _table(["step", *eval_keys], eval_rows, "evals")
        if eval_rows
        else "<p class='muted'>This run logged no evaluations.</p>"
    )


def _config_html(run_id: str) -> str:
    """config.yaml's values as a table."""
    try:
        config = config_values(run_id)
    except (HermesError, OSError, ValueError):
        config = {}
    return (
        _table(
            ["field", "value"], [[_e(k), _e(json.dumps(v) if not isinstance(v, str) else v)] for k, v in config.items()]
        )
        if config
        else "<p class='muted'>No config.yaml recorded for this run.</p>"
    )


def _facts_html(run_id: str, run: RunView) -> str:
    """Where the run came from, when it ran, where its checkpoint and W&B records are."""
    checkpoint, tinker_path = checkpoint_paths(run_id)
    facts = [
        ("environment", run.get("environment")),
        ("profile", run.get("profile")),
        ("created", _when(run.get("created_at"))),
        ("started", _when(run.get("started_at"))),
        ("ended", _when(run.get("ended_at"))),
        ("checkpoint", checkpoint),
        ("tinker path", tinker_path),
    ]
    wandb_folders = sorted(str(p) for p in (run_dir(run_id) / "wandb").glob("offline-run-*"))
    if wandb_folders:
        facts.append(("W&B (offline)", "wandb sync " + " ".join(wandb_folders)))
    elif wandb_url(run):
        facts.append(("W&B", wandb_url(run)))
    return _table(None, [[_e(k), _e(v)] for k, v in facts if v], "facts")


def write_report(run_id: str, path: str | Path | None = None) -> Path:
    """Write the report (default `<run folder>/report.html`); its path."""
    text = html_report(run_id)
    target = Path(path) if path else run_dir(run_id) / "report.html"
    if target.is_dir():
        target = target / f"report-{run_id}.html"
    try:
        atomic_write_text(target, text)  # private like every state file
    except (OSError, HermesError) as exc:
        raise BadInput(f"cannot write {target}: {exc}"[:300], hint="choose a writable path with -o") from None
    return target
