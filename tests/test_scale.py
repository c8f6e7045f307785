"""Scale (issue #45) at small sizes: the run summary index (rebuilt after a crash, a corrupt file or a
run changed behind it; run folders added or removed by hand), listing filters and pages, the metrics
digest (downsampling keeps the extremes, grows with the files, rebuilt after a truncation), a long
run opened from its digest, results from it, and the streamed export equal to the full one."""

from __future__ import annotations

import io
import json
import math
import random
import shutil
import sqlite3
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import atomic_write_json
from hermes_rl.core.base.paths import rl_dir, run_dir
from hermes_rl.core.clients.toolset import call_tool
from hermes_rl.core.readers import metrics as metrics_mod
from hermes_rl.core.readers.metrics import RunMetrics, downsampled, last_values, run_metrics_summary
from hermes_rl.core.readers.metrics_digest import BLOCK_ROWS, DIGEST_FILE, MetricsDigest
from hermes_rl.core.runs import export, store
from hermes_rl.core.runs.index import INDEX_FILE


def make_run(run_id: str, *, created_at: float, status="completed", steps=5, environment="toy", **fields):
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    record = {"run_id": run_id, "environment": environment, "profile": "local", "status": status}
    record.update(created_at=created_at, started_at=created_at + 1, total_steps=steps, processes=[], **fields)
    atomic_write_json(folder / "run.json", record)
    with open(folder / "metrics.jsonl", "w") as handle:
        for step in range(1, steps + 1):
            handle.write(json.dumps({"step": step, "time": created_at + step, "reward/mean": step / 10}) + "\n")
    return folder


def fresh_process_listing(**filters):
    """list_runs as a new process sees it: nothing held in memory, only the folders and the index."""
    store.forget_listing_cache()
    return runs.list_runs(**filters)


def index_rows() -> dict[str, str]:
    db = sqlite3.connect(rl_dir() / INDEX_FILE)
    try:
        return dict(db.execute("SELECT run_id, sig FROM runs").fetchall())
    finally:
        db.close()


@pytest.fixture
def three_runs():
    now = time.time()
    make_run("000000a1", created_at=now - 30, steps=3)
    make_run("000000b2", created_at=now - 20, steps=7, status="failed", reason="trainer exited with code 1")
    make_run("000000c3", created_at=now - 10, steps=2, environment="gsm8k", sweep={"id": "sw01", "index": 0})
    return ["000000c3", "000000b2", "000000a1"]


def test_the_index_holds_finished_runs_and_a_fresh_listing_reads_it(three_runs, monkeypatch):
    listed = fresh_process_listing()
    assert [r["run_id"] for r in listed] == three_runs
    assert set(index_rows()) == set(three_runs)

    def unreachable(*_args):
        raise AssertionError("a run with unchanged files was summarised again")

    monkeypatch.setattr(store, "_build_summary", unreachable)
    again = fresh_process_listing()
    assert again == listed  # every key, from the index alone


def test_a_deleted_or_corrupt_index_is_rebuilt_from_the_run_folders(three_runs):
    expected = fresh_process_listing()
    (rl_dir() / INDEX_FILE).unlink()
    assert fresh_process_listing() == expected
    assert set(index_rows()) == set(three_runs)
    (rl_dir() / INDEX_FILE).write_bytes(b"this is not a database" * 100)  # a crash mid-write, a bad disk
    assert fresh_process_listing() == expected
    assert set(index_rows()) == set(three_runs)
    db = sqlite3.connect(rl_dir() / INDEX_FILE)  # a row damaged inside a valid database
    db.execute("UPDATE runs SET summary = '{torn' WHERE run_id = '000000a1'")
    db.commit()
    db.close()
    assert fresh_process_listing() == expected


def test_a_run_changed_behind_the_index_is_summarised_again(three_runs):
    fresh_process_listing()
    with open(run_dir("000000a1") / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 4, "reward/mean": 0.9}) + "\n")
    record = json.loads((run_dir("000000b2") / "run.json").read_text())
    atomic_write_json(run_dir("000000b2") / "run.json", dict(record, reason="edited by hand"))
    by_id = {r["run_id"]: r for r in fresh_process_listing()}
    assert by_id["000000a1"]["step"] == 4 and by_id["000000a1"]["reward_mean"] == 0.9
    assert by_id["000000b2"]["reason"] == "edited by hand"


