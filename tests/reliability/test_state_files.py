"""State files are untrusted input: a malformed or hostile run.json affects only its own run (listed as
unreadable with the reason), and no path is taken from it (log paths derive from the run id; a run
folder or file leading outside $HERMES_HOME is refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.base.paths import logs_dir, process_log_path, run_dir, runs_dir
from hermes_rl.core.clients import toolset
from tests.reliability.helpers import CORPUS

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

CORPUS_RUNS = json.loads((CORPUS / "run_json.json").read_text())
GOOD_ID = "600d600d"


def cli(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hermes_rl.core.clients.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ.copy())


def _valid_record(run_id: str) -> dict:
    now = time.time()
    return {
        "run_id": run_id,
        "environment": "toy",
        "profile": "local",
        "status": "completed",
        "created_at": now - 100,
        "started_at": now - 99,
        "ended_at": now - 90,
        "reason": None,
        "supervisor": {"pid": None},
        "ports": {},
        "processes": [{"name": "trainer", "state": "exited", "pid": None, "log": None}],
        "total_steps": 10,
        "wandb": None,
    }


def _write_run(run_id: str, data: bytes) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    (folder / "run.json").write_bytes(data)


def _hostile_bytes(entry: list, section: str) -> bytes:
    name, content, _ = entry
    if section == "fields":
        record = {**_valid_record("ffffffff"), **content}
        record.pop(content.get("_drop", ""), None)
        record.pop("_drop", None)
        return json.dumps(record).encode()
    if content == "GENERATED:nested":
        return b'{"status": "running", "processes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    if content == "GENERATED:large":
        return json.dumps({**_valid_record("ffffffff"), "reason": "x" * (5 * 1024 * 1024)}).encode()
    if content == "GENERATED:badutf8":
        return b'{"status": "running", "reason": "\xff\xfe"}'
    return content.encode()


ENTRIES = [("fields", e) for e in CORPUS_RUNS["fields"]] + [("raw", e) for e in CORPUS_RUNS["raw"]]


@pytest.mark.parametrize("section, entry", ENTRIES, ids=[e[0] for _, e in ENTRIES])
def test_a_bad_run_json_is_listed_unreadable_and_hides_nothing(section, entry):
    _write_run(GOOD_ID, json.dumps(_valid_record(GOOD_ID)).encode())
    _write_run("ffffffff", _hostile_bytes(entry, section))
    expected = entry[2]

    listed = {r["run_id"]: r for r in runs.list_runs()}
    assert listed[GOOD_ID]["status"] == "completed"
    bad = listed["ffffffff"]
    assert bad["status"] == "unreadable" and expected in bad["reason"], bad
    with pytest.raises(HermesError, match="unreadable"):
        runs.get_run("ffffffff")

    tool = toolset.call_tool("rl_list_runs", {})
    assert {r["run_id"]: r["status"] for r in tool["runs"]} == {GOOD_ID: "completed", "ffffffff": "unreadable"}
    status = toolset.call_tool("rl_check_status", {"run_id": "ffffffff"})
    assert "error" in status and "unreadable" in status["error"], status


def test_cli_lists_every_run_beside_a_bad_one():
    _write_run(GOOD_ID, json.dumps(_valid_record(GOOD_ID)).encode())
    _write_run("ffffffff", json.dumps({**_valid_record("ffffffff"), "created_at": "yesterday"}).encode())
    out = cli("runs")
    assert out.returncode == 0, out.stderr
    assert GOOD_ID in out.stdout and "ffffffff" in out.stdout and "unreadable" in out.stdout
    out = cli("runs", "--json")
    assert out.returncode == 0 and {r["status"] for r in json.loads(out.stdout)} >= {"completed", "unreadable"}


def test_log_paths_come_from_the_run_id_never_from_run_json(tmp_path):
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("OUTSIDE-HERMES-HOME\n")
    record = _valid_record(GOOD_ID)
    record["processes"] = [{"name": "trainer", "state": "exited", "pid": None, "log": str(outside)}]
    _write_run(GOOD_ID, json.dumps(record).encode())
    own = process_log_path("trainer", GOOD_ID)
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text("the trainer's own line\n")

    view = runs.get_run(GOOD_ID, sample=False)
    assert view["logs"] == {"trainer": str(own)} and view["processes"][0]["log"] == str(own)
    status = toolset.call_tool("rl_check_status", {"run_id": GOOD_ID})
    assert str(outside) not in json.dumps(status)
    out = cli("logs", GOOD_ID)
    assert out.returncode == 0, out.stderr
    assert "OUTSIDE-HERMES-HOME" not in out.stdout and "the trainer's own line" in out.stdout


def test_a_run_folder_or_log_leading_outside_home_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_text(json.dumps(_valid_record("0badf01d")))
    runs_dir().mkdir(parents=True, exist_ok=True)
    (runs_dir() / "0badf01d").symlink_to(elsewhere)
    _write_run(GOOD_ID, json.dumps(_valid_record(GOOD_ID)).encode())

    listed = {r["run_id"]: r for r in runs.list_runs()}
    assert listed[GOOD_ID]["status"] == "completed"
    assert listed["0badf01d"]["status"] == "unreadable" and "outside" in listed["0badf01d"]["reason"]
    with pytest.raises(HermesError, match="outside"):
        runs.get_run("0badf01d")

    # a log file planted as a symlink out of $HERMES_HOME is not followed
    secret = tmp_path / "secret.txt"
    secret.write_text("OUTSIDE-HERMES-HOME\n")
    logs_dir().mkdir(parents=True, exist_ok=True)
    process_log_path("trainer", GOOD_ID).symlink_to(secret)
    out = cli("logs", GOOD_ID)
    assert "OUTSIDE-HERMES-HOME" not in out.stdout, out.stdout
