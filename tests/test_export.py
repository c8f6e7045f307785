"""Data out: `hermes-rl metrics` as CSV and JSON read back row by row, and `hermes-rl report`'s one HTML
page — self-contained, rendered by headless Chromium (Debian's package) and the picture checked —
over a run folder as a supervisor and a real toy_addition trainer leave it."""

from __future__ import annotations

import csv
import html.parser
import json
import re
import shutil
import subprocess

import pytest

from hermes_rl.core.base.fsutil import append_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import cli
from hermes_rl.core.runs import export
from tests.fixtures_tui import FIXED_NOW, REAL_ROLLOUTS, metric_row, write_run, write_run_config

RUN = "a1b2c3d4"
STEPS = 40


@pytest.fixture
def failed_run(hermes_home):
    """A 40-step run that failed: metrics, evals every 5 steps, the rollouts a real run wrote, its
    config, and the trainer's failure in events.jsonl."""
    write_run(RUN, status="failed", steps=STEPS, total_steps=100, reason="trainer exited with code 1")
    shutil.copyfile(REAL_ROLLOUTS, run_dir(RUN) / "rollouts.jsonl")
    write_run_config(RUN, group_size=8, learning_rate=3e-4)
    append_jsonl(
        run_dir(RUN) / "events.jsonl",
        {
            "time": FIXED_NOW,
            "event": "process_state",
            "process": "trainer",
            "state": "failed",
            "message": "trainer exited with code 1",
            "detail": "RuntimeError: CUDA-free explosion at step 40",
        },
    )
    return RUN


def test_metrics_csv_has_every_step_with_env_rows_merged(failed_run, tmp_path, capsys):
    out = tmp_path / "m.csv"
    assert cli.main(["metrics", RUN, "--format", "csv", "-o", str(out)]) == 0
    assert f"{STEPS} rows" in capsys.readouterr().err
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == list(range(1, STEPS + 1))
    assert list(rows[0])[:4] == ["step", "time", "reward/mean", "eval/percent_correct"]  # headline first
    for row in rows:
        step = int(row["step"])
        assert float(row["reward/mean"]) == metric_row(step, FIXED_NOW - 3600)["reward/mean"]
        assert float(row["train/percent_correct"]) == round(min(1.0, 0.1 + 0.04 * step), 4)  # from env rows
        assert (row["eval/percent_correct"] != "") == (step % 5 == 0)


