"""The dashboard's one background loop: watch files, sample the selected run, post coalesced updates.

Runs in a thread worker, asleep on watchfiles events. A change the user waits for (a metric row,
a run's state, an environment file, a new selection) wakes it at once; log growth only marks the
logs dirty and is picked up by the next paced cycle, which also samples the selected run's
processes at `sample_hz` (≤ 2 Hz). Each cycle posts one batch (one frame), and cycles are at least
`min_cycle_s` apart, so a live run costs the UI about one redraw a second, and a log growing at
20,000 lines/s never a message per line.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message
from watchfiles import watch as watch_files

from hermes_rl.core.base.paths import ensure_private_dir, logs_dir, runs_dir
from hermes_rl.core.base.states import FINAL

from . import backend

if TYPE_CHECKING:
    from hermes_rl.core.base.records import RunSummary
    from hermes_rl.core.base.records import RunView as RunRecordView
from .textual_compat import shutting_down

SPARK_RUNS = 30  # reward sparklines for the newest runs only
SPARK_POINTS = 12  # values in a runs-table sparkline
SPARK_ROWS = 200  # rows a sparkline reader keeps (reward/mean may be missing from some rows)
SPARK_TAIL_BYTES = 256 * 1024  # where a sparkline reader starts: near the end of a long run's files
LIST_EVERY_S = 2.0  # the live runs refreshed at least this often even without file events
# Every run listed again at least this often, and whenever the watcher is down: file events announce new,
# finished and removed runs, so between listings only the live ones are read (idle CPU does not grow
# with the finished runs on disk); the full listing is the net for an event lost.
FULL_LIST_EVERY_S = 30.0
ENVS_EVERY_S = 30.0  # environments rediscovered at least this often: places no file event reaches (a taskset
# installed into an environment interpreter, a folder made or saved after the dashboard opened)
RUNS_EVERY_S = 3.0  # a run's step/reward/sparkline in the runs table: at most this often (status at once)


class _Lines:
    """A bounded deque of lines whose line numbers stay stable as old lines fall off the front."""

    def __init__(self, max_lines: int):
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.max_lines = max_lines
        self.dropped = 0

    def extend(self, lines: list[str]) -> None:
        overflow = len(self.lines) + len(lines) - self.max_lines
        if overflow > 0:
            self.dropped += overflow
        self.lines.extend(lines)

    def window(self, start: int, end: int) -> list[str]:
        start = max(start, self.dropped) - self.dropped
        end = min(end - self.dropped, len(self.lines))
        if start >= end:
            return []
        return list(itertools.islice(self.lines, start, end))


class MergedLog:
    """Every process's new lines in arrival order, prefixed with the process name; bounded. Two views of
    the same lines: all of them, or without HTTP access lines (`show_access`, off by default); the
    count of hidden lines is `hidden`."""

    def __init__(self, max_lines: int = 20_000):
        self.max_lines = max_lines
        self._all = _Lines(max_lines)
        self._quiet = _Lines(max_lines)
        self.hidden = 0  # access lines seen (hidden while show_access is off)
        self.show_access = False
        self._lock = threading.Lock()
        self._consumed: dict[str, tuple[int, int]] = {}  # name -> (lines taken, reader.prepended then)
        self._is_access = backend.access_line_test()

    @property
    def _shown(self) -> _Lines:
        return self._all if self.show_access else self._quiet

    @property
    def line_count(self) -> int:
        shown = self._shown
        return shown.dropped + len(shown.lines)

    @property
    def first_line(self) -> int:
        return self._shown.dropped

    def lines(self, start: int, end: int) -> list[str]:
        with self._lock:
            return self._shown.window(start, end)

    def knows(self, name: str) -> bool:
        return name in self._consumed

    def take(self, name: str, reader, width: int, grown: int) -> None:
        """Append what `reader` gained since the last take (or its tail, the first time)."""
        total = reader.line_count
        seen, prepended = self._consumed.get(name, (None, 0))
        if seen is not None:
            seen += reader.prepended - prepended  # load_earlier shifted the reader's line numbers
        if seen is None or grown < 0 or seen > total:
            if seen is not None:
                self._append([f"{name:<{width}} │ \x1b[2m── log restarted (rotated or truncated) ──\x1b[0m"])
            seen = max(0, total - 200)
        # A partial last line may still grow: only complete lines go into the merged view.
        complete = reader.complete_line_count
        if complete <= seen:
            self._consumed[name] = (seen, reader.prepended)
            return
        start = max(seen, complete - self.max_lines)
        prefix = f"{name:<{width}} │ "
        self._append([prefix + line for line in reader.lines(start, complete)])
        self._consumed[name] = (complete, reader.prepended)

    def _append(self, lines: list[str]) -> None:
        quiet = [line for line in lines if not self._is_access(line)]
        with self._lock:
            self.hidden += len(lines) - len(quiet)
            self._all.extend(lines)
            self._quiet.extend(quiet)


class RunView:
    """What the dashboard reads of the selected run: its metrics and one LogReader per process log."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.metrics = backend.run_metrics(run_id)
        self.readers: dict = {}  # process name -> core's LogReader
        self.merged = MergedLog()
        self.last_sample: RunRecordView | None = None

    def name_width(self) -> int:
        return max((len(n) for n in self.readers), default=4)

    def sync_logs(self, run: RunRecordView) -> None:
        for proc in run.get("processes") or []:
            name = proc.get("name")
            path = proc.get("log")
            if not name or not path or name in self.readers:
                continue  # no path: the run library refused it (it leads outside $HERMES_HOME)
            self.readers[name] = backend.log_reader(path)

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()


