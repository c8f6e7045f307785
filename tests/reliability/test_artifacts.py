"""Generated artifacts are inert: a CSV export opens in a spreadsheet without running anything an
environment chose to log (metric names and values are the environment's), and the files hermes-rl
writes for a user (CSV, the HTML report) are private like the rest of the state."""

from __future__ import annotations

import csv
import stat

from hermes_rl.core.base.fsutil import append_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import cli
from tests.fixtures_tui import FIXED_NOW, write_run

RUN = "c0ffee01"
HOSTILE_NAMES = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3", "\tTAB", "\rCR"]


def _run_with_hostile_env_rows() -> None:
    write_run(RUN, status="completed", steps=3, total_steps=3)
    for step in (1, 2, 3):
        row = {"step": step, "time": FIXED_NOW - 100 + step}
        row.update({name: float(step) for name in HOSTILE_NAMES})
        # a text value where every other step logged a number: the column is numeric
        row["env/score"] = "=1+1" if step == 2 else 0.5 * step
        append_jsonl(run_dir(RUN) / "env_metrics.jsonl", row)


def test_csv_export_neutralises_formulas_in_names_and_keeps_only_numbers(hermes_home, tmp_path):
    _run_with_hostile_env_rows()
    out = tmp_path / "m.csv"
    assert cli.main(["metrics", RUN, "--format", "csv", "-o", str(out)]) == 0
    with open(out, newline="") as handle:
        table = list(csv.reader(handle))
    header, body = table[0], table[1:]
    for cell in [*header, *(c for row in body for c in row)]:
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        # a leading minus is a formula too, unless the cell is a plain number
        if cell.startswith("-"):
            float(cell)
    for name in HOSTILE_NAMES:
        assert "'" + name in header  # still there, readable, quoted as text
    score = header.index("env/score")
    assert [row[score] for row in body] == ["0.5", "", "1.5"]


def test_exports_and_reports_are_written_private(hermes_home, tmp_path):
    _run_with_hostile_env_rows()
    csv_path = tmp_path / "m.csv"
    assert cli.main(["metrics", RUN, "--format", "csv", "-o", str(csv_path)]) == 0
    assert cli.main(["report", RUN]) == 0
    for path in (csv_path, run_dir(RUN) / "report.html"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
