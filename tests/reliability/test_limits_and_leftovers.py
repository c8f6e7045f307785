"""The rest of the list: limits from environment variables refuse negative, NaN and infinite values by
name (none of them silently means "no limit"); NaN and ±Infinity are named as such in errors;
$HERMES_HOME is created 0700 and a .env other users can read is warned about; the trainer below the
open-file limit it needs fails at once naming EMFILE; a results summary of a large metrics file is
read in bounded memory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.clients import toolset
from hermes_rl.core.daemons.pipeline import ProcessSpec
from tests.fixtures_tui import write_run
from tests.reliability.helpers import FINAL, assert_no_orphans, wait_for
from tests.reliability.test_reasons import trainer_config

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(240)]

PY = sys.executable
BAD_LIMITS = {"-1": "negative", "nan": "NaN", "NaN": "NaN", "inf": "Infinity", "-inf": "Infinity", "1e999": "Infinity"}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "hermes_rl.core.clients.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env or os.environ.copy())


@pytest.mark.parametrize("raw, named", list(BAD_LIMITS.items()))
def test_env_var_limits_refuse_what_is_no_limit(hermes_home, monkeypatch, raw, named):
    from hermes_rl.core.runs.start import max_local_runs
    from hermes_rl.core.runs.trial import resolve_timeout

    write_run("600d600d", status="running", supervisor={"pid": None}, created_at=time.time())
    monkeypatch.setenv("HERMES_RL_STALL_S", raw)
    listed = cli("runs")  # every listing computes stalls
    assert listed.returncode == 1 and "HERMES_RL_STALL_S" in listed.stderr and named in listed.stderr, listed.stderr
    monkeypatch.delenv("HERMES_RL_STALL_S")

    monkeypatch.setenv("HERMES_RL_STATUS_INTERVAL_S", raw)
    answer = toolset.rl_check_status("600d600d")
    assert "HERMES_RL_STATUS_INTERVAL_S" in answer.get("error", "") and named in answer["error"], answer
    monkeypatch.delenv("HERMES_RL_STATUS_INTERVAL_S")

    for name, read in (
        ("HERMES_RL_MAX_LOCAL_RUNS", max_local_runs),
        ("HERMES_RL_INFERENCE_TIMEOUT_S", resolve_timeout),
    ):
        monkeypatch.setenv(name, raw)
        with pytest.raises(BadInput) as refused:
            read() if name.endswith("RUNS") else read(None)
        assert name in refused.value.message and named in refused.value.message
        monkeypatch.delenv(name)


def test_nan_and_infinity_are_named_as_such(hermes_home):
    toolset.rl_select_environment("toy_addition")
    for text, named in (("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity")):
        answer = json.loads(
            toolset.call_tool_json("rl_check_status", f'{{"run_id": "600d600d", "min_interval_s": {text}}}')
        )
        assert named in answer["error"] and "float" not in answer["error"], answer
        edited = json.loads(toolset.call_tool_json("rl_edit_config", f'{{"field": "group_size", "value": {text}}}'))
        assert named in edited["error"], edited
        named_field = json.loads(
            toolset.call_tool_json("rl_edit_config", f'{{"field": "wandb_project", "value": {text}}}')
        )
        assert "error" in named_field and named in named_field["error"], named_field  # not taken as the text "nan"


def test_home_is_created_private_and_a_shared_env_file_is_warned_about(tmp_path):
    home = tmp_path / "fresh" / "home"
    env = {**os.environ, "HERMES_HOME": str(home)}
    code = "import os; os.umask(0o022); from hermes_rl.core.clients import toolset as t; "
    code += "t.rl_select_environment('toy_addition')"
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    for folder in (home, home / "rl"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, (folder, oct(folder.stat().st_mode))

    (home / ".env").write_text("OPENROUTER_API_KEY=sk-or-planted-0000\n")
    for mode, warned in ((0o644, True), (0o600, False)):
        os.chmod(home / ".env", mode)
        shown = cli("config", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert ("other users can read it" in shown.stderr) is warned, shown.stderr
        assert "sk-or-planted" not in shown.stderr


FEW_FILES_HARD = textwrap.dedent("""\
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    os.execv(sys.executable, [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", sys.argv[1]])
""")


def test_a_trainer_below_its_open_file_need_fails_at_once_naming_emfile(hermes_home, tmp_path):
    spec = ProcessSpec(name="trainer", argv=[PY, "-c", FEW_FILES_HARD, "{run_dir}/config.yaml"], completes_run=True)
    started = time.monotonic()
    run = runs.launch([spec], environment="toy", profile="local", config=trainer_config(tmp_path))
    final = wait_for(lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] in FINAL and r, 60)
    took = time.monotonic() - started
    assert final and final["status"] == "failed", final or runs.get_run(run["run_id"], sample=False)
    assert "EMFILE" in final["reason"] and "open-file limit is 64" in final["reason"], final["reason"]
    assert took < 30, f"failed after {took:.0f}s"
    assert_no_orphans(final)


def test_results_of_a_large_metrics_file_take_bounded_memory(hermes_home):
    run_dir_ = write_run("1a46e000", steps=0, env_steps=False)
    rows = 300_000  # ~100 MB: every row carries the ~25 metrics the trainer writes
    keys = [f"metric/{i:02d}" for i in range(25)]
    template = ", ".join(f'"{k}": 0.{i:02d}123456789' for i, k in enumerate(keys))
    with open(run_dir_ / "metrics.jsonl", "w") as handle:
        for step in range(1, rows + 1):
            handle.write(f'{{"step": {step}, "time": {1_700_000_000 + step}, {template}}}\n')
    assert (run_dir_ / "metrics.jsonl").stat().st_size > 90e6
    measure = textwrap.dedent("""\
        import resource, subprocess, sys
        out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        sys.stdout.write(out.stdout)
        sys.stderr.write(f"RSS_KB {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n" + out.stderr)
    """)
    argv = [PY, "-c", measure, PY, "-m", "hermes_rl.core.clients.cli", "results", "1a46e000", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=os.environ.copy())
    results = json.loads(done.stdout)
    peak_mb = int(done.stderr.split("RSS_KB ")[1].split()[0]) / 1024
    print(f"FIGURE results on a {rows}-row metrics file: peak RSS {peak_mb:.0f} MB")
    assert results["final_metrics"]["step"] == rows and results["final_metrics"]["metric/24"] == 0.24123456789
    history = results["history"]
    assert len(history) == 50 and history[0]["step"] == 1 and history[-1]["step"] == rows
    # Bounded by the 4 MB chunk the digest reads, not the file: all rows as dicts would take ~600 MB. The build
    # reads columns with polars, whose runtime is ~50 MB of it (127 MB here, 161 MB in a fresh clone that
    # compiles its modules on import, beside other tests).
    assert peak_mb < 250, f"results took {peak_mb:.0f} MB for a {rows}-row file"