def test_metrics_json_with_chosen_keys(failed_run, capsys):
    assert cli.main(["metrics", RUN, "--keys", "eval/percent_correct,reward/mean", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == STEPS and list(rows[4]) == ["step", "time", "eval/percent_correct", "reward/mean"]
    assert rows[4]["eval/percent_correct"] == pytest.approx(0.25) and rows[3]["eval/percent_correct"] is None


def test_an_unknown_metric_or_run_is_a_clear_error(failed_run, capsys):
    assert cli.main(["metrics", RUN, "--keys", "reward/maen"]) == 1
    err = capsys.readouterr().err
    assert "has no metric 'reward/maen'" in err and "its metrics: reward/mean" in err
    assert cli.main(["report", "feedf00d"]) == 1
    assert "feedf00d" in capsys.readouterr().err


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_report_holds_charts_evals_config_rollouts_and_the_failure(failed_run, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert cli.main(["report", RUN, "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    parsed = _Collect()
    parsed.feed(page)
    text = " ".join(parsed.text)
    # nothing to fetch: no script, no stylesheet or image link, no URL but the SVG namespace
    assert not [t for t, _ in parsed.tags if t in ("script", "link", "img", "iframe", "object")]
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}
    charts = [a for t, a in parsed.tags if t == "svg"]
    assert {c["aria-label"] for c in charts} >= {"reward/mean", "eval/percent_correct", "train/loss"}
    assert "trainer exited with code 1" in text and "CUDA-free explosion at step 40" in text
    evals = page.split("<h2>Evaluations</h2>")[1].split("<h2>")[0]
    assert re.findall(r"<tr><td>(\d+)</td>", evals) == [str(s) for s in range(5, STEPS + 1, 5)]
    assert "env.group_size" in text and "0.0003" in text  # the config
    assert "step 1: best" in text and "step 12: worst" in text  # the real run's first and last recorded steps


def _png_pixels(path):
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB")
        data = rgb.tobytes()
        return rgb.size, list(zip(data[0::3], data[1::3], data[2::3]))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_headless_chromium_renders_the_report_offline(failed_run, tmp_path):
    page = export.write_report(RUN, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",  # as root (CI containers)
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: the page must not need one
            "--window-size=1280,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr.decode(errors="replace")[-2000:]
    (width, height), pixels = _png_pixels(shot)
    assert (width, height) == (1280, 1600)
    smooth_line = sum(1 for p in pixels if abs(p[0] - 5) < 30 and abs(p[1] - 80) < 30 and abs(p[2] - 174) < 30)
    failed_badge = sum(1 for p in pixels if p[0] > 240 and 225 < p[1] < 245 and 225 < p[2] < 245)  # #ffebe9
    blank = sum(1 for p in pixels if p == (255, 255, 255))
    assert smooth_line > 1500, "the charts' moving-average lines are drawn"
    assert failed_badge > 200, "the failed status badge is drawn"
    assert blank < 0.97 * len(pixels), "the page is not empty"


def test_a_long_runs_report_thins_its_eval_table_and_charts_but_keeps_the_ends(hermes_home):
    write_run("0badc0de", status="completed", steps=1500, total_steps=1500)
    page = export.html_report("0badc0de")
    evals = page.split("<h2>Evaluations</h2>")[1].split("<h2>")[0]
    steps = [int(s) for s in re.findall(r"<tr><td>(\d+)</td>", evals)]
    assert len(steps) == export.EVAL_TABLE_ROWS and steps[0] == 5 and steps[-1] == 1500
    assert "200 of 300 evaluations" in evals and "hermes-rl metrics 0badc0de --keys eval/percent_correct" in evals
    reward_chart = page.split('aria-label="reward/mean"')[1].split("</svg>")[0]
    points = re.findall(r'class="raw" points="([^"]+)"', reward_chart)[0].split()
    assert export.CHART_POINTS - 4 <= len(points) <= export.CHART_POINTS


def test_a_report_of_a_run_logging_dozens_of_metrics_stays_small_and_keeps_each_spike(hermes_home):
    """A trainer logs ~45 metrics a step now (signals/, tokens/, time/): every chart at 600 points made an
    800-step run's page 382 KB. The page stays under 200 KB, and a one-step spike in a minor metric is
    still drawn (its bucket's highest point), not thinned away."""
    import math

    folder = write_run("5ca1ab1e", status="completed", steps=1, total_steps=800)
    rows = []
    for step in range(1, 801):
        row = {"step": step, "reward/mean": 0.5 + 0.3 * math.sin(step / 40)}
        row |= {f"signals/m{i:02d}": math.cos(step / (15 + i)) + 0.001 * step for i in range(44)}
        row["signals/m07"] = 50.0 if step == 333 else row["signals/m07"]
        rows.append(json.dumps(row))
    (folder / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    page = export.html_report("5ca1ab1e")
    assert len(page.encode()) < 200_000, len(page.encode())
    spiky = page.split('aria-label="signals/m07"')[1].split("</svg>")[0]
    assert ">50<" in spiky or ">50.0<" in spiky, "the axis reaches the spike"
    raw = [p.split(",") for p in re.findall(r'class="raw" points="([^"]+)"', spiky)[0].split()]
    top = min(float(y) for _, y in raw)  # SVG y grows downwards: the spike is the smallest y
    assert top <= 27.0, top  # drawn at the top of the plot (top margin 26)


def test_the_dashboards_palette_writes_the_selected_runs_report(failed_run):
    import asyncio

    from hermes_rl.tui.app import HermesDashboard
    from tests.fixtures_tui import fixed_clock, wait_for

    async def scenario():
        app = HermesDashboard(clock=fixed_clock, run_id=RUN)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: app.selected_run == RUN, what="the run selected")
            await pilot.press("colon", *"report", "enter")
            await wait_for(
                pilot, lambda: any("report of run" in n.message for n in app._notifications), what="the report"
            )
            assert (run_dir(RUN) / "report.html").read_text().startswith("<!DOCTYPE html>")

    asyncio.run(scenario())


# -- charts and rollouts that tell the truth ----------------------------------------------------


def _axis_labels(svg: str) -> list[str]:
    found = re.findall(r'<text class="axis" x="\d+" y="[\d.]+" text-anchor="end">([^<]*)</text>', svg)
    return [label for label in found if not label.startswith("step")]


def test_an_eval_or_sparse_series_is_not_smoothed_a_dense_one_is():
    """33 evals every 10 steps that hit 0.96 at step 48: drawn as measured, never a moving average that
    reaches 0.96 hundreds of steps later."""
    evals = [(s, 0.96 if s >= 48 else 0.1) for s in range(0, 330, 10)]
    assert len(evals) == 33
    for title in ("eval/percent_correct", "train/sparse_thing"):
        svg = export.svg_chart(title, evals)
        assert 'class="raw"' not in svg and 'class="mark"' in svg
    dense = [(s, 0.5 + (s % 3) / 10) for s in range(40)]
    assert 'class="raw"' in export.svg_chart("reward/mean", dense)


def test_y_labels_fit_the_margin_and_a_constant_is_drawn_around_its_value():
    svg = export.svg_chart("train/learning_rate", [(1, 0.0006919), (2, 0.00071234), (3, -0.00069191)])
    labels = _axis_labels(svg)
    assert labels == ["7.12e-04", "-6.92e-04"] and all(len(label) <= 9 for label in labels)
    assert _axis_labels(export.svg_chart("x", [(s, 1.0) for s in range(5)])) == ["1.1", "0.9"]
    assert _axis_labels(export.svg_chart("x", [(s, 0.0) for s in range(5)])) == ["0.5", "-0.5"]


def test_worst_completions_are_only_those_below_the_best(hermes_home):
    write_run("c0ffee01", status="completed", steps=2, total_steps=2)
    rows = [
        {
            "step": step,
            "time": FIXED_NOW,
            "group": 0,
            "prompt": "Q: 1+1=\nA:",
            "completions": [
                {"text": f" 2 ({i})", "reward": 1.0, "advantage": 0.0, "tokens": 3, "finish": "stop"} for i in range(4)
            ]
            + ([{"text": " 5", "reward": 0.0, "advantage": -1.0, "tokens": 2, "finish": "stop"}] if step == 2 else []),
        }
        for step in (1, 2)
    ]
    for row in rows:
        append_jsonl(run_dir("c0ffee01") / "rollouts.jsonl", row)
    section = export._rollout_section("c0ffee01")
    assert "step 1: all 4 completions scored 1" in section and "step 1: worst" not in section
    assert "step 2: worst 1 of 5" in section
    worst = section.split("step 2: worst")[1]
    assert "reward 0 " in worst and "reward 1 " not in worst


def test_where_each_worker_ran_reads_the_same_in_status_report_dashboard_and_tools(hermes_home, capsys, monkeypatch):
    """Every launcher's one line of where a job runs, in the same words in each view."""
    from hermes_rl.core.clients.toolset import call_tool
    from hermes_rl.core.daemons import launchers
    from hermes_rl.core.runs import get_run
    from hermes_rl.tui.panes.processes import _where

    jobs = {
        "env-1": ("slurm", "16", "node3", "CANCELLED"),
        "env-2": ("ray", "hermes-0cafe123-env-2-a1b2c3", "10.0.0.7", "STOPPED"),
        "env-3": ("skypilot", "hermes-0cafe123-env-3-9f0e", "kubernetes", "CANCELLED"),
    }
    procs = [{"name": "trainer", "pid": 41000, "state": "stopped", "exit_code": -15, "argv_redacted": ["t"]}]
    for name, (launcher, job_id, node, state) in jobs.items():
        job = launchers.job_record(launcher, job_id, node, state)
        procs.append({"name": name, "launcher": launcher, "job": job, "state": "stopped", "argv_redacted": [name]})
    write_run("0cafe123", status="stopped", steps=3, processes=procs)
    shown = {p["name"]: p for p in get_run("0cafe123", sample=False)["processes"]}
    page = export.html_report("0cafe123")
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal: the launcher's line stays whole
    assert cli.main(["status", "0cafe123"]) == 0
    narrow = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "250")  # a terminal wide enough for every column of status
    assert cli.main(["status", "0cafe123"]) == 0
    status_text = capsys.readouterr().out
    tool = call_tool("rl_check_status", {"run_id": "0cafe123"})
    told = {p["name"]: p["where"] for p in tool["processes"]}
    for name, (launcher, job_id, node, state) in jobs.items():
        line = launchers.get(launcher).where({"node": node, "state": state})
        assert line == f"{node} {state}" and shown[name]["where"] == line and told[name] == line
        assert f"<td>job {job_id} {line}</td>" in page  # the report, as the dashboard's process pane says it
        assert _where(shown[name]) == f"job {job_id} {line}"
        assert line in status_text and job_id in status_text and line in narrow
    assert "<th>where</th>" in page and "<td>local</td>" in page