def test_run_folders_removed_or_added_by_hand_are_seen(three_runs):
    fresh_process_listing()
    shutil.rmtree(run_dir("000000b2"))
    shutil.copytree(run_dir("000000a1"), run_dir("0000abcd"))
    record = json.loads((run_dir("0000abcd") / "run.json").read_text())
    atomic_write_json(run_dir("0000abcd") / "run.json", dict(record, run_id="0000abcd", created_at=time.time()))
    listed = fresh_process_listing()
    assert [r["run_id"] for r in listed] == ["0000abcd", "000000c3", "000000a1"]
    assert set(index_rows()) == {"0000abcd", "000000c3", "000000a1"}
    # the same in a long-lived client (the dashboard): no restart needed
    shutil.rmtree(run_dir("000000c3"))
    assert [r["run_id"] for r in runs.list_runs()] == ["0000abcd", "000000a1"]
    assert "000000c3" not in index_rows()


def test_a_live_run_is_never_taken_from_the_index(three_runs):
    make_run(
        "0000face", created_at=time.time() - 3600, status="running", supervisor={"pid": 999999, "create_time": 1.0}
    )
    listed = {r["run_id"]: r for r in fresh_process_listing()}
    assert listed["0000face"]["status"] == "lost"  # its supervisor is gone: decided at every listing
    assert "0000face" not in index_rows()


def test_listing_filters_and_the_agent_tool_pages(three_runs):
    assert [r["run_id"] for r in runs.list_runs(status="failed")] == ["000000b2"]
    assert [r["run_id"] for r in runs.list_runs(status=["failed", "completed"])] == three_runs
    assert [r["run_id"] for r in runs.list_runs(environment="gsm8k")] == ["000000c3"]
    assert [r["run_id"] for r in runs.list_runs(sweep="sw01")] == ["000000c3"]
    assert [r["run_id"] for r in runs.list_runs(text="CODE 1")] == ["000000b2"]
    page = call_tool("rl_list_runs", {"limit": 2, "offset": 1})
    assert [r["run_id"] for r in page["runs"]] == three_runs[1:] and page["count"] == 2 and page["total"] == 3
    only = call_tool("rl_list_runs", {"status": "completed,failed", "text": "toy"})
    assert only["total"] == 2


# -- long runs ----------------------------------------------------------------------------------


def write_long_run(run_id: str, steps: int, *, spikes: dict[int, float], environments=("toy",)) -> object:
    folder = make_run(run_id, created_at=time.time() - steps, steps=0)
    rng = random.Random(7)
    with open(folder / "metrics.jsonl", "w") as trainer, open(folder / "env_metrics.jsonl", "w") as env:
        for step in range(1, steps + 1):
            reward = spikes.get(step, 0.5 + 0.1 * math.sin(step / 50) + rng.uniform(-0.05, 0.05))
            trainer.write(
                json.dumps({"step": step, "time": 1e9 + step, "reward/mean": reward, "loss": 1 / step}) + "\n"
            )
            for name in environments:
                row = {"step": step, "environment": name, "train/percent_correct": (step % 97) / 97}
                if step % 10 == 0:
                    row["eval/percent_correct"] = (step % 89) / 89
                env.write(json.dumps(row) + "\n")
    return folder


def test_downsampling_keeps_the_extremes_of_every_series():
    spikes = {1234: 9.5, 4321: -7.25, 9999: 3.0}
    folder = write_long_run("0000d00d", 10_000, spikes=spikes)
    series = downsampled(folder, ["reward/mean", "eval/percent_correct"], points=40)
    reward = series["reward/mean"]
    assert len(reward) <= 44 and (1234, 9.5) in reward and (4321, -7.25) in reward
    assert reward[0][0] == 1 and reward[-1][0] == 10_000  # where the series starts and ends
    evals = [v for _s, v in series["eval/percent_correct"]]
    assert max(evals) == 1.0 * 88 / 89 and min(evals) == 0.0
    assert (folder / DIGEST_FILE).exists()


