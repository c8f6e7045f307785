"""The bad-input corpus (tests/reliability/corpus/, plus what is too large to commit, generated here):
each input gets a clear error (HermesError, a JSON error from a tool, a warning, a skipped line),
never a traceback, and nothing already stored is lost."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput, HermesError
from hermes_rl.core.base.paths import PROJECT_ROOT, run_dir
from hermes_rl.core.clients import toolset
from hermes_rl.core.envs import drafts as config
from hermes_rl.core.envs.discovery import discover_environments, find_environment
from tests.fixtures_config import ENV_FIXTURES, fixture_id
from tests.reliability.helpers import CORPUS, assert_no_orphans, client_env, record, wait_for

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]

ENV = "fixture_basic"  # tests/data/envs/basic_env.py: group_size, batch_size, wandb_name, ...


def _cli_many(home: Path, commands: list[list[str]], env: dict | None = None) -> list[tuple[list[str], int, str, str]]:
    """Run `python -m hermes_rl.core.clients.cli ...` commands side by side; (argv, exit code, stdout, stderr) each."""
    env = env or client_env(home)
    procs = [
        (
            argv,
            subprocess.Popen(
                [sys.executable, "-m", "hermes_rl.core.clients.cli", *argv],
                cwd=str(PROJECT_ROOT),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            ),
        )
        for argv in commands
    ]
    out = []
    for argv, proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        out.append((argv, proc.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")))
    return out


def _assert_clean_cli_errors(results) -> None:
    for argv, code, stdout, stderr in results:
        assert "Traceback" not in stdout + stderr, (argv, stderr[-2000:])
        assert "unexpected error" not in stdout + stderr, (argv, stderr[-500:])
        assert code != 0, (argv, stdout[-500:])
        assert stderr.strip().startswith("hermes-rl:") or '"error"' in stdout, (argv, stdout[-300:], stderr[-300:])


def _assert_json_error(answer: dict) -> None:
    assert set(answer) >= {"error"} and "Traceback" not in json.dumps(answer), answer
    assert "failed:" not in answer["error"], f"an unexpected exception, not a clear error: {answer}"
    json.dumps(answer, allow_nan=False)


# ------------------------------------------------------------------ environment files


def test_broken_environment_files_are_reported_and_the_good_ones_stay(hermes_home, user_envs):
    for path in (CORPUS / "envs").iterdir():
        shutil.copy(path, user_envs / path.name)
    shutil.copy(ENV_FIXTURES / "basic_env.py", user_envs / "basic_env.py")
    big = user_envs / "five_megabytes.py"
    with open(big, "w") as handle:  # 5 MB of valid Python: a docstring-free wall of assignments
        handle.write('"""A 5 MB file."""\n')
        line = "x_%07d = 'padding padding padding padding padding padding padding padding'\n"
        n = 0
        while handle.tell() < 5 * 1024 * 1024:
            handle.write(line % n)
            n += 1
    envs = discover_environments()
    by_file = {Path(e.file).name: e for e in envs}
    assert by_file["basic_env.py"].error is None and find_environment(ENV).name == ENV  # nothing lost
    for bad in ("syntax_error.py", "binary_content.py"):
        assert by_file[bad].error, by_file[bad]
    # A cycle and a 5 MB file are not environments; discovery neither hangs nor raises.
    for name in ("circular_a.py", "circular_b.py", "self_inherit.py", "five_megabytes.py"):
        info = by_file.get(name)
        assert info is None or info.error or not info.class_name.startswith("Loop"), info
    answer = toolset.rl_list_environments()
    assert "error" not in answer
    broken = next(e for e in envs if Path(e.file).name == "syntax_error.py")
    with pytest.raises(HermesError):
        config.editable_fields(broken)
    answer = toolset.rl_select_environment(broken.name)
    _assert_json_error(answer) if "error" in answer else None
    results = _cli_many(hermes_home, [["envs"], ["envs", "--json"]])
    for argv, code, stdout, stderr in results:
        assert code == 0 and "Traceback" not in stdout + stderr, (argv, stderr[-2000:])
        assert ENV in stdout
    record("bad_input", area="environment files", inputs=len(list((CORPUS / "envs").iterdir())) + 1, tracebacks=0)


# ------------------------------------------------------------------ YAML


def test_bad_yaml_drafts_selection_and_profiles(hermes_home, fixture_envs):
    config.set_field("group_size", 4, env_name=ENV, profile="local")
    draft = hermes_home / "rl" / "drafts" / f"{fixture_id(ENV)}.yaml"
    tried = 0
    for sample in sorted((CORPUS / "yaml").iterdir()):
        tried += 1
        raw = sample.read_bytes()
        # As a draft: defaults with a warning; the file is kept, never deleted.
        draft.write_bytes(raw)
        view = config.get_config(ENV, "local")
        assert isinstance(view.values()["group_size"], int)
        assert draft.read_bytes() == raw, sample.name
        answer = toolset.rl_get_current_config()
        assert "Traceback" not in json.dumps(answer)
        # As the selection file: ignored with a warning.
        selection = hermes_home / "rl" / "current.yaml"
        selection.write_bytes(raw)
        assert config.current_selection()["environment"] in (None, "x")
        # As a profile override: a clear error or the built-in profile.
        profile_file = hermes_home / "rl" / "profiles" / "local.yaml"
        profile_file.parent.mkdir(parents=True, exist_ok=True)
        profile_file.write_bytes(raw)
        from hermes_rl.core.envs.profiles import get_profile

        try:
            assert get_profile("local").name == "local"
        except HermesError as exc:
            assert exc.message
        profile_file.unlink()
        selection.unlink()
    # Editing over a corrupt draft keeps the old bytes aside.
    draft.write_bytes((CORPUS / "yaml" / "syntax_error.yaml").read_bytes())
    config.set_field("group_size", 8, env_name=ENV, profile="local")
    kept = [p for p in draft.parent.iterdir() if ".corrupt-" in p.name]
    assert kept and kept[0].read_bytes() == (CORPUS / "yaml" / "syntax_error.yaml").read_bytes()
    assert config.get_config(ENV, "local").values()["group_size"] == 8
    draft.write_bytes((CORPUS / "yaml" / "alias_bomb.yaml").read_bytes())
    results = _cli_many(
        hermes_home,
        [["config", "--env", ENV, "--profile", "local"]],
        env={**client_env(hermes_home), "HERMES_RL_ENV_PATH": os.environ["HERMES_RL_ENV_PATH"]},
    )
    for argv, code, stdout, stderr in results:
        assert code == 0 and "Traceback" not in stdout + stderr, (argv, stderr[-2000:])
    record("bad_input", area="YAML (draft, selection, profile)", inputs=tried * 3, tracebacks=0)


# ------------------------------------------------------------------ config values


def test_wrong_config_values_are_refused_and_the_draft_is_unchanged(hermes_home, fixture_envs):
    config.set_field("group_size", 4, env_name=ENV, profile="local")
    draft = hermes_home / "rl" / "drafts" / f"{fixture_id(ENV)}.yaml"
    before = draft.read_bytes()
    values = json.loads((CORPUS / "config_values.json").read_text())
    values["group_size"] += [math.nan, math.inf, -math.inf, 10**40, "x" * 10_000]
    values["no_such_field"] = [1]
    values["x" * 10_000] = [1]
    values["max_token_length"] = [8]  # locked by the profile
    tried = 0
    for field, bad_values in values.items():
        for value in bad_values:
            tried += 1
            with pytest.raises(BadInput) as caught:
                config.set_field(field, value, env_name=ENV, profile="local")
            assert caught.value.message and len(caught.value.message) < 400
            assert draft.read_bytes() == before, (field, value)
    _assert_json_error(toolset.rl_edit_config("group_size", "lots"))
    _assert_json_error(toolset.rl_edit_config("group_size", None))
    with pytest.raises(BadInput):  # all-or-nothing: one bad value, nothing written
        config.set_fields({"group_size": 8, "batch_size": "x"}, env_name=ENV, profile="local")
    assert draft.read_bytes() == before
    record("bad_input", area="config values", inputs=tried + 3, tracebacks=0)


# ------------------------------------------------------------------ metrics lines


def _fake_finished_run(metrics: bytes) -> str:
    run_id = "0badc0de"
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    (folder / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "environment": ENV,
                "profile": "local",
                "status": "completed",
                "created_at": 1.0,
                "started_at": 1.0,
                "ended_at": 2.0,
                "reason": "trainer finished",
                "supervisor": None,
                "ports": {},
                "processes": [],
                "total_steps": 6,
                "wandb": None,
            }
        )
    )
    (folder / "metrics.jsonl").write_bytes(metrics)
    return run_id


def test_garbage_partial_and_nonfinite_metric_lines_are_skipped():
    raw = (CORPUS / "metrics.jsonl").read_bytes() + b"\xff\xfe\x00garbage\n" + b"{" * 100_000 + b"\n"
    run_id = _fake_finished_run(raw)
    from hermes_rl.core.readers import metrics

    rows = metrics.read_metrics(run_id)
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    assert steps == [1, 2, 3, 4, 5], steps
    assert all(not isinstance(v, float) or math.isfinite(v) for r in rows for v in r.values())
    summary = next(r for r in runs.list_runs() if r["run_id"] == run_id)
    assert summary["step"] == 5 and summary["reward_mean"] == 0.5  # the partial step 6 is skipped
    results = runs.get_results(run_id)
    assert results["steps_done"] == 5
    for answer in (
        toolset.rl_get_results(run_id),
        toolset.rl_check_status(run_id, min_interval_s=0),
        toolset.rl_list_runs(),
    ):
        assert "error" not in answer, answer
        json.dumps(answer, allow_nan=False)
    lines = raw.count(b"\n")
    record("bad_input", area="metrics lines", inputs=lines, kept=5, tracebacks=0)


# ------------------------------------------------------------------ run ids


def test_hostile_run_ids_are_rejected_everywhere(hermes_home):
    ids = json.loads((CORPUS / "run_ids.json").read_text()) + ["a" * 10_000, "\u202edeadbeef", "💥" * 8]
    before = sorted(os.listdir(hermes_home))
    for run_id in ids:
        for call in (runs.get_run, runs.stop_run, runs.get_results, runs.run_events):
            with pytest.raises(BadInput) as caught:
                call(run_id)
            assert len(caught.value.message) < 200
        for tool in (toolset.rl_check_status, toolset.rl_stop_training, toolset.rl_get_results):
            _assert_json_error(tool(run_id))
    for run_id in ("00000000", "ffffffff"):  # well-formed but unknown: NotFound, not a crash
        with pytest.raises(HermesError):
            runs.get_run(run_id)
    cli_ids = ["../../etc", "/etc/passwd", "a" * 10_000, "d\u00e9adbeef", "00000000"]
    commands = [[cmd, run_id] for run_id in cli_ids for cmd in ("status", "stop")]
    commands += [["logs", "../../etc"], ["results", "/tmp"], ["status", "--json", "../../etc"]]
    _assert_clean_cli_errors(_cli_many(hermes_home, commands))
    assert sorted(os.listdir(hermes_home)) == before  # nothing created by any of them
    record("bad_input", area="run ids", inputs=len(ids) * 7 + len(commands), tracebacks=0)


# ------------------------------------------------------------------ ports and $HERMES_HOME


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("run_processes_cleanup")
def test_a_port_already_in_use_is_replaced_and_the_run_starts(specs):
    """A port taken by another program before its process binds never fails the run: the supervisor moves
    the process to a free port, says so in an event, and the program holding the port is left alone."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        run = runs.launch([specs.http("api")], environment="x", profile="local", ports={"api": port})
        final = wait_for(
            lambda: (r := runs.get_run(run["run_id"], sample=False))["status"] in ("running", "failed") and r, 15
        )
        assert final and final["status"] == "running", final
        assert final["ports"]["api"] != port
        events = [json.loads(line) for line in (run_dir(run["run_id"]) / "events.jsonl").read_text().splitlines()]
        moved = [e for e in events if e.get("kind") == "port" or e.get("event") == "port"]
        assert moved and f"port {port}" in json.dumps(moved[0]), events
        runs.stop_run(run["run_id"])
    finally:
        holder.close()
    assert_no_orphans(runs.get_run(run["run_id"], sample=False))
    record("bad_input", area="port in use", inputs=1, tracebacks=0)


