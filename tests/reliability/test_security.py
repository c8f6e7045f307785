"""Secrets never leave the environment / .env; servers bind 127.0.0.1; state is private; no shell.

Distinctive fake key values are planted in the environment and in $HERMES_HOME/.env, runs are
launched whose processes request them (secret_env), every rl_* tool is called, and then every file
under $HERMES_HOME (but .env), every tool answer and every child's argv (psutil) is scanned."""

from __future__ import annotations

import ast
import json
import os
import stat
import time
from pathlib import Path

import psutil
import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import PROJECT_ROOT, logs_dir, runs_dir
from hermes_rl.core.clients import toolset
from hermes_rl.core.daemons.pipeline import ProcessSpec, Readiness
from tests.fixtures_core import PY, proc_path
from tests.reliability.helpers import all_files, assert_no_orphans, launch_standin, record, wait_for, wait_running

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120), pytest.mark.usefixtures("run_processes_cleanup")]

PLANTED_ENV = {
    "TINKER_API_KEY": "tml-PLANTEDtinkerENV7f3a9c",
    "WANDB_API_KEY": "PLANTEDwandbENV51d0e2b8",
}
PLANTED_FILE = {
    "TINKER_API_KEY": "tml-PLANTEDtinkerFILE0b6e1",  # shadowed by the environment, must not leak either
    "OPENROUTER_API_KEY": "sk-or-PLANTEDrouterFILE99c4",
}
NEEDLES = [*PLANTED_ENV.values(), *PLANTED_FILE.values(), "PLANTED"]


def _plant(monkeypatch, home: Path) -> None:
    for name, value in PLANTED_ENV.items():
        monkeypatch.setenv(name, value)
    env_file = home / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in PLANTED_FILE.items()))
    env_file.chmod(0o600)


def _secret_spec() -> ProcessSpec:
    return ProcessSpec(
        name="keyed",
        argv=[PY, proc_path("http_server.py"), "--port", "{port:keyed}"],
        secret_env=["TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"],
        readiness=Readiness("http", "http://127.0.0.1:{port:keyed}/health", timeout_s=30),
        port="keyed",
    )


def _hits_in_files(home: Path) -> list[str]:
    hits = []
    for path in all_files(home):
        if path == home / ".env":
            continue
        data = path.read_bytes()
        hits += [f"{path}: {needle}" for needle in NEEDLES if needle.encode() in data]
    return hits


def _hits_in_argv(run: dict) -> tuple[int, list[str]]:
    from hermes_rl.core.base.paths import run_dir

    folder = str(run_dir(run["run_id"]))
    sid = run["supervisor"]["pid"]
    scanned, hits = 0, []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getsid(proc.pid) != sid and proc.environ().get("HERMES_RL_RUN_DIR") != folder:
                continue
        except (psutil.Error, OSError):
            continue
        scanned += 1
        cmd = " ".join(proc.info["cmdline"] or [])
        hits += [f"pid {proc.pid}: {needle}" for needle in NEEDLES if needle in cmd]
    return scanned, hits


def test_planted_keys_reach_children_only_through_their_environment(monkeypatch, hermes_home):
    _plant(monkeypatch, hermes_home)
    standin = launch_standin()
    keyed = runs.launch([_secret_spec()], environment="keyed", profile="local")
    for run in (standin, keyed):
        wait_running(run["run_id"])
    keyed_run = runs.get_run(keyed["run_id"])
    child = psutil.Process(keyed_run["processes"][0]["pid"])
    child_env = child.environ()
    # The keys the spec asked for did arrive (env wins over .env) ...
    assert child_env["TINKER_API_KEY"] == PLANTED_ENV["TINKER_API_KEY"]
    assert child_env["OPENROUTER_API_KEY"] == PLANTED_FILE["OPENROUTER_API_KEY"]
    # ... and a process that did not ask gets none.
    standin_run = runs.get_run(standin["run_id"])
    for proc in standin_run["processes"]:
        assert not any(k in psutil.Process(proc["pid"]).environ() for k in PLANTED_ENV)

    # Every agent tool, on live runs and with bad input; every answer is scanned too.
    answers = [
        toolset.rl_list_environments(),
        toolset.rl_select_environment("no_such_env"),
        toolset.rl_get_current_config(),
        toolset.rl_edit_config("group_size", PLANTED_ENV["TINKER_API_KEY"]),
        toolset.rl_start_training(),
        toolset.rl_list_runs(),
        toolset.rl_test_inference(num_steps=0),
        toolset.rl_test_inference(
            models=[PLANTED_ENV["WANDB_API_KEY"]], base_url="http://127.0.0.1:9/v1"
        ),  # refused: a key as a model name
    ]
    for run in (standin_run, keyed_run):
        answers += [toolset.rl_check_status(run["run_id"], min_interval_s=0), toolset.rl_get_results(run["run_id"])]
    scanned_argv = 0
    argv_hits = []
    for run in (standin_run, keyed_run):
        n, hits = _hits_in_argv(run)
        scanned_argv += n
        argv_hits += hits
    for run in (standin_run, keyed_run):
        answers.append(toolset.rl_stop_training(run["run_id"]))
        assert_no_orphans(runs.get_run(run["run_id"], sample=False))
    started = next((a for a in answers if isinstance(a, dict) and a.get("run_id") and a.get("config_path")), None)
    if started:  # rl_start_training launched the real pipeline (tinker profile: a key is set): scan, end it
        wait_for(lambda: any(p.get("pid") for p in runs.get_run(started["run_id"], sample=False)["processes"]), 10)
        n, hits = _hits_in_argv(runs.get_run(started["run_id"], sample=False))
        scanned_argv += n
        argv_hits += hits
        answers.append(toolset.rl_stop_training(started["run_id"]))
        assert_no_orphans(runs.get_run(started["run_id"], sample=False))
    answer_text = json.dumps(answers)
    answer_hits = [needle for needle in NEEDLES if needle in answer_text]
    file_hits = _hits_in_files(hermes_home)
    files = sum(1 for _ in all_files(hermes_home))
    record(
        "secrets",
        files_scanned=files,
        argv_scanned=scanned_argv,
        tool_answers=len(answers),
        hits=len(file_hits) + len(argv_hits) + len(answer_hits),
    )
    assert scanned_argv >= 5
    assert not argv_hits, argv_hits
    assert not answer_hits, answer_hits
    assert not file_hits, file_hits