def test_the_digest_grows_with_the_files_and_is_rebuilt_after_a_truncation():
    folder = write_long_run("0000d00e", 3 * BLOCK_ROWS, spikes={})
    digest = MetricsDigest(folder).update()
    assert digest.steps_done() == 3 * BLOCK_ROWS and digest.trainer["rows"] == 3 * BLOCK_ROWS
    with open(folder / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 3 * BLOCK_ROWS + 1, "reward/mean": 42.0}) + "\n")
        handle.write('{"step": 99999, "reward/me')  # being written: not read yet
    again = MetricsDigest(folder).update()  # a new reader, from the stored digest
    assert again.steps_done() == 3 * BLOCK_ROWS + 1 and max(v for _s, v in again.series("reward/mean")) == 42.0
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.25}) + "\n")
    (folder / "env_metrics.jsonl").unlink()
    rebuilt = MetricsDigest(folder).update()
    assert rebuilt.steps_done() == 1 and rebuilt.series("reward/mean") == [(1, 0.25)]
    (folder / DIGEST_FILE).write_text("{garbage")
    assert MetricsDigest(folder).update().steps_done() == 1


def test_a_long_run_opens_from_its_digest_in_bounded_rows(monkeypatch):
    folder = write_long_run("0000d00f", 20_000, spikes={777: 12.0, 15_000: -3.0})
    full = RunMetrics(folder, max_rows=10**9)
    full.poll()
    monkeypatch.setattr(metrics_mod, "DIGEST_BYTES", 1 << 10)  # this run counts as long
    reader = RunMetrics(folder, max_rows=2_000)
    reader.poll()
    assert len(reader.rows) <= 2_000 + 1_000  # the downsampled history, and the tail's rows whole
    values = [v for _s, v in reader.series("reward/mean")]
    assert 12.0 in values and -3.0 in values
    assert reader.trainer_step == full.trainer_step == 20_000
    assert reader.rows[-1] == full.rows[-1] and reader.series("reward/mean", 50) == full.series("reward/mean", 50)
    assert reader.last() == full.last()
    with open(folder / "metrics.jsonl", "a") as handle:  # it goes on reading as the run writes
        handle.write(json.dumps({"step": 20_001, "reward/mean": 0.75}) + "\n")
    assert reader.poll() and reader.trainer_step == 20_001


def test_results_of_a_long_run_come_from_its_digest(monkeypatch):
    folder = write_long_run("0000d010", 6_000, spikes={4000: 5.0}, environments=("a", "b"))
    streamed = run_metrics_summary(folder, 50, series_key="eval/percent_correct")
    monkeypatch.setattr(metrics_mod, "DIGEST_BYTES", 1 << 10)
    digested = run_metrics_summary(folder, 50, series_key="eval/percent_correct")
    assert digested["steps_done"] == streamed["steps_done"] == 6_000
    assert digested["final"] == streamed["final"]
    assert digested["series"] == streamed["series"]
    history = digested["history"]
    assert len(history) == 50 and history[0]["step"] == 1 and history[-1]["step"] == 6_000
    assert history[-1] == streamed["history"][-1]
    assert all(abs(a["step"] - b["step"]) <= BLOCK_ROWS for a, b in zip(history, streamed["history"], strict=True))


@pytest.mark.parametrize("environments", [("toy",), ("a", "b")])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_the_streamed_export_equals_the_full_one(environments, fmt):
    folder = write_long_run("0000d011", 700, spikes={3: float("nan")}, environments=environments)
    with open(folder / "metrics.jsonl", "a") as handle:
        handle.write("garbage\n" + json.dumps({"step": 701, "reward/mean": 1.5, "note": "=cmd|x"}) + "\n")
    columns, rows = export.metrics_table("0000d011")
    out = io.StringIO()
    assert export.stream_metrics("0000d011", None, fmt, out) == (len(rows), len(columns))
    assert out.getvalue() == export.format_metrics(columns, rows, fmt)
    keys = ["reward/mean", "eval/percent_correct"]
    columns, rows = export.metrics_table("0000d011", keys)
    out = io.StringIO()
    export.stream_metrics("0000d011", keys, fmt, out)
    assert out.getvalue() == export.format_metrics(columns, rows, fmt)
    assert last_values(rows)["step"] == 701


