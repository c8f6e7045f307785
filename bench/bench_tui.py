"""Dashboard benchmarks: prints figures (and ratios against a baseline measured in the same run).

    .venv/bin/python bench/bench_tui.py            # all
    .venv/bin/python bench/bench_tui.py startup idle flood metric tail
    .venv/bin/python bench/bench_tui.py rollouts --seconds 150   # 2.5 min in each view

- startup: cold start (new interpreter) to the first frame, vs. a one-widget Textual app.   goal ≤ 1.0 s
           With --against TREE (another checkout, e.g. `git worktree add /tmp/base main`), also that
           tree's dashboard, interleaved with this one's: the ratio of their first frames.
- idle:    CPU of the dashboard watching one live run (1 metric + 2 log lines per second).  goal ≤ 3 % of a core
- flood:   a log growing at 20,000 lines/s: key-press latency and RSS while following it.  goals ≤ 100 ms, ≤ 200 MB
- metric:  a metric row appended → shown in the metrics pane.                               goal ≤ 0.5 s
- rollouts: following a run at 10 steps/s (per step a trainer metrics row, an env_metrics row, 2
           groups of 8 completions, ~10 access-log lines and a trainer log line) for --seconds in the
           default view, then as long with the rollouts view open: the dashboard's CPU in each (and
           their ratio), metric → visible, rollout → visible.                             goals ≤ 10 %, ≤ 0.5 s
- tail:    a 1 GB log: open and show its last lines (core reader and in the dashboard),
           vs. reading the file through (collections.deque).                               goal ≤ 0.3 s

Runs use the real supervisor (core.runs.launch) with small processes, in a temporary $HERMES_HOME
that is removed at the end; the 1 GB file is generated in /tmp and deleted after.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SIZE = (160, 48)


def line(name: str, value: str, goal: str = "", extra: str = "") -> None:
    print(f"{name:<44} {value:>14}   {goal:<14} {extra}", flush=True)


# -- helpers --------------------------------------------------------------------------------------


def fresh_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    os.environ["HERMES_HOME"] = str(home)
    return home


def launch(argv: list[str], name: str = "trainer") -> str:
    from hermes_rl.core import runs
    from hermes_rl.core.daemons.pipeline import ProcessSpec

    run = runs.launch([ProcessSpec(name=name, argv=argv, stop_timeout=3)], environment="bench", profile="local")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if runs.get_run(run["run_id"], sample=False)["status"] == "running":
            break
        time.sleep(0.1)
    return run["run_id"]


def stop(run_id: str) -> None:
    from hermes_rl.core import runs

    try:
        runs.stop_run(run_id, wait=10)
    except Exception as exc:  # the bench must still clean up the rest
        print(f"  (stop {run_id}: {exc})")


WRITER = textwrap.dedent("""
    import json, os, sys, time
    run_dir, rate, metric_every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    print("ready", flush=True)
    batch = max(1, int(rate / 50))          # write in 50 bursts per second
    step, next_metric, n = 0, time.monotonic(), 0
    out = sys.stdout
    while True:
        t0 = time.monotonic()
        line = "line {} \\x1b[32mok\\x1b[0m some payload text to look like a real log line\\n"
        out.write("".join(line.format(n + i) for i in range(batch)))
        out.flush()
        n += batch
        if metric_every > 0 and t0 >= next_metric:
            step += 1
            with open(os.path.join(run_dir, "metrics.jsonl"), "a") as m:
                m.write(json.dumps({"step": step, "time": time.time(), "reward/mean": step % 7 / 7}) + "\\n")
            next_metric = t0 + metric_every
        time.sleep(max(0.0, batch / rate - (time.monotonic() - t0)))