def _health_key(health: Mapping[str, Any]) -> tuple:
    """What of a run's health verdict the runs pane shows: its state and whether it has a reason."""
    return health.get("state"), bool(health.get("reason"))


class LiveUpdater:
    """The loop and what it posts. Everything one cycle found arrives as one `Batch`."""

    @dataclass
    class Batch(Message):
        """Everything one cycle of the live worker found, delivered together so it costs one frame."""

        updates: list

    @dataclass
    class RunsUpdated(Message):
        """The runs list changed. A new run, a status or a stall is posted at once; a running run's
        step, reward and sparkline at most every RUNS_EVERY_S."""

        runs: list[RunSummary]
        stalled: set[str] = field(default_factory=set)
        sparks: dict[str, list[float]] = field(default_factory=dict)  # run_id -> recent reward/mean values
        stall_after_s: float = 0.0  # the threshold core.runs used (for the header's wording)
        queued: int = 0  # sweep runs waiting for a place under the local-run limit (not runs yet)

    @dataclass
    class RunSampled(Message):
        """get_run() of the selected run (processes with cpu/rss/health), posted only when it changed."""

        run_id: str
        run: RunRecordView

    @dataclass
    class MetricsUpdated(Message):
        """The selected run logged new metric rows (all of them, as the reader holds them)."""

        run_id: str
        rows: list[dict]
        trainer_step: int | None = None  # the trainer's newest step (an environment row can name the next)

    @dataclass
    class LogsGrew(Message):
        """Some of the selected run's logs grew (or were rotated) since the last cycle: one message for
        all of them, however many lines they gained; the views re-read only what is visible."""

        run_id: str
        names: tuple[str, ...]

    @dataclass
    class AlertsArrived(Message):
        """Alerts the runs' supervisors delivered since the last cycle (alerts.yaml rules with the
        dashboard channel); only those that arrive after the dashboard opened."""

        alerts: list[dict]

    @dataclass
    class EnvironmentsChanged(Message):
        """An environment file appeared, changed or went away: discovery's new list."""

        environments: list

    def __init__(
        self,
        app,
        *,
        sample_hz: float = 1.0,
        min_cycle_s: float = 0.4,
        stall_after_s: float | None = None,
        clock=time.time,
    ):
        self.app = app
        self.sample_interval = 1.0 / min(2.0, max(0.1, sample_hz))
        self.min_cycle_s = min_cycle_s
        self.stall_after_s = stall_after_s
        self.clock = clock
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self._urgent = threading.Event()  # the user is waiting (new selection): skip the cycle pacing
        self._lock = threading.Lock()
        self._selected: str | None = None
        self.view: RunView | None = None
        self._runs_dirty = True
        self._envs_dirty = False
        self._last_envs = time.monotonic()  # the dashboard discovers once as it opens
        self._envs_shown: tuple | None = None  # what the last posted listing held (posted again only if changed)
        self._last_list = 0.0
        self._last_full_list = 0.0
        self._runs: list[RunSummary] | None = None  # the last listing, live runs refreshed in place
        self._watching = False  # file events announce new and finished runs
        self._last_sample = 0.0
        self._last_runs: list[dict[str, object]] | None = None
        self._last_stalled: set[str] = set()
        self._last_structure: list | None = None
        self._last_queued = 0
        self._last_runs_post = 0.0
        self._last_sparks: dict = {}
        self._spark_cache: dict[str, tuple] = {}  # run_id -> (reader, its version, sparkline values)
        self._run_metrics: dict = {}  # run_id -> sparkline reader (core's RunMetrics) of the other runs
        self._watch_thread: threading.Thread | None = None
        self._batch: list = []
        self._alert_offset: int | None = None  # where the shared alert log was read up to

    # -- called from the UI thread ----------------------------------------------------------------
    def select(self, run_id: str | None) -> None:
        with self._lock:
            self._selected = run_id
        self._urgent.set()
        self.poke()

    def poke(self, runs: bool = True) -> None:
        if runs:
            self._runs_dirty = True
        self.wake.set()

    def rescan_environments(self) -> None:
        """Discover the environments again in the next cycle, at once (the palette's Rescan environments)."""
        self._envs_dirty = True
        self._envs_shown = None  # post the listing even when nothing changed: the user asked
        self._urgent.set()
        self.wake.set()

    def stop(self) -> None:
        self.stop_event.set()
        self._urgent.set()
        self.wake.set()

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        self._start_watcher()
        # Also ends with its app: an app torn down without on_unmount (a test interrupted mid-run) would
        # otherwise keep this thread, and asyncio.run's executor shutdown would wait for it forever.
        while not self.stop_event.is_set() and not shutting_down(self.app):
            cycle_start = time.monotonic()
            try:
                self.cycle()
            except Exception as exc:  # never let a bad file kill live updates
                self.app.call_from_thread(self.app.notify, f"live update error: {exc}", severity="warning")
            # Sleep until a prompt file event or the next paced cycle (samples and log growth); then
            # keep cycles at least min_cycle_s apart.
            self.wake.wait(max(0.0, self.sample_interval - (time.monotonic() - cycle_start)))
            self.wake.clear()
            spent = time.monotonic() - cycle_start
            if spent < self.min_cycle_s and not self._urgent.is_set():
                self._urgent.wait(self.min_cycle_s - spent)  # a new selection cuts the pause short
            self._urgent.clear()
        if self.view is not None:
            self.view.close()

    def cycle(self) -> None:
        """One pass: what changed is posted as a single Batch (one frame for the UI)."""
        self._batch = []
        try:
            self._cycle()
        finally:
            if self._batch:
                self.app.post_message(self.Batch(self._batch))

    def _post(self, message) -> None:
        self._batch.append(message)

    def _cycle(self) -> None:
        now = time.monotonic()
        if self._envs_dirty or now - self._last_envs >= ENVS_EVERY_S:
            forced, self._envs_dirty, self._last_envs = self._envs_dirty, False, now
            try:
                environments = backend.discover_environments()
                shown = tuple((e.id, e.file, e.error, e.description) for e in environments)
                if forced or shown != self._envs_shown:
                    self._envs_shown = shown
                    self._post(self.EnvironmentsChanged(environments))
            except Exception:
                pass
        with self._lock:
            selected = self._selected
        if self.view is None or self.view.run_id != selected:
            if self.view is not None:
                self.view.close()
            self.view = RunView(selected) if selected else None
            self._last_sample = 0.0
        view = self.view
        # New metric rows change the runs table too (step, reward): list in the same cycle, one frame.
        new_metrics = view is not None and view.metrics.poll()
        if self._runs_dirty or new_metrics or now - self._last_list >= LIST_EVERY_S:
            full = (
                self._runs_dirty
                or not self._watching
                or self._runs is None
                or now - self._last_full_list >= FULL_LIST_EVERY_S
            )
            self._runs_dirty = False
            self._last_list = now
            if full:
                self._last_full_list = now
            self._list_runs(full)
        self._poll_alerts()
        if view is None:
            return
        run = None
        if now - self._last_sample >= self.sample_interval * 0.9:
            self._last_sample = now
            try:
                run = backend.get_run(view.run_id, sample=True, stall_after_s=self.stall_after_s)
            except Exception:
                run = None
            if run is not None:
                view.sync_logs(run)
                if run != view.last_sample:  # a finished run samples the same every time: say nothing
                    view.last_sample = run
                    self._post(self.RunSampled(view.run_id, run))
        if new_metrics:
            self._post(self.MetricsUpdated(view.run_id, view.metrics.rows, view.metrics.trainer_step))
        grown = []
        width = view.name_width()
        for name, reader in list(view.readers.items()):
            added = reader.refresh()
            if added or not view.merged.knows(name):
                view.merged.take(name, reader, width, added)
            if added:
                grown.append(name)
        if grown:
            self._post(self.LogsGrew(view.run_id, tuple(grown)))

    def _list_runs(self, full: bool = True) -> None:
        try:
            runs = self._listing(full)
            threshold = backend.stall_threshold(self.stall_after_s)
        except Exception:
            return
        if runs is None:
            return  # no live run, nothing announced: the runs table stands as it is
        stalled = {r["run_id"] for r in runs if r.get("stalled")}
        # last_activity_at moves with every log line: only what the runs pane shows decides "changed".
        # So does the health verdict's clock (no_step_for_s): its state and whether it has a reason decide (a
        # starting run's reason comes with no state), its words follow on the next post.
        shown = [
            {k: v for k, v in r.items() if k not in ("last_activity_at", "stalled_for_s", "health")}
            | {"health": _health_key(r.get("health") or {})}
            for r in runs
        ]
        sparks = self._reward_sparks(runs)
        queued = backend.queued_sweep_runs()
        if (
            shown == self._last_runs
            and stalled == self._last_stalled
            and sparks == self._last_sparks
            and queued == self._last_queued
        ):
            return
        # A new run, a status or a stall shows at once; progress of a running run (a step every
        # second) repaints the runs table and the header every few seconds, not with every step.
        structure = [(r["run_id"], r.get("status"), r.get("reason"), s["health"]) for r, s in zip(runs, shown)] + [
            queued
        ]
        now = time.monotonic()
        if (
            structure == self._last_structure
            and stalled == self._last_stalled
            and now - self._last_runs_post < RUNS_EVERY_S
        ):
            return
        self._last_runs, self._last_stalled, self._last_sparks = shown, stalled, sparks
        self._last_structure, self._last_runs_post, self._last_queued = structure, now, queued
        self._post(self.RunsUpdated(runs, stalled, sparks, threshold, queued))

    def _listing(self, full: bool) -> list[RunSummary] | None:
        """Every run (full), or the last listing with its live runs read again; None when there is no
        live run to read. A live run gone from disk brings the full listing."""
        if not full and self._runs is not None:
            live = [r["run_id"] for r in self._runs if r.get("status") not in FINAL]
            if not live:
                return None
            fresh = backend.refresh_runs(live, stall_after_s=self.stall_after_s)
            if all(fresh.values()):
                runs = [fresh.get(r["run_id"]) or r for r in self._runs]
                self._runs = runs
                return runs
        self._runs = backend.list_runs(stall_after_s=self.stall_after_s)
        return self._runs

    def _poll_alerts(self) -> None:
        try:
            if self._alert_offset is None:
                self._alert_offset = backend.alert_log_end()
                return
            alerts, self._alert_offset = backend.read_alerts(self._alert_offset)
        except Exception:
            return
        if alerts:
            self._post(self.AlertsArrived(alerts))

    def _reward_sparks(self, runs: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
        """Recent reward/mean of the newest runs. The selected run's reader serves its own sparkline;
        the others get small readers that start near their files' ends and keep SPARK_ROWS rows."""
        wanted = [r["run_id"] for r in runs[:SPARK_RUNS]]
        view = self.view
        for run_id in list(self._run_metrics):
            if run_id not in wanted or (view is not None and view.run_id == run_id):
                del self._run_metrics[run_id]
        out = {}
        for run_id in wanted:
            if view is not None and view.run_id == run_id:
                metrics = view.metrics  # polled at the start of this cycle
            else:
                metrics = self._run_metrics.get(run_id)
                if metrics is None:
                    metrics = self._run_metrics[run_id] = backend.run_metrics(
                        run_id, max_rows=SPARK_ROWS, tail_bytes=SPARK_TAIL_BYTES
                    )
                metrics.poll()
            cached = self._spark_cache.get(run_id)
            if cached is None or cached[0] is not metrics or cached[1] != metrics.version:
                values = [v for _, v in metrics.series("reward/mean", tail=SPARK_ROWS)[-SPARK_POINTS:]]
                self._spark_cache[run_id] = cached = (metrics, metrics.version, values)
            out[run_id] = cached[2]
        for run_id in [r for r in self._spark_cache if r not in out]:
            del self._spark_cache[run_id]
        return out

    # -- watchfiles -------------------------------------------------------------------------------
    def _watch_paths(self) -> list[Path]:
        paths = [ensure_private_dir(runs_dir()), ensure_private_dir(logs_dir())]
        for _source, folder in backend.environment_dirs():
            folder = Path(folder)
            if folder.is_dir() and folder not in paths:
                paths.append(folder)
        return paths

    def _start_watcher(self) -> None:
        paths = self._watch_paths()

        def watch() -> None:
            self._watching = True
            try:
                for changes in watch_files(
                    *paths,
                    stop_event=self.stop_event,
                    debounce=100,
                    step=50,
                    rust_timeout=500,
                    yield_on_timeout=False,
                    raise_interrupt=False,
                ):
                    prompt = False
                    for _kind, changed in changes:
                        if changed.endswith(".py"):
                            self._envs_dirty = prompt = True
                        elif "/runs/" in changed and (changed.endswith("run.json") or os.path.isdir(changed)):
                            self._runs_dirty = prompt = True
                        elif changed.endswith(".jsonl"):
                            prompt = True  # metrics (and events): shown within min_cycle_s
                    # Log lines wait for the next paced cycle: a chatty log must not cost a frame per write.
                    if prompt:
                        self.wake.set()
            except Exception:
                # No inotify (or the folder vanished): the loop still polls at sample_hz, listing every run.
                pass
            self._watching = False

        self._watch_thread = threading.Thread(target=watch, name="hermes-rl-watch", daemon=True)
        self._watch_thread.start()
