"""A run's metrics read incrementally from metrics.jsonl (trainer) and env_metrics.jsonl (environments).

Both files are append-only JSONL (DESIGN §4). Readers remember their byte offset and read only what
was appended; a partial last line is left for the next poll, garbage lines are skipped, NaN/inf
become None (base.fsutil.parse_jsonl_line). Environment rows join the trainer row of the same step.
`last_metrics` gives each key's latest finite value, environment rows merged (over every row, or over
the files' last `tail_bytes`). A run whose rows name several environments also gets each environment's
metrics under its own keys, `KEY@ENVIRONMENT` (eval/percent_correct@gsm8k), besides the merged ones;
for the newest trainer row alone, read backwards with
base.fsutil.last_jsonl_row (what the run library does).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from ..base.fsutil import first_jsonl_row, iter_jsonl, iter_jsonl_spans, last_jsonl_row, open_regular
from ..base.paths import run_dir
from ..base.states import HEADLINE_METRICS, HIGHER_IS_BETTER, REWARD_WINDOW, Metric
from .metrics_digest import MetricsDigest

TRAINER_FILE = "metrics.jsonl"
ENV_FILE = "env_metrics.jsonl"
_NOT_METRICS = {Metric.STEP, Metric.TIME, "source", "env", "environment"}
# Rows a live reader keeps. Past this the older half is thinned (every other row dropped), so a reader
# of a days-long run stays bounded in memory and per-update work while charts keep the curve's shape.
MAX_ROWS = 10_000
# Past this many bytes of metrics, views read the run's digest (metrics_digest.py) instead of every row;
# a reader asked for more rows than DIGEST_SEED_MAX_ROWS (an export: every row) reads them all.
DIGEST_BYTES = 16 << 20
DIGEST_SEED_MAX_ROWS = 1_000_000
SEED_TAIL_BYTES = 256 << 10


class JsonlTail:
    """Incremental, offset-based reader of one JSONL file. With `tail_bytes`, a first look at a big
    file starts at the first line within its last tail_bytes (for readers that want recent rows only)."""

    def __init__(self, path: str | os.PathLike, tail_bytes: int | None = None):
        self.path = Path(path)
        self.offset = 0
        self.resets = 0  # times the file was truncated or replaced (rows before are stale)
        self.tail_bytes = tail_bytes
        self._inode: tuple[int, int] | None = None

    def poll(self) -> list[dict]:
        """New complete lines since the last poll (empty when nothing changed or the file is absent)."""
        return [obj for _start, _end, obj in self.poll_spans()]

    def poll_spans(self) -> list[tuple[int, int, dict]]:
        """Like poll, with each row's byte span in the file: (start, end, row)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        inode = (st.st_dev, st.st_ino)
        if self._inode is not None and (inode != self._inode or st.st_size < self.offset):
            self.offset = 0
            self.resets += 1
        self._inode = inode
        if self.tail_bytes is not None and self.offset == 0 and st.st_size > self.tail_bytes:
            self.offset = _line_start_after(self.path, st.st_size - self.tail_bytes)
        if st.st_size == self.offset:
            return []
        rows = []
        for start, end, obj in iter_jsonl_spans(self.path, self.offset):
            rows.append((start, end, obj))
            self.offset = end
        # iter_jsonl_spans only yields parseable lines; skip past trailing garbage lines too.
        self.offset = _complete_end(self.path, self.offset, st.st_size)
        return rows


def _complete_end(path: Path, offset: int, size: int) -> int:
    """Offset after the last newline in [offset, size): garbage lines after the last good row are consumed."""
    if size <= offset:
        return offset
    try:
        with open_regular(path) as handle:
            handle.seek(offset)
            data = handle.read(size - offset)
    except OSError:
        return offset
    last = data.rfind(b"\n")
    return offset + last + 1 if last >= 0 else offset


def _line_start_after(path: Path, offset: int) -> int:
    """Offset of the first line that starts after `offset` (0 when the file cannot be read)."""
    try:
        with open_regular(path) as handle:
            handle.seek(offset)
            handle.readline()
            return handle.tell()
    except OSError:
        return 0


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step(row: dict) -> int | None:
    step = row.get("step")
    if isinstance(step, bool):
        return None
    if isinstance(step, (int, float)) and math.isfinite(step):
        return int(step)
    return None