def test_hermes_home_unwritable(tmp_path, fixture_envs):
    """Tests run as root, and root ignores permission bits, so chmod 0500 proves nothing here. Two honest
    stand-ins: $HERMES_HOME is a regular file (every create fails with ENOTDIR, for root too), and a
    file-size limit (RLIMIT_FSIZE, the kernel's EFBIG) makes every write fail part-way, like a full disk."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("I am a file\n")
    env = {**client_env(blocker), "HERMES_RL_ENV_PATH": os.environ["HERMES_RL_ENV_PATH"]}
    commands = [
        ["select", ENV],
        ["config", "--env", ENV, "--profile", "local", "--set", "group_size=4"],
        ["start", "--env", ENV, "--profile", "local"],
        ["status", "00000000"],
        ["stop", "00000000"],
    ]
    if os.geteuid() != 0:  # a real read-only folder where permissions bind
        readonly = tmp_path / "readonly"
        readonly.mkdir(mode=0o500)
    _assert_clean_cli_errors(_cli_many(blocker, commands, env=env))
    assert blocker.read_text() == "I am a file\n"
    for _code, stdout in [(c, o) for _a, c, o, _e in _cli_many(blocker, [["runs"]], env=env)]:
        assert "Traceback" not in stdout

    # "Full disk": a draft exists; an edit that cannot be written fails clearly and the draft is intact.
    home = tmp_path / "full_home"
    home.mkdir(mode=0o700)
    script = f"""