def _dashboard_screens(run_id: str) -> dict[str, str]:
    """SVG screenshots of the dashboard over a live run: every pane zoomed, help, palette, test inference."""
    import asyncio

    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.logs import LogsPane
    from hermes_rl.tui.panes.processes import ProcessesPane

    async def until(pilot, predicate, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not predicate():
            await pilot.pause(0.1)
        assert predicate(), "dashboard did not show the live run"

    async def shoot() -> dict[str, str]:
        app = HermesDashboard(run_id=run_id)
        shots = {}
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: (
                    app.selected_run == run_id
                    and app.pane(ProcessesPane).table.row_count > 0
                    and app.pane(LogsPane).view.line_count > 0
                ),
            )
            shots["dashboard"] = app.export_screenshot()
            for pane, name in enumerate(("environments", "config", "runs", "processes", "logs", "metrics"), 1):
                await pilot.press(str(pane), "z")
                await pilot.pause(0.3)
                shots[name] = app.export_screenshot()
                await pilot.press("z")
            for name, key in (("help", "question_mark"), ("palette", "colon"), ("test_inference", "t")):
                await pilot.press("3", key)
                await pilot.pause(0.5)
                shots[name] = app.export_screenshot()
                while len(app.screen_stack) > 1:
                    app.pop_screen()
                    await pilot.pause(0.1)
        return shots

    return asyncio.run(shoot())


def test_dashboard_screens_show_no_key_values(monkeypatch, hermes_home):
    """The dashboard over a live run whose process holds every planted key: no screen shows a value
    (the header says which keys are present, by name only)."""
    _plant(monkeypatch, hermes_home)
    keyed = runs.launch([_secret_spec()], environment="keyed", profile="local")
    run_id = keyed["run_id"]
    wait_running(run_id)
    assert (
        psutil.Process(runs.get_run(run_id)["processes"][0]["pid"]).environ()["WANDB_API_KEY"]
        == PLANTED_ENV["WANDB_API_KEY"]
    )
    shots = _dashboard_screens(run_id)
    hits = [f"{name}: {needle}" for name, svg in shots.items() for needle in NEEDLES if needle in svg]
    runs.stop_run(run_id)
    record("secrets_screens", screens=len(shots), bytes=sum(len(s) for s in shots.values()), hits=len(hits))
    assert len(shots) == 10 and all("<svg" in svg for svg in shots.values())
    assert run_id in shots["dashboard"] and "keyed" in shots["processes"]
    assert not hits, hits


def test_run_processes_listen_only_on_loopback():
    run = launch_standin()
    run = wait_running(run["run_id"])
    listening = []
    pids = {p["pid"] for p in run["processes"]} | {run["supervisor"]["pid"], run["watchdog"]["pid"]}
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                listening.append((pid, conn.laddr.ip, conn.laddr.port))
    assert any(port == run["ports"]["api"] for _, _, port in listening), listening
    assert all(ip == "127.0.0.1" for _, ip, _ in listening), listening
    record("loopback", listening_sockets=len(listening), non_loopback=0)
    runs.stop_run(run["run_id"])


def test_state_files_are_private(hermes_home):
    """Files 0600, folders 0700 under the run folders and logs, including what the run's own processes
    wrote (metrics, checkpoints): the supervisor gives its children a private umask."""
    run = launch_standin()
    run_id = run["run_id"]
    wait_running(run_id)
    assert wait_for(lambda: (runs.get_run(run_id, sample=False)["last_metric"].get("step") or 0) >= 2, 20)
    runs.stop_run(run_id)
    loose = []
    checked = 0
    for root in (runs_dir(), logs_dir()):
        for dirpath, dirs, files in os.walk(root):
            for name in dirs:
                mode = stat.S_IMODE(os.stat(Path(dirpath) / name).st_mode)
                checked += 1
                if mode != 0o700:
                    loose.append(f"{dirpath}/{name}/ {mode:o}")
            for name in files:
                mode = stat.S_IMODE(os.stat(Path(dirpath) / name).st_mode)
                checked += 1
                if mode != 0o600:
                    loose.append(f"{dirpath}/{name} {mode:o}")
    record("permissions", paths_checked=checked, loose=len(loose))
    assert checked >= 8
    assert not loose, loose


SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


def test_no_shell_anywhere():
    """No shell=True (nor os.system / os.popen) in core/, dataplane/, tui/, environments/: argv lists only."""
    found, parsed = [], 0
    for package in ("core", "dataplane", "tui", "environments"):
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            parsed += 1
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        found.append(f"{path}:{node.lineno} shell={ast.unparse(kw.value)}")
                func = node.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and (func.value.id, func.attr) in SHELL_CALLS
                ):
                    found.append(f"{path}:{node.lineno} {func.value.id}.{func.attr}")
    record("no_shell", files_parsed=parsed, hits=len(found))
    assert parsed > 20
    assert not found, found