def test_a_long_lived_client_sees_a_finished_run_changed_after_the_recheck_interval(three_runs, monkeypatch):
    runs.list_runs()
    with open(run_dir("000000a1") / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 9, "reward/mean": 0.5}) + "\n")
    monkeypatch.setattr(store, "FINAL_RECHECK_S", 0.0)
    assert {r["run_id"]: r["step"] for r in runs.list_runs()}["000000a1"] == 9


def test_an_export_of_steps_written_out_of_order_still_equals_the_full_one():
    folder = write_long_run("0000d012", 50, spikes={})
    with open(folder / "env_metrics.jsonl", "a") as handle:  # a writer that started again at step 40
        for step in range(40, 46):
            handle.write(json.dumps({"step": step, "environment": "toy", "train/percent_correct": 2.0}) + "\n")
    columns, rows = export.metrics_table("0000d012")
    out = io.StringIO()
    export.stream_metrics("0000d012", None, "csv", out)
    assert out.getvalue() == export.format_metrics(columns, rows, "csv") and len(rows) == 50


def test_a_digest_of_the_wrong_shape_is_built_again():
    folder = write_long_run("0000d013", 300, spikes={7: 4.0})
    MetricsDigest(folder).update()
    stored = json.loads((folder / DIGEST_FILE).read_text())
    stored["metrics.jsonl"]["blocks"] = [["not", "a", "block"]]
    stored["env_metrics.jsonl"] = {"offset": "x"}
    (folder / DIGEST_FILE).write_text(json.dumps(stored))
    with open(folder / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 301, "reward/mean": 0.5}) + "\n")
    digest = MetricsDigest(folder).update()
    assert digest.steps_done() == 301 and (7, 4.0) in digest.series("reward/mean")


class _App:
    """What the dashboard's live loop posts to, kept."""

    def __init__(self):
        self.batches = []

    def post_message(self, message):
        self.batches.append(message)


def test_the_dashboard_reads_only_its_live_runs_between_listings(three_runs, monkeypatch):
    from hermes_rl.tui import backend as tui_backend
    from hermes_rl.tui.live import LiveUpdater

    make_run("0000beef", created_at=time.time(), status="running")  # its supervisor registering (not lost)
    listings, refreshed = [], []
    real_list, real_refresh = tui_backend.list_runs, tui_backend.refresh_runs
    monkeypatch.setattr(tui_backend, "list_runs", lambda **kw: listings.append(1) or real_list(**kw))
    monkeypatch.setattr(tui_backend, "refresh_runs", lambda ids, **kw: refreshed.append(ids) or real_refresh(ids, **kw))
    live = LiveUpdater(_App())
    live._watching = True  # file events announce new and finished runs (the watcher thread is not started here)

    def shown() -> dict[str, dict]:
        live._last_list = live._last_runs_post = 0.0  # the next cycle lists, and posts what changed
        live.app.batches.clear()
        live.cycle()
        posted = [m for batch in live.app.batches for m in batch.updates if isinstance(m, LiveUpdater.RunsUpdated)]
        return {r["run_id"]: r for r in posted[-1].runs} if posted else {}

    assert set(shown()) == {"0000beef", *three_runs} and len(listings) == 1
    with open(run_dir("0000beef") / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 6, "reward/mean": 0.9}) + "\n")
    assert shown()["0000beef"]["step"] == 6  # the live run, read again
    assert len(listings) == 1 and refreshed == [["0000beef"]]  # ... alone: three finished runs not looked at
    make_run("0000f00d", created_at=time.time())
    live.poke()  # what the watcher does when a run folder appears
    assert "0000f00d" in shown() and len(listings) == 2
    live._watching = False  # no file events (no inotify): every listing reads every run
    shown()
    assert len(listings) == 3