class RunMetrics:
    """Merged, incrementally updated metrics of one run: rows ordered by step.

    `max_rows` bounds what is kept (older rows are thinned); `tail_bytes` makes the first read start
    near the files' ends, for readers that only want recent rows (a runs-table sparkline)."""

    def __init__(self, folder: str | os.PathLike, max_rows: int = MAX_ROWS, tail_bytes: int | None = None):
        folder = Path(folder)
        self.folder = folder
        # a first read of a long run starts from its digest (a downsampled history) and reads on from there
        self._seed = tail_bytes is None and max_rows < DIGEST_SEED_MAX_ROWS
        self.trainer = JsonlTail(folder / TRAINER_FILE, tail_bytes)
        self.env = JsonlTail(folder / ENV_FILE, tail_bytes)
        self.max_rows = max(2, max_rows)
        self.version = 0  # bumped on every change, so callers can cache what they derive from rows
        self._by_step: dict[int, dict] = {}
        self._sorted_rows: list[dict] | None = None  # cache of `rows`: extended in order, rebuilt otherwise
        self._keys: set[str] = set()
        self._resets = 0
        self.last_time: float | None = None  # newest "time" seen (for stall detection)
        # The steps the trainer has done: its newest row's step. Environment rows can name the step after
        # the last (the batch being gathered when training ended), so the merged rows' last step overstates it.
        self.trainer_step: int | None = None
        self.environments: list[str] = []  # names the environment rows carry, in first-seen order

    def poll(self) -> bool:
        """Read what was appended; True when anything changed."""
        seeded = False
        if self._seed:
            self._seed = False
            seeded = metrics_bytes(self.folder) > DIGEST_BYTES and self._seed_from_digest()
        trainer_rows = self.trainer.poll()
        env_rows = self.env.poll()
        resets = self.trainer.resets + self.env.resets
        if resets != self._resets:
            # A file was truncated or replaced: rebuild from both files' starts.
            self._resets = resets
            self._by_step.clear()
            self._sorted_rows = None
            self._keys.clear()
            self.trainer_step = None
            self.trainer.offset = self.env.offset = 0
            trainer_rows, env_rows = self.trainer.poll(), self.env.poll()
        if self._new_environments(env_rows) and len(self.environments) == 2:
            # A second environment: from now on rows carry per-environment keys, the earlier ones too.
            self._by_step.clear()
            self._sorted_rows = None
            self._keys.clear()
            self.trainer.offset = self.env.offset = 0
            trainer_rows, env_rows = self.trainer.poll(), self.env.poll()
        changed = seeded
        for row in trainer_rows:
            changed |= self._merge(row, from_env=False)
            step = _step(row)
            if step is not None and (self.trainer_step is None or step > self.trainer_step):
                self.trainer_step = step
        for row in env_rows:
            changed |= self._merge(row, from_env=True)
        if changed:
            self.version += 1
            while len(self._by_step) > self.max_rows:
                self._thin()
        return changed

    def _seed_from_digest(self) -> bool:
        """Rows of the digest's downsampled series (each key's block minima and maxima, few enough for
        max_rows), then the readers go on from where the digest ends: a long run opens in bounded time
        and memory, its charts keeping their spikes. False when there is nothing to seed from."""
        digest = MetricsDigest(self.folder).update()
        keys = digest.keys()
        if not keys:
            return False
        points = max(64, self.max_rows // (2 * len(keys)) - 2)  # half of max_rows: thinning would drop extremes
        for key in keys:
            interned = sys.intern(key)
            for step, value in digest.series(key, points):
                self._by_step.setdefault(step, {"step": step})[interned] = value
            self._keys.add(interned)
        self._sorted_rows = None
        self.environments = digest.environments()
        blocks = digest.trainer["blocks"]
        self.trainer_step = blocks[-1][2] if blocks else None
        time_of = digest.trainer["keys"].get("time")
        self.last_time = float(time_of[1]) if time_of else None
        # the last rows are read whole (a sparkline, a trailing mean and last values need every one of them)
        for tail, state in ((self.trainer, digest.trainer), (self.env, digest.env)):
            row_bytes = state["offset"] / max(1, state["rows"])  # a quarter of max_rows at most
            start = state["offset"] - min(SEED_TAIL_BYTES, int(row_bytes * self.max_rows / 4))
            tail.offset = _line_start_after(tail.path, start) if start > 0 else 0
        return True

    def _new_environments(self, rows: list[dict]) -> bool:
        added = False
        for row in rows:
            name = row.get("environment")
            if isinstance(name, str) and name and name not in self.environments:
                self.environments.append(sys.intern(name))
                added = True
        return added

    def _thin(self) -> None:
        steps = sorted(self._by_step)
        for step in steps[1 : len(steps) // 2 : 2]:  # the first row stays: charts start where the run did
            del self._by_step[step]
        self._sorted_rows = None

    def _merge(self, row: dict, from_env: bool) -> bool:
        step = _step(row)
        if step is None:
            return False
        merged = self._by_step.get(step)
        if merged is None:
            merged = self._by_step[step] = {"step": step}
            # Steps almost always arrive in order: extend the sorted cache instead of re-sorting.
            cached = self._sorted_rows
            if cached is not None and (not cached or step > cached[-1]["step"]):
                cached.append(merged)
            else:
                self._sorted_rows = None
        environment = row.get("environment") if from_env and len(self.environments) > 1 else None
        for key, value in row.items():
            if key == "step":
                continue
            if isinstance(environment, str) and key not in _NOT_METRICS and _number(value) is not None:
                own = sys.intern(f"{key}@{environment}")
                merged[own] = value
                self._keys.add(own)
            # Every row repeats the same key names (and environment names): share one string each,
            # which halves what a 10,000-row reader holds.
            key = sys.intern(key)
            if isinstance(value, str) and len(value) <= 64:
                value = sys.intern(value)
            if key == "time":
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    if not from_env or "time" not in merged:
                        merged["time"] = value
                    self.last_time = max(self.last_time or 0.0, float(value))
                continue
            merged[key] = value
            if key not in _NOT_METRICS and _number(value) is not None:
                self._keys.add(key)
        return True

    @property
    def rows(self) -> list[dict]:
        if self._sorted_rows is None:
            self._sorted_rows = [self._by_step[s] for s in sorted(self._by_step)]
        return self._sorted_rows

    def keys(self) -> list[str]:
        head = [str(k) for k in HEADLINE_METRICS if k in self._keys]
        return head + sorted(self._keys - set(head))

    def series(self, key: str, tail: int | None = None) -> list[tuple[int, float]]:
        """(step, value) of key, over the last `tail` rows when given (cheap for sparklines)."""
        return metric_series(self.rows if tail is None else self.rows[-tail:], key)

    def last(self) -> dict:
        return last_values(self.rows)


row_step = _step


def merge_row(merged: dict, row: dict, *, from_env: bool, several: bool) -> None:
    """Merge one file row into the merged row of its step as RunMetrics does (the stream export's rule)."""
    environment = row.get("environment") if from_env and several else None
    for key, value in row.items():
        if key == "step":
            continue
        if isinstance(environment, str) and key not in _NOT_METRICS and _number(value) is not None:
            merged[f"{key}@{environment}"] = value
        if key == "time":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if not from_env or "time" not in merged:
                    merged["time"] = value
            continue
        merged[key] = value


def ordered_keys(keys) -> list[str]:
    """Metric keys as metric_keys orders them: headline keys first, then the rest alphabetically."""
    present = set(keys)
    head = [str(k) for k in HEADLINE_METRICS if k in present]
    return head + sorted(present - set(head))


def metric_keys(rows) -> list[str]:
    """Numeric metric keys present in rows: headline keys first, then the rest alphabetically."""
    present: set[str] = set()
    for row in rows:
        for key, value in row.items():
            if key not in _NOT_METRICS and _number(value) is not None:
                present.add(key)
    head = [str(k) for k in HEADLINE_METRICS if k in present]
    return head + sorted(present - set(head))


def read_metrics(run_id: str, tail_bytes: int | None = None) -> list[dict]:
    """Trainer rows merged with environment rows by step, ordered by step (with tail_bytes: only the
    rows in the files' last tail_bytes)."""
    metrics = RunMetrics(run_dir(run_id), tail_bytes=tail_bytes)
    metrics.poll()
    return metrics.rows


def last_values(rows: list[dict]) -> dict:
    """Latest finite value of every metric key, plus the last step and time."""
    out: dict = {}
    for row in rows:
        for key, value in row.items():
            if key in ("step", "time") or _number(value) is not None:
                out[key] = value
    return out


def last_metrics(run_id: str, tail_bytes: int | None = None) -> dict:
    return last_values(read_metrics(run_id, tail_bytes))


def recent_points(rows, width: int) -> dict[str, list[tuple[int, float]]]:
    """The last `width` (step, value) of every numeric key of `rows` (oldest first), in one pass from the
    end: what a sparkline, a last value and a trend need, without a series per key."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in reversed(rows):
        step = _step(row)
        if step is None:
            continue
        for key, value in row.items():
            if type(value) is not float and type(value) is not int:  # (bool is neither)
                continue
            if key in _NOT_METRICS or not math.isfinite(value):
                continue
            points = out.get(key)
            if points is None:
                out[key] = [(step, float(value))]
            elif len(points) < width:
                points.append((step, float(value)))
    for points in out.values():
        points.reverse()
    return out


def metric_series(rows, key: str) -> list[tuple[int, float]]:
    """(step, value) for rows where key holds a finite number."""
    out = []
    for row in rows:
        value = _number(row.get(key))
        step = _step(row)
        if value is not None and step is not None:
            out.append((step, value))
    return out


def metric_summary(series: list[tuple[int, float]], key: str) -> dict | None:
    """{first, best, best_step, last, last_step} of one metric's (step, value) series (best and
    best_step null for a metric without a direction); None for an empty series."""
    if not series:
        return None
    best_step, best = max(series, key=lambda item: item[1]) if key in HIGHER_IS_BETTER else (None, None)
    return {
        "first": series[0][1],
        "best": best,
        "best_step": best_step,
        "last": series[-1][1],
        "last_step": series[-1][0],
    }


def eval_endpoints(folder: str | os.PathLike, known_first: float | None = None) -> tuple[float | None, float | None]:
    """The first and the latest eval accuracy a run's environments logged (None where there is none),
    from the head and the tail of env_metrics.jsonl only: what a runs listing shows per run. The file is
    append-only, so a first value found before (`known_first`) is kept and the head is not read again."""
    path = os.path.join(folder, ENV_FILE)
    key = str(Metric.EVAL_PERCENT_CORRECT)

    def has_eval(row: dict) -> bool:
        return _number(row.get(key)) is not None

    if known_first is None:
        first = first_jsonl_row(path, has_eval, max_scan=256 << 10)
        known_first = _number(first[key]) if first else None
    last = last_jsonl_row(path, max_scan=256 << 10, where=has_eval)
    return (known_first, _number(last[key]) if last else None)


def _first_step(path: str, where_end: bool) -> int | None:
    has_step = lambda row: _step(row) is not None  # noqa: E731
    row = last_jsonl_row(path, where=has_step) if where_end else first_jsonl_row(path, has_step)
    return None if row is None else _step(row)


def run_metrics_summary(folder: str | os.PathLike, history: int = 50, series_key: str | None = None) -> dict:
    """What a results summary needs from a run's whole metrics, in memory bounded by the number of
    metric keys (not rows): {"steps_done", "final" (last_values of the merged rows), "history" (at most
    `history` merged rows, evenly spaced by step, first and last included), "series" (metric_summary
    of `series_key`)}. One streaming pass per file; a run's metrics may be hundreds of MB."""
    folder = Path(folder)
    if metrics_bytes(folder) > DIGEST_BYTES:
        return _digest_summary(folder, history, series_key)
    paths = [str(folder / TRAINER_FILE), str(folder / ENV_FILE)]
    heads = [s for s in (_first_step(p, False) for p in paths) if s is not None]
    tails = [s for s in (_first_step(p, True) for p in paths) if s is not None]
    summary: dict = {"steps_done": 0, "final": {}, "history": [], "series": None}
    if not heads and not tails:
        return summary
    low, high = min(heads + tails), max(heads + tails)
    buckets = max(1, min(history, high - low + 1))
    chosen: list[tuple[int, dict] | None] = [None] * buckets  # per bucket: (step, merged row)
    latest: dict[str, tuple[int, int, object]] = {}  # key -> (step, phase, value): last_values' order
    first = last = best = None  # (step, value) of series_key
    steps_done = None
    for phase, path in enumerate(paths):
        for _end, row in iter_jsonl(Path(path)):
            step = _step(row)
            if step is None:
                continue
            steps_done = step if steps_done is None else max(steps_done, step)
            index = 0 if buckets == 1 else min(buckets - 1, max(0, round((step - low) * (buckets - 1) / (high - low))))
            target = low + (0 if buckets == 1 else round(index * (high - low) / (buckets - 1)))
            held = chosen[index]
            if held is None or abs(step - target) < abs(held[0] - target):
                held = chosen[index] = (step, {"step": step})
            if held[0] == step:
                merged = held[1]
                for key, value in row.items():
                    if key == "step" or (key == "time" and phase and "time" in merged):
                        continue
                    merged[key] = value
            for key, value in row.items():
                if key == "step" or (key != "time" and _number(value) is None):
                    continue
                if key == "time" and phase and key in latest and latest[key][0] == step:
                    continue  # the trainer's time of a step wins, as in RunMetrics
                old = latest.get(key)
                if old is None or (step, phase) >= old[:2]:
                    latest[key] = (step, phase, value)
            value = _number(row.get(series_key)) if series_key else None
            if value is not None:
                if first is None or step < first[0]:
                    first = (step, value)
                if last is None or step >= last[0]:
                    last = (step, value)
                if best is None or value > best[1]:
                    best = (step, value)
    summary["steps_done"] = steps_done or 0
    final = {key: value for key, (_s, _p, value) in latest.items() if key != "time"}
    if steps_done is not None:
        final["step"] = steps_done
        if "time" in latest and latest["time"][0] == steps_done:
            final["time"] = latest["time"][2]
    summary["final"] = final
    summary["history"] = [held[1] for held in chosen if held is not None]
    if first is not None and best is not None and last is not None:  # all three are set together
        directed = series_key in HIGHER_IS_BETTER
        summary["series"] = {
            "first": first[1],
            "best": best[1] if directed else None,
            "best_step": best[0] if directed else None,
            "last": last[1],
            "last_step": last[0],
        }
    return summary


def _digest_summary(folder: Path, history: int, series_key: str | None) -> dict:
    """run_metrics_summary of a long run from its digest: the history rows are the rows at the block
    starts nearest evenly spaced steps (within BLOCK_ROWS steps of them), read back at their offsets."""
    digest = MetricsDigest(folder).update()
    steps_done = digest.steps_done()
    summary: dict = {"steps_done": steps_done or 0, "final": digest.final(), "history": [], "series": None}
    firsts = [b[0][1] for b in (digest.trainer["blocks"], digest.env["blocks"]) if b]
    if steps_done is None or not firsts:
        return summary
    low, count = min(firsts), max(1, history)
    targets = [low + round(i * (steps_done - low) / max(1, count - 1)) for i in range(count)]
    summary["history"] = digest.rows_near(targets)
    series = digest.key_summary(series_key) if series_key else None
    if series is not None and series_key not in HIGHER_IS_BETTER:
        series.update(best=None, best_step=None)
    summary["series"] = series
    return summary


def recent_rows(path: str | os.PathLike, count: int, max_bytes: int = 256 << 10) -> list[dict]:
    """The last `count` rows of a JSONL file that carry a step, from at most its last `max_bytes`."""
    path = Path(path)
    try:
        size = os.stat(path).st_size
    except OSError:
        return []
    start = _line_start_after(path, size - max_bytes) if size > max_bytes else 0
    rows = [row for _end, row in iter_jsonl(path, start) if _step(row) is not None]
    return rows[-count:]


def trailing_mean(series: list[tuple[int, float]], window: int = REWARD_WINDOW) -> dict | None:
    """{value, window, steps}: the mean of the last `window` values of a (step, value) series (`steps`:
    how many it averaged, fewer early in a run); None for an empty series."""
    recent = [value for _step_, value in series[-window:]]
    if not recent:
        return None
    return {"value": sum(recent) / len(recent), "window": window, "steps": len(recent)}


def headline_reward(folder: str | os.PathLike, window: int = REWARD_WINDOW) -> dict | None:
    """trailing_mean of reward/mean over a run's last `window` trainer steps (its metrics file's tail)."""
    rows = recent_rows(Path(folder) / TRAINER_FILE, window)
    return trailing_mean(metric_series(rows, str(Metric.REWARD_MEAN)), window)


def metrics_bytes(folder: str | os.PathLike) -> int:
    total = 0
    for name in (TRAINER_FILE, ENV_FILE):
        try:
            total += os.stat(os.path.join(folder, name)).st_size
        except OSError:
            pass
    return total


def downsampled(folder: str | os.PathLike, keys: list[str], points: int = 600) -> dict[str, list[tuple[int, float]]]:
    """{key: (step, value) series} of a run in at most about `points` points per key, each block's minimum
    and maximum kept (metrics_digest.MetricsDigest.series): what a chart of a run of any length needs."""
    digest = MetricsDigest(folder).update()
    return {key: digest.series(key, points) for key in keys}