import os, resource, signal, sys
os.environ["HERMES_HOME"] = {str(home)!r}
from hermes_rl.core.envs import drafts as config
from hermes_rl.core.clients import toolset
from hermes_rl.core.base.errors import HermesError
config.set_field("group_size", 4, env_name={ENV!r}, profile="local")
draft = os.path.join({str(home)!r}, "rl", "drafts", "{fixture_id(ENV)}.yaml")
before = open(draft, "rb").read()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # EFBIG instead of being killed
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (40, hard))   # the soft limit only, so it can be lifted again
try:
    config.set_field("group_size", 8, env_name={ENV!r}, profile="local")
    print("NO ERROR")
except HermesError as exc:
    print("CLEAR", exc.message)
answer = toolset.rl_edit_config("group_size", 2)
print("TOOL", "error" in answer)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
print("INTACT", open(draft, "rb").read() == before)
print("LEFTOVERS", [n for n in os.listdir(os.path.dirname(draft)) if n.endswith(".tmp")])
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=str(PROJECT_ROOT),
        env={**client_env(home), "HERMES_RL_ENV_PATH": os.environ["HERMES_RL_ENV_PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "CLEAR cannot write" in out, out[-2000:]
    assert "TOOL True" in out and "INTACT True" in out and "LEFTOVERS []" in out, out[-2000:]
    record("bad_input", area="$HERMES_HOME unwritable / full", inputs=len(commands) + 3, tracebacks=0)


# ------------------------------------------------------------------ log files (core.logs, read only)


def test_log_reader_survives_hostile_log_files(tmp_path):
    from hermes_rl.core.readers.logs import LogReader

    path = tmp_path / "trainer_0badc0de.log"
    with open(path, "wb") as handle:
        handle.write(b"first line\n")
        handle.write(b"bad utf8 \xff\xfe\xc3\x28 here\n")
        handle.write(b"nul \x00\x00 bytes\n")
        handle.write(b"y" * (2 * 1024 * 1024) + b"\n")  # a 2 MB line (under the tail window)
        handle.write(b"progress 10%\rprogress 50%\rprogress 100%\n")
        handle.write(b"last line\n")
    reader = LogReader(path)
    reader.refresh()
    every = reader.lines(0, reader.line_count)
    assert every[0] == "first line" and "\ufffd" in every[1] and every[2] == "nul  bytes"
    assert len(every[3]) < 5000  # the long line is capped for display
    assert every[4:] == ["progress 100%", "last line"]
    # Appended while followed, then rotated (a new file at the path), then truncated mid-follow.
    with open(path, "ab") as handle:
        handle.write(b"appended\n")
    assert reader.refresh() == 1 and reader.tail(1) == ["appended"]
    os.replace(path, tmp_path / "rotated.log")
    path.write_bytes(b"after rotation\n")
    assert reader.refresh() == -1 and reader.tail(1) == ["after rotation"]
    with open(path, "r+b") as handle:
        handle.truncate(0)
    reader.refresh()
    path.write_bytes(b"after truncation\n")
    reader.refresh()
    assert reader.tail(1) == ["after truncation"] and reader.line_count == 1
    with open(path, "ab") as handle:
        handle.write(b"partial line without newline")
    reader.refresh()
    assert reader.tail(2) == ["after truncation", "partial line without newline"]
    reader.close()
    record("bad_input", area="log files", inputs=8, tracebacks=0)


def test_log_reader_shows_lines_after_a_10mb_line(tmp_path):
    from hermes_rl.core.readers.logs import LogReader

    path = tmp_path / "env_0badc0de.log"
    with open(path, "wb") as handle:
        handle.write(b"first line\n" + b"x" * (10 * 1024 * 1024) + b"\n" + b"last line\n")
    reader = LogReader(path)
    reader.refresh()
    assert reader.tail(1) == ["last line"]