""")


def writer_argv(rate: float, metric_every: float) -> list[str]:
    path = Path(os.environ["HERMES_HOME"]) / "writer.py"
    path.write_text(WRITER)
    return [PY, str(path), "{run_dir}", str(rate), str(metric_every)]


# -- 1. startup -----------------------------------------------------------------------------------

CHILD_DASHBOARD = """
import time, sys
t0 = time.perf_counter()
sys.path.insert(0, %r)
from hermes_rl.tui.app import HermesDashboard
class Bench(HermesDashboard):
    def _first_frame(self):
        print("FRAME", time.perf_counter() - t0, time.process_time(), flush=True)
        self.live_enabled = False
        self.exit()
Bench().run(headless=True, size=(160, 48))
"""
CHILD_BASELINE = """
import time
t0 = time.perf_counter()
from textual.app import App
from textual.widgets import Static
class Hello(App):
    def compose(self):
        yield Static("hello")
    def on_mount(self):
        self.call_after_refresh(self.done)
    def done(self):
        print("FRAME", time.perf_counter() - t0, flush=True)
        self.exit()
Hello().run(headless=True, size=(160, 48))
"""


def spawn_until_frame(
    code: str, env: dict[str, str] | None = None, frame_lines: list[str] | None = None
) -> tuple[float, float]:
    """(wall seconds from spawn to the FRAME line, wall seconds from spawn to exit). The frame is read as
    it is printed: shutting down (joining workers that started after the frame) is not start-up. The
    FRAME line itself is appended to `frame_lines` when given."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or os.environ.copy()
    )
    frame = None
    try:
        for text in proc.stdout:
            if text.startswith("FRAME"):
                frame = time.perf_counter() - start
                if frame_lines is not None:
                    frame_lines.append(text)
                break
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = time.perf_counter() - start
    if frame is None:
        raise RuntimeError(f"no frame: {proc.stderr.read()[-500:] if proc.stderr else ''}")
    return frame, done


