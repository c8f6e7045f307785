"""Metrics readers: incremental tails, merge of trainer and environment rows, tolerance of bad lines."""

from __future__ import annotations

import json

from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.readers.metrics import (
    JsonlTail,
    RunMetrics,
    eval_endpoints,
    last_metrics,
    metric_keys,
    metric_series,
    read_metrics,
)


def append(path, text: str):
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def test_tail_reads_only_new_complete_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.poll() == []
    append(path, '{"step": 1, "x": 1}\n{"step": 2, "x"')
    assert [r["step"] for r in tail.poll()] == [1]
    append(path, ": 2}\n")
    assert tail.poll() == [{"step": 2, "x": 2}]
    assert tail.poll() == []


def test_tail_skips_garbage_and_nan(tmp_path):
    path = tmp_path / "g.jsonl"
    append(path, 'garbage\n[1,2]\n{"step": 1, "loss": NaN}\n{bad json}\n{"step": 2, "loss": 0.5}\n')
    rows = JsonlTail(path).poll()
    assert rows == [{"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]


def test_tail_restarts_after_truncation(tmp_path):
    path = tmp_path / "t.jsonl"
    append(path, '{"step": 1}\n{"step": 2}\n')
    tail = JsonlTail(path)
    tail.poll()
    path.write_text('{"step": 9}\n')
    assert tail.poll() == [{"step": 9}]
    assert tail.resets == 1


def make_run(run_id="0123abcd"):
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    return folder


def test_read_metrics_merges_env_rows_by_step():
    folder = make_run()
    for step in range(1, 4):
        append(
            folder / "metrics.jsonl",
            json.dumps({"step": step, "time": 100.0 + step, "train/loss": 1.0 / step, "reward/mean": step * 0.1})
            + "\n",
        )
    append(folder / "env_metrics.jsonl", json.dumps({"step": 2, "train/percent_correct": 0.5}) + "\n")
    append(folder / "env_metrics.jsonl", json.dumps({"step": 3, "eval/percent_correct": 0.25, "time": 1.0}) + "\n")
    append(folder / "env_metrics.jsonl", '{"no_step": 1}\n{"step": 5, "custom/thing": 7}\n{"step": 6, "x"')
    rows = read_metrics("0123abcd")
    assert [r["step"] for r in rows] == [1, 2, 3, 5]
    assert rows[1]["train/percent_correct"] == 0.5 and rows[1]["train/loss"] == 0.5
    assert rows[2]["eval/percent_correct"] == 0.25
    assert rows[2]["time"] == 103.0  # the trainer's time wins over an environment's
    assert metric_series(rows, "train/loss") == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert metric_keys(rows)[:4] == ["reward/mean", "eval/percent_correct", "train/loss", "train/percent_correct"]
    assert "custom/thing" in metric_keys(rows)
    last = last_metrics("0123abcd")
    assert last["step"] == 5 and last["train/loss"] == 1 / 3 and last["train/percent_correct"] == 0.5


def test_run_metrics_incremental_poll_reports_change():
    folder = make_run("0123abce")
    metrics = RunMetrics(folder)
    assert metrics.poll() is False
    append(folder / "metrics.jsonl", '{"step": 1, "reward/mean": 0.2}\n')
    assert metrics.poll() is True
    assert metrics.poll() is False
    append(folder / "metrics.jsonl", '{"step": 2, "reward/mean": null}\n{"step": 3, "reward/mean": true}\n')
    metrics.poll()
    assert metrics.series("reward/mean") == [(1, 0.2)]  # null and booleans are not numbers


def test_read_metrics_of_run_without_files_is_empty():
    make_run("0123abcf")
    assert read_metrics("0123abcf") == []
    assert last_metrics("0123abcf") == {}


def test_live_reader_stays_bounded_and_keeps_the_newest_rows(tmp_path, monkeypatch):
    """A reader of a very long run keeps at most max_rows rows: the older half thinned, the newest intact."""
    from hermes_rl.core.readers import metrics as metrics_module

    path = tmp_path / "metrics.jsonl"
    reader = metrics_module.RunMetrics(tmp_path, max_rows=100)
    for start in range(0, 1000, 50):
        with open(path, "a") as handle:
            for step in range(start + 1, start + 51):
                handle.write(json.dumps({"step": step, "reward/mean": step / 1000}) + "\n")
        reader.poll()
        assert len(reader.rows) <= 100
    steps = [row["step"] for row in reader.rows]
    assert steps == sorted(steps) and steps[-1] == 1000 and steps[0] <= 50
    assert steps[-25:] == list(range(976, 1001))
    assert reader.keys() == ["reward/mean"]
    assert reader.last()["reward/mean"] == 1.0


def test_tail_reader_starts_at_a_line_near_the_end_and_follows_appends(tmp_path):
    """A sparkline reader of a long finished run reads only its last bytes, never a cut line, then follows."""
    from hermes_rl.core.readers.metrics import RunMetrics

    with open(tmp_path / "metrics.jsonl", "w") as handle:
        for step in range(1, 20_001):
            handle.write(json.dumps({"step": step, "reward/mean": step / 20_000, "note": "x" * (step % 7)}) + "\n")
    with open(tmp_path / "env_metrics.jsonl", "w") as handle:
        for step in range(1, 20_001):
            handle.write(json.dumps({"step": step, "train/percent_correct": 0.5}) + "\n")
    reader = RunMetrics(tmp_path, max_rows=50, tail_bytes=4096)
    assert reader.poll()
    steps = [row["step"] for row in reader.rows]
    assert steps[-1] == 20_000 and len(steps) <= 50 and steps == sorted(steps)
    assert steps[0] > 19_000, "read from the start of the file"
    assert steps[-20:] == list(range(19_981, 20_001))
    version = reader.version
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 20_001, "reward/mean": 1.0}) + "\n")
    assert reader.poll() and reader.version == version + 1
    assert reader.series("reward/mean")[-1] == (20_001, 1.0)
    assert not reader.poll() and reader.version == version + 1