def _row_by_row(path) -> tuple[dict, list[dict]]:
    """What the digest must hold, folded one row at a time by the standard parser: per key (first step, first,
    last step, last, best step, best) and each block's {key: [min step, min, max step, max]}."""
    from hermes_rl.core.base.fsutil import iter_jsonl_spans

    keys: dict = {}
    blocks: list[dict] = []
    for _start, _end, row in iter_jsonl_spans(path):
        step = row.get("step")
        step = int(step) if type(step) is float and math.isfinite(step) else step
        if type(step) is not int:
            continue
        if not blocks or blocks[-1]["rows"] == BLOCK_ROWS:
            blocks.append({"rows": 0, "extremes": {}})
        blocks[-1]["rows"] += 1
        environment = row.get("environment")
        for key, raw in row.items():
            finite = type(raw) in (int, float) and abs(raw) <= 1.7e308  # NaN is read as null
            if key in ("step", "time", "source", "env", "environment") or not finite:
                continue
            for name in [key] + ([f"{key}@{environment}"] if isinstance(environment, str) and environment else []):
                value = float(raw)
                low_high = blocks[-1]["extremes"].setdefault(name, [step, value, step, value])
                if value < low_high[1]:
                    low_high[:2] = [step, value]
                if value > low_high[3]:
                    low_high[2:] = [step, value]
                summary = keys.setdefault(name, [step, value, step, value, step, value])
                if step < summary[0]:
                    summary[:2] = [step, value]
                if step >= summary[2]:
                    summary[2:4] = [step, value]
                if value > summary[5]:
                    summary[4:] = [step, value]
    return keys, [b["extremes"] for b in blocks]


def test_the_digest_built_a_key_at_a_time_holds_what_a_row_by_row_fold_holds(tmp_path):
    """The digest is built fast (orjson, a column at a time); it must hold what reading each row would, for the
    rows writers leave (strict JSON) and the ones the readers tolerate: NaN and Infinity, bools, text, nulls,
    keys that come and go, huge numbers, float steps, steps written again, environments, garbage lines."""
    rng = random.Random(7)
    lines = []
    for index in range(3 * BLOCK_ROWS + 77):
        step = index // 2 if index < 600 else index - 300 * (index % 97 == 0)  # repeated and backwards steps
        row: dict = {"step": float(step) if index % 13 == 0 else step, "time": 1000.0 + index}
        row["reward/mean"] = round(rng.uniform(-1, 1), 3)
        row["loss"] = rng.choice([0.5, 0.5, 1, 2.25, True, "high", None, float("nan"), float("inf"), 10**400])
        if index % 10 == 0:
            row["eval/percent_correct"] = rng.choice([0.0, 0.5, 1.0])
        if index % 3 == 0:
            row["environment"] = rng.choice(["a", "b"])
        lines.append(json.dumps(row))
        if index % 50 == 0:
            lines.append(rng.choice(['{"step": 5, "reward/me', "[1, 2]", "garbage", "", '{"step": "x"}']))
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    digest = MetricsDigest(tmp_path).update()
    keys, blocks = _row_by_row(tmp_path / "metrics.jsonl")
    assert {k: v for k, v in digest.trainer["keys"].items() if k != "time"} == keys
    assert [block[3] for block in digest.trainer["blocks"]] == blocks
    assert digest.trainer["ordered"] is False and {"a", "b"} == set(digest.trainer["environments"])


# lines a chunk's columns cannot hold as its rows do (that chunk is read line by line), by where they go
NOT_COLUMNS = {500: "garbage", 1200: '{"step": 5, "loss": null}', 1700: '{"step": 6, "note": "a\\":b"}'}