def bench_startup() -> None:
    home = fresh_home()
    try:
        _startup()
        if AGAINST:
            _startup_against(Path(AGAINST).resolve(), home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _tree_env(tree: Path, folder: Path) -> dict[str, str]:
    """An environment whose hermes_rl is `tree`'s: a folder of links to its packages, first on PYTHONPATH."""
    package = folder / "hermes_rl"
    package.mkdir(parents=True)
    for part in ("core", "tui", "dataplane", "environments"):
        (package / part).symlink_to(tree / part, target_is_directory=True)
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return env


def _startup_against(tree: Path, home: Path) -> None:
    """This checkout's first frame against another checkout's, in turns (so load hits both alike): wall
    time, and the CPU time the process spent up to its first frame (steadier on a loaded machine). Both are
    imported the same way, through a folder of links first on PYTHONPATH (so both search the same paths)."""
    envs = {"ours": _tree_env(ROOT, home / "ours"), "theirs": _tree_env(tree, home / "theirs")}
    roots = {"ours": ROOT, "theirs": tree}
    wall: dict[str, list[float]] = {"ours": [], "theirs": []}
    cpu: dict[str, list[float]] = {"ours": [], "theirs": []}
    for _ in range(ROUNDS):
        for side in ("ours", "theirs"):
            frame_lines: list[str] = []
            wall[side].append(spawn_until_frame(CHILD_DASHBOARD % str(roots[side]), envs[side], frame_lines)[0])
            cpu[side].append(float(frame_lines[0].split()[2]))
    for name, values in (("wall", wall), ("CPU", cpu)):
        o, t = statistics.median(values["ours"]), statistics.median(values["theirs"])
        line(
            f"first frame vs {tree.name}, {name} (median of {ROUNDS})",
            f"{o:.2f} s",
            "≤ ×1.00",
            f"{tree} {t:.2f} s: ×{o / t:.2f} (best ×{min(values['ours']) / min(values['theirs']):.2f})",
        )


def _startup() -> None:
    spawn_until_frame(CHILD_BASELINE)  # warm the disk cache for both
    dash = [spawn_until_frame(CHILD_DASHBOARD % str(ROOT)) for _ in range(3)]
    base = [spawn_until_frame(CHILD_BASELINE) for _ in range(3)]
    d, b = min(w for w, _ in dash), min(w for w, _ in base)
    line(
        "cold start → first frame (spawn, best of 3)",
        f"{d:.2f} s",
        "goal ≤ 1.0 s",
        f"minimal Textual app {b:.2f} s (×{d / b:.2f}); median {statistics.median(w for w, _ in dash):.2f} s; "
        f"spawn → exit {min(e for _, e in dash):.2f} s vs {min(e for _, e in base):.2f} s",
    )


# -- 2. idle CPU ----------------------------------------------------------------------------------

CHILD_IDLE = """
import sys, time
sys.path.insert(0, %r)
from textual.screen import Screen
from hermes_rl.tui.app import HermesDashboard
# Count redraws (compositor updates) and their time; the parent reads the file before and after.
frames = [0, 0.0]
paint = Screen._compositor_refresh
def counted(self):
    began = time.perf_counter()
    paint(self)
    frames[0] += 1
    frames[1] += time.perf_counter() - began
    with open(%r, "w") as out:
        out.write(f"{frames[0]} {frames[1]}")
Screen._compositor_refresh = counted
HermesDashboard(run_id=%r).run(headless=True, size=(160, 48))
"""


def cpu_of(pid: int, seconds: float) -> float:
    import psutil

    proc = psutil.Process(pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / seconds


def bench_idle() -> None:
    home = fresh_home()
    run_id = launch(writer_argv(rate=2, metric_every=1.0))
    try:
        counts = home / "frames.txt"

        def frames() -> tuple[int, float]:
            try:
                n, seconds = counts.read_text().split()
                return int(n), float(seconds)
            except (OSError, ValueError):
                return 0, 0.0

        child = subprocess.Popen(
            [PY, "-c", CHILD_IDLE % (str(ROOT), str(counts), run_id)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        base = subprocess.Popen(
            [PY, "-c", CHILD_BASELINE.replace("self.call_after_refresh(self.done)", "pass")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(5)  # start-up and first loads are not idle
        frames_before = frames()
        cpu = cpu_of(child.pid, 10)
        frames_after = frames()
        cpu_base = cpu_of(base.pid, 5)
        for proc in (child, base):
            proc.terminate()
            proc.wait(10)
        redraws = frames_after[0] - frames_before[0]
        paint_ms = 1000 * (frames_after[1] - frames_before[1]) / max(1, redraws)
        line(
            "idle CPU, one live run (10 s)",
            f"{cpu:.1f} %",
            "goal ≤ 3 %",
            f"idle minimal Textual app {cpu_base:.1f} %; {redraws / 10:.1f} redraws/s, {paint_ms:.0f} ms each "
            f"(load {os.getloadavg()[0]:.1f})",
        )
    finally:
        stop(run_id)
        shutil.rmtree(home, ignore_errors=True)


# -- 3-4. flood and metric latency (in process, driven by Pilot) --------------------------------------


async def wait(pilot, predicate, timeout: float = 30.0) -> bool:
    """Whether `predicate()` came true within `timeout` seconds, checked every 10 ms of the app's time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.01)
    return False


async def _flood_and_metric(run_flood: bool, run_metric: bool) -> None:
    import psutil
    from textual.binding import Binding

    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.logs import LogsPane
    from hermes_rl.tui.panes.metrics import MetricsPane

    pings: list[float] = []

    class Bench(HermesDashboard):
        BINDINGS = [Binding("f12", "ping", "ping", id="bench.ping")]

        def action_ping(self) -> None:
            pings.append(time.perf_counter())

    if run_flood:
        home = fresh_home()
        run_id = launch(writer_argv(rate=20_000, metric_every=0))
        try:
            app = Bench(run_id=run_id)
            rss0 = psutil.Process().memory_info().rss
            async with app.run_test(size=SIZE) as pilot:
                logs = app.query_one(LogsPane)
                await wait(pilot, lambda: app.selected_run == run_id and logs.view.line_count > 1000)
                await pilot.press("5")  # the log view, following
                latencies, rss = [], []
                start_lines = logs.view.source.line_count if logs.view.source else 0
                t_start = time.monotonic()
                for _ in range(40):
                    await pilot.pause(0.25)
                    sent = time.perf_counter()
                    await pilot.press("f12")
                    await wait(pilot, lambda sent=sent: pings and pings[-1] >= sent, 5)
                    latencies.append(pings[-1] - sent)
                    rss.append(psutil.Process().memory_info().rss)
                elapsed = time.monotonic() - t_start
                reader = app.live.view.readers.get("trainer") if app.live and app.live.view else None
                lines = reader.line_count if reader else 0
                shown_rate = (logs.view.line_count - start_lines) / elapsed
                latencies.sort()
                line(
                    "20k lines/s log: key latency p50 / max",
                    f"{1000 * latencies[len(latencies) // 2]:.0f} / {1000 * latencies[-1]:.0f} ms",
                    "goal ≤ 100 ms",
                    f"p90 {1000 * latencies[int(len(latencies) * 0.9)]:.0f} ms; {lines:,} lines indexed, merged view "
                    f"took {shown_rate:,.0f} lines/s",
                )
                line(
                    "20k lines/s log: process RSS max",
                    f"{max(rss) / 2**20:.0f} MB",
                    "goal ≤ 200 MB",
                    f"{(max(rss) - rss0) / 2**20:+.0f} MB over the app at rest; trainer log "
                    f"{os.path.getsize(reader.path) / 2**20:.0f} MB"
                    if reader
                    else "",
                )
        finally:
            stop(run_id)
            shutil.rmtree(home, ignore_errors=True)

    if run_metric:
        home = fresh_home()
        run_id = launch(writer_argv(rate=2, metric_every=0))
        try:
            app = Bench(run_id=run_id)
            async with app.run_test(size=SIZE) as pilot:
                await wait(pilot, lambda: app.selected_run == run_id)
                await pilot.pause(1.0)
                pane = app.query_one(MetricsPane)
                delays = []
                path = run_dir(run_id) / "metrics.jsonl"
                for step in range(1, 11):
                    written = time.perf_counter()
                    with open(path, "a") as handle:
                        handle.write(json.dumps({"step": step, "time": time.time(), "reward/mean": step / 10}) + "\n")
                    await wait(
                        pilot, lambda step=step: pane.rows and pane.rows[-1]["step"] == step and pane.table.row_count, 5
                    )
                    delays.append(time.perf_counter() - written)
                    await pilot.pause(0.3)
                line(
                    "metric written → visible (10 rows)",
                    f"{statistics.median(delays) * 1000:.0f} ms",
                    "goal ≤ 500 ms",
                    f"max {max(delays) * 1000:.0f} ms (watchfiles wake-up, no polling wait)",
                )
        finally:
            stop(run_id)
            shutil.rmtree(home, ignore_errors=True)


PIPELINE_LOGS = textwrap.dedent("""
    import sys, time
    role, rate = sys.argv[1], float(sys.argv[2])
    print("ready", flush=True)
    step, due = 0, time.monotonic()
    while True:
        step += 1
        if role == "api":  # uvicorn access lines: ~10 per trained step in a real local run
            sys.stdout.write("".join(f'INFO:     127.0.0.1:{40000 + i} - "POST /scored_data HTTP/1.1" 200 OK\\n'
                                     for i in range(10)))
        else:
            sys.stdout.write(f"INFO trainer: step {step} reward {step % 9 / 9:.3f} loss 0.1 step 0.02s\\n")
        sys.stdout.flush()
        due += 1.0 / rate
        time.sleep(max(0.0, due - time.monotonic()))
""")


def launch_pipeline(steps_per_s: float) -> str:
    """A run whose processes log what a real local run logs per step: an api process ~10 access lines,
    the trainer one line."""
    from hermes_rl.core import runs
    from hermes_rl.core.daemons.pipeline import ProcessSpec

    path = Path(os.environ["HERMES_HOME"]) / "pipeline_logs.py"
    path.write_text(PIPELINE_LOGS)
    specs = [
        ProcessSpec(name=name, argv=[PY, str(path), name, str(steps_per_s)], stop_timeout=3)
        for name in ("api", "trainer")
    ]
    run = runs.launch(specs, environment="bench", profile="local")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if runs.get_run(run["run_id"], sample=False)["status"] == "running":
            break
        time.sleep(0.1)
    return run["run_id"]


TRAINER_ROW = {"train/loss": 0.1, "train/learning_rate": 5e-4, "logprobs/mean": -1.5, "advantages/std": 0.3,
               "timing/step_s": 0.02, "batch/sequences": 16, "batch/groups": 2}  # fmt: skip


def _pipeline_writer(folder: Path, steps_per_s: float, written: dict, stop, thread_id: list) -> None:
    """Per step, what the trainer and the environment write to the run folder: a metrics row (the
    trainer's keys), an env_metrics row, 2 groups of 8 completions to rollouts.jsonl."""
    import threading

    thread_id.append(threading.get_native_id())
    step = 0
    with (
        open(folder / "metrics.jsonl", "a") as metrics,
        open(folder / "env_metrics.jsonl", "a") as env,
        open(folder / "rollouts.jsonl", "a") as rollouts,
    ):
        due = time.monotonic()
        while not stop.is_set():
            step += 1
            written[step] = time.perf_counter()
            for group in range(2):
                rewards = [((step + i + group) % 5) / 4 for i in range(8)]
                mean = sum(rewards) / 8
                completions = [
                    {"text": f" {i + group}\n", "reward": r, "advantage": r - mean, "tokens": 3, "finish": "stop"}
                    for i, r in enumerate(rewards)
                ]
                record = {"step": step, "time": time.time(), "group": group, "prompt": f"Q: {step % 5}+{group}=\nA:"}
                rollouts.write(json.dumps({**record, "completions": completions}) + "\n")
            rollouts.flush()
            row = {"step": step, "time": time.time(), "reward/mean": (step % 50) / 50, **TRAINER_ROW}
            metrics.write(json.dumps(row) + "\n")
            metrics.flush()
            env.write(json.dumps({"step": step, "time": time.time(), "train/percent_correct": step % 5 / 5}) + "\n")
            env.flush()
            due += 1.0 / steps_per_s
            stop.wait(max(0.0, due - time.monotonic()))


async def _rollouts_live(seconds: float, steps_per_s: float = 10.0) -> None:
    """One run followed by one dashboard: `seconds` in the default view, then `seconds` with the
    rollouts view open. CPU is the dashboard process's, less the writer thread's own."""
    import threading

    import psutil

    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.metrics import MetricsPane
    from hermes_rl.tui.panes.rollouts import RolloutsScreen

    home = fresh_home()
    run_id = launch_pipeline(steps_per_s)
    written: dict[int, float] = {}
    stop_writing = threading.Event()
    writer_tid: list[int] = []
    me = psutil.Process()

    def cpu_seconds() -> float:
        """The process's CPU seconds less the writer thread's."""
        total = sum(me.cpu_times()[:2])
        writer = next((t for t in me.threads() if writer_tid and t.id == writer_tid[0]), None)
        return total - (writer.user_time + writer.system_time if writer else 0.0)

    def delay(shown, delays) -> None:
        """How long the oldest step not yet shown has waited (0 when the newest is shown)."""
        if shown in written:
            newer = [s for s in written if s > shown]
            delays.append(time.perf_counter() - written[min(newer)] if newer else 0.0)

    try:
        app = HermesDashboard(run_id=run_id)
        async with app.run_test(size=SIZE) as pilot:
            await wait(pilot, lambda: app.selected_run == run_id)
            thread = threading.Thread(
                target=_pipeline_writer,
                args=(run_dir(run_id), steps_per_s, written, stop_writing, writer_tid),
                daemon=True,
            )
            thread.start()
            await pilot.pause(3.0)
            pane = app.pane(MetricsPane)
            figures = {}
            for phase in ("default view", "rollouts view"):
                if phase == "rollouts view":
                    await pilot.press("o")
                    await wait(pilot, lambda: isinstance(app.screen, RolloutsScreen))
                    await pilot.pause(2.0)
                cpu0, t0, load0 = cpu_seconds(), time.monotonic(), os.getloadavg()[0]
                metric_delays, rollout_delays = [], []
                while time.monotonic() - t0 < seconds:
                    await pilot.pause(0.5)
                    delay(pane.rows[-1]["step"] if pane.rows else None, metric_delays)
                    if isinstance(app.screen, RolloutsScreen):
                        delay(app.screen.selected_step(), rollout_delays)
                elapsed = time.monotonic() - t0
                cpu = 100 * (cpu_seconds() - cpu0) / elapsed
                figures[phase] = cpu
                steps = len(written) / (time.perf_counter() - written[1]) if written else 0.0
                line(
                    f"{steps_per_s:.0f} steps/s, {phase}: dashboard CPU",
                    f"{cpu:.1f} % of a core",
                    "goal ≤ 10 %",
                    f"over {elapsed:.0f} s at {steps:.1f} steps/s (writer thread excluded); "
                    f"load {load0:.1f} → {os.getloadavg()[0]:.1f}",
                )
                metric_delays.sort()
                p50 = f"{1000 * statistics.median(metric_delays):.0f}"
                p90 = f"{1000 * metric_delays[int(len(metric_delays) * 0.9)]:.0f}"
                if rollout_delays:
                    rollout_delays.sort()
                    p50 += f" / {1000 * statistics.median(rollout_delays):.0f}"
                    p90 += f" / {1000 * rollout_delays[int(len(rollout_delays) * 0.9)]:.0f}"
                # Under the rollouts view (a full screen) the metrics pane is not on screen: its rows are
                # kept current and show the moment the view closes.
                line(
                    ("  metric → pane / rollout → visible" if rollout_delays else "  metric → visible") + " (p50)",
                    f"{p50} ms",
                    "goal ≤ 500 ms",
                    f"p90 {p90} ms (the oldest row not yet shown)",
                )
            ratio = figures["rollouts view"] / figures["default view"] if figures["default view"] else float("nan")
            line(
                "  rollouts view / default view, same run",
                f"×{ratio:.2f}",
                "",
                f"{figures['rollouts view']:.1f} % vs {figures['default view']:.1f} % of a core",
            )
            stop_writing.set()
            thread.join(5)
    finally:
        stop_writing.set()
        stop(run_id)
        shutil.rmtree(home, ignore_errors=True)


def bench_rollouts() -> None:
    asyncio.run(_rollouts_live(SECONDS))


def bench_flood() -> None:
    asyncio.run(_flood_and_metric(True, False))


def bench_metric() -> None:
    asyncio.run(_flood_and_metric(False, True))


# -- 5. tail of a 1 GB log --------------------------------------------------------------------------


def make_big_log(path: Path, size: int = 1 << 30) -> None:
    block = "".join(
        f"2025-11-29 12:00:{i % 60:02d} INFO trainer step {i} loss=0.{i % 997:03d} reward=0.5 "
        f"some more text to make the line realistic\n"
        for i in range(20_000)
    ).encode()
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            handle.write(block)
            written += len(block)
        handle.write(b"THE LAST LINE\n")


async def _tail_in_app(big: Path) -> float:
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.base.paths import ensure_private_dir, run_dir
    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.logs import LogsPane

    run_id = "b16b16b1"
    folder = ensure_private_dir(run_dir(run_id))
    now = time.time()
    atomic_write_json(
        folder / "run.json",
        {
            "run_id": run_id,
            "environment": "bench",
            "profile": "local",
            "status": "completed",
            "created_at": now,
            "processes": [
                {
                    "name": "trainer",
                    "pid": 1,
                    "create_time": 0,
                    "state": "exited",
                    "exit_code": 0,
                    "restarts": 0,
                    "log": str(big),
                }
            ],
        },
    )
    # A newer, small run is what the dashboard selects first; then we select the one with the 1 GB log.
    small = ensure_private_dir(run_dir("a0a0a0a0"))
    atomic_write_json(
        small / "run.json",
        {
            "run_id": "a0a0a0a0",
            "environment": "bench",
            "profile": "local",
            "status": "completed",
            "created_at": now + 1,
            "processes": [],
        },
    )
    app = HermesDashboard()
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and app.selected_run != "a0a0a0a0":
            await pilot.pause(0.01)
        await pilot.pause(0.5)
        started = time.perf_counter()
        app.query_one("#runs").select(run_id)
        logs = app.query_one(LogsPane)
        while time.monotonic() < deadline:
            source = logs.view.source
            count = source.line_count if source is not None else 0
            if count and "THE LAST LINE" in "".join(source.lines(count - 1, count)):
                rows = logs.view._layout()
                if rows and any("THE LAST LINE" in "".join(seg.text for seg in strip) for strip in rows):
                    return time.perf_counter() - started
            await pilot.pause(0.005)
    raise RuntimeError("the last line never showed")


def bench_tail() -> None:
    from hermes_rl.core.readers.logs import LogReader

    home = fresh_home()
    big = Path(tempfile.gettempdir()) / f"hermes-bench-{os.getpid()}.log"
    try:
        t = time.perf_counter()
        make_big_log(big)
        made = time.perf_counter() - t
        size = big.stat().st_size
        t = time.perf_counter()
        reader = LogReader(big)
        last = reader.tail(50)
        core_s = time.perf_counter() - t
        assert last[-1] == "THE LAST LINE"
        t = time.perf_counter()
        with open(big, "rb") as handle:
            baseline = deque(handle, 50)
        base_s = time.perf_counter() - t
        assert baseline[-1] == b"THE LAST LINE\n"
        app_s = asyncio.run(_tail_in_app(big))
        line(
            "1 GB log: open + last 50 lines (core)",
            f"{core_s * 1000:.0f} ms",
            "goal ≤ 300 ms",
            f"read-through baseline {base_s * 1000:.0f} ms (×{base_s / core_s:.0f} faster); "
            f"{size / 2**30:.2f} GiB, index {reader.index_entries} entries, file made in {made:.1f} s",
        )
        line("1 GB log: select run → last line on screen", f"{app_s * 1000:.0f} ms", "goal ≤ 300 ms")
    finally:
        big.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)


BENCHES = {
    "startup": bench_startup,
    "idle": bench_idle,
    "flood": bench_flood,
    "metric": bench_metric,
    "tail": bench_tail,
    "rollouts": bench_rollouts,
}


SECONDS = 30.0  # each phase of `rollouts` (--seconds)
AGAINST: str | None = None  # another checkout whose first frame `startup` also times (--against)
ROUNDS = 3  # turns of each dashboard in `startup --against` (--rounds)


def main() -> None:
    global SECONDS, AGAINST, ROUNDS
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benches", nargs="*", choices=[[], *BENCHES], metavar="BENCH", help=", ".join(BENCHES))
    parser.add_argument("--seconds", type=float, default=SECONDS, help="each phase of `rollouts` (default 30)")
    parser.add_argument("--against", metavar="TREE", help="startup: also time another checkout's dashboard, in turns")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="turns of each dashboard with --against (default 3)")
    args = parser.parse_args()
    SECONDS, AGAINST, ROUNDS = args.seconds, args.against, args.rounds
    chosen = args.benches or list(BENCHES)
    print(
        f"hermes-rl dashboard bench — {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"python {sys.version.split()[0]}"
    )
    for name in chosen:
        BENCHES[name]()


if __name__ == "__main__":
    main()