def test_live_reader_rows_stay_sorted_when_steps_arrive_out_of_order(tmp_path):
    from hermes_rl.core.readers.metrics import RunMetrics

    path = tmp_path / "metrics.jsonl"
    reader = RunMetrics(tmp_path)
    for batch in ([1, 2, 3], [5, 4], [6]):
        with open(path, "a") as handle:
            for step in batch:
                handle.write(json.dumps({"step": step, "train/loss": float(step)}) + "\n")
        reader.poll()
        assert [row["step"] for row in reader.rows] == sorted(row["step"] for row in reader.rows)
    assert [row["step"] for row in reader.rows] == [1, 2, 3, 4, 5, 6]
    assert reader.series("train/loss", tail=2) == [(5, 5.0), (6, 6.0)]


def test_eval_endpoints_of_a_long_run_read_only_its_head_and_tail(tmp_path):
    """The runs listing's eval column: the first and the latest eval row, found among many other
    environment rows without reading the middle of the file, a partial last line ignored."""
    path = tmp_path / "env_metrics.jsonl"
    with open(path, "w") as handle:
        handle.write(json.dumps({"step": 0, "train/percent_correct": 0.1}) + "\n")
        handle.write(json.dumps({"step": 0, "eval/percent_correct": 0.04}) + "\n")
        for step in range(1, 40_000):  # ~2 MB of rows; evals every 25 steps
            row = {"step": step, "train/percent_correct": 0.5, "pad": "x" * 20}
            if step % 25 == 0:
                row["eval/percent_correct"] = min(1.0, step / 10_000)
            handle.write(json.dumps(row) + "\n")
        handle.write(json.dumps({"step": 40_000, "train/percent_correct": 0.9}) + "\n")
        handle.write('{"step": 40001, "eval/percent_correct": 0.')  # the writer is mid-line
    assert path.stat().st_size > 1 << 20
    assert eval_endpoints(tmp_path) == (0.04, 1.0)
    assert eval_endpoints(tmp_path / "missing") == (None, None)
    (tmp_path / "env_metrics.jsonl").write_text(json.dumps({"step": 1, "train/percent_correct": 0.2}) + "\n")
    assert eval_endpoints(tmp_path) == (None, None)  # an environment that never evaluates


def test_recent_points_are_each_keys_last_values_as_metric_series_gives_them():
    from hermes_rl.core.readers.metrics import recent_points

    rows = []
    for step in range(1, 61):
        row = {"step": step, "time": 1000.0 + step, "reward/mean": step / 60, "flag": True, "env": "toy"}
        if step % 7 == 0:
            row["eval/percent_correct"] = step / 100  # a sparser key
        if step == 30:
            row["reward/mean"] = float("nan")  # not a value
        rows.append(row)
    rows.append({"time": 1.0, "reward/mean": 9.0})  # no step: not a point
    points = recent_points(rows, 5)
    assert set(points) == {"reward/mean", "eval/percent_correct"}  # bools, names, step and time left out
    for key, got in points.items():
        assert got == metric_series(rows, key)[-5:]