def test_a_long_build_read_as_columns_holds_what_reading_each_row_holds(tmp_path, monkeypatch):
    """A long build reads columns (polars) where they hold what the rows hold, and each row where they do not;
    the digest is the same either way: keys that first appear late, ints and floats in one column, steps
    written again, two environments, blocks that run across chunks, a build continued from a stored digest,
    and among them the chunks the columns cannot hold (garbage, a null, a text value with a quote)."""
    from hermes_rl.core.readers import metrics_digest

    rng = random.Random(11)
    lines = []
    for index in range(8 * BLOCK_ROWS + 33):
        step = index // 2 if index < 400 else index - 40 * (index % 211 == 0)  # steps written twice, or again
        row: dict = {"step": step, "time": 1000.0 + index, "reward/mean": round(rng.uniform(-1, 1), 3)}
        row["tokens"] = rng.choice([3, 7, 11]) if index < 700 else rng.choice([2.5, 9])  # ints, then floats
        if index % 10 == 0:
            row["eval/percent_correct"] = rng.choice([0.0, 0.5, 1.0])
        if index > 300:
            row["late/metric"] = index % 17  # a key the first rows' columns lack
        if index % 3 == 0:
            row["environment"] = rng.choice(["a", "b"])
        lines.append(json.dumps(row))
        if index in NOT_COLUMNS:
            lines.append(NOT_COLUMNS[index])
    lines += [json.dumps({"step": 9_999, "reward/mean": v, "tokens": 1}) for v in (0.25, 0.75)]  # the last step, twice
    text = "\n".join(lines) + "\n"
    half = text.index("\n", len(text) // 2) + 1
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "metrics.jsonl").write_text(text)
    by_rows = MetricsDigest(tmp_path / "rows").update()  # small: read line by line

    read_as = {"columns": 0, "rows": 0}
    fold_frame, fold = metrics_digest._fold_frame, metrics_digest._fold

    def counted(kind, action):
        def wrapper(*args):
            read_as[kind] += 1
            return action(*args)

        return wrapper

    monkeypatch.setattr(metrics_digest, "_fold_frame", counted("columns", fold_frame))
    monkeypatch.setattr(metrics_digest, "_fold", counted("rows", fold))
    monkeypatch.setattr(metrics_digest, "COLUMNAR_BYTES", 0)  # every build long
    monkeypatch.setattr(metrics_digest, "READ_BYTES", 9_000)  # many chunks, blocks across them
    (tmp_path / "columns").mkdir()
    (tmp_path / "columns" / "metrics.jsonl").write_text(text[:half])
    MetricsDigest(tmp_path / "columns").update()
    with open(tmp_path / "columns" / "metrics.jsonl", "a") as handle:
        handle.write(text[half:])
    by_columns = MetricsDigest(tmp_path / "columns").update()  # continued from the stored digest

    assert read_as["columns"] >= 10 and read_as["rows"] >= 3  # both ways were taken
    assert "late/metric" in by_columns.trainer["keys"] and "tokens@b" in by_columns.trainer["keys"]
    for field in ("keys", "blocks", "environments", "derived", "ordered", "rows", "last_step", "offset"):
        assert by_columns.trainer[field] == by_rows.trainer[field], field
    keys, blocks = _row_by_row(tmp_path / "rows" / "metrics.jsonl")
    assert {k: v for k, v in by_columns.trainer["keys"].items() if k != "time"} == keys
    assert [block[3] for block in by_columns.trainer["blocks"]] == blocks


def test_a_long_digest_build_says_how_it_goes_and_when_it_is_done():
    from hermes_rl.core.clients.cli.output import DigestProgress
    from hermes_rl.core.readers import metrics_digest

    folder = write_long_run("0000d011", 4_000, spikes={})
    shown = io.StringIO()
    token = metrics_digest.REPORT_PROGRESS.set(DigestProgress(stream=shown, after_s=0, every_s=0))
    try:
        MetricsDigest(folder).update()
    finally:
        metrics_digest.REPORT_PROGRESS.reset(token)
    lines = shown.getvalue().splitlines()
    assert lines and all(line.startswith("hermes-rl: building the metrics digest of run 0000d011: ") for line in lines)
    assert lines[0].split(": ")[2].startswith("0%") and lines[-1].split(": ")[2].startswith("100% of ")
    shown.truncate(0)
    token = metrics_digest.REPORT_PROGRESS.set(DigestProgress(stream=shown, after_s=0, every_s=0))
    try:
        MetricsDigest(folder).update()  # nothing new to digest: nothing to say
    finally:
        metrics_digest.REPORT_PROGRESS.reset(token)
    assert shown.getvalue() == ""
