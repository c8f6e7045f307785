"""Kill matrix on a live run of the stand-in pipeline (api -> trainer + env, see helpers.standin_pipeline):
kill -9 of each child, of the supervisor, of its watchdog and of a watching client; SIGSTOP of the trainer.
For each fault: the final state within 2 s (measured and recorded), a reason naming the cause,
0 orphans (session, process group and environment-marker scan with psutil), the run still listed,
and its logs still holding their earlier lines."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from hermes_rl.core import runs
from hermes_rl.core.clients import toolset
from tests.reliability.helpers import (
    FINAL,
    assert_no_orphans,
    freeze_until_stalled,
    kill_tree,
    launch_standin,
    proc_record,
    record,
    start_watcher,
    wait_for,
    wait_running,
)

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(90), pytest.mark.usefixtures("run_processes_cleanup")]

DEADLINE_S = 2.0


def _time_to(run_id: str, predicate, timeout: float = 10.0) -> tuple[float, dict]:
    """Seconds until get_run satisfies predicate (polled every 20 ms), and that view."""
    began = time.monotonic()
    seen = wait_for(
        lambda: (r := runs.get_run(run_id, sample=False)) and predicate(r) and r, timeout, max_interval=0.02
    )
    elapsed = time.monotonic() - began
    assert seen, f"condition not reached in {timeout}s: {runs.get_run(run_id, sample=False)}"
    return elapsed, seen


def _wait_steps(run_id: str, steps: int = 3) -> None:
    assert wait_for(lambda: (runs.get_run(run_id, sample=False)["last_metric"].get("step") or 0) >= steps, 20)


def _assert_logs_intact(run: dict) -> None:
    logs = run["logs"]
    trainer = open(logs["trainer"], encoding="utf-8", errors="replace").read()
    assert "==== hermes-rl" in trainer and f"step 1 run={run['run_id']}" in trainer
    assert "listening on" in open(logs["api"], encoding="utf-8").read()


def _check_after(run: dict, fault: str, elapsed: float, expect_status: str) -> None:
    run_id = run["run_id"]
    assert run["status"] == expect_status, run
    assert elapsed < DEADLINE_S, f"{fault}: final state after {elapsed:.2f}s"
    assert run_id in [r["run_id"] for r in runs.list_runs()], "run lost from list_runs"
    _assert_logs_intact(run)
    record("kill_matrix", fault=fault, status=run["status"], reason=run.get("reason"), seconds=round(elapsed, 3))


@pytest.mark.parametrize(
    "child, cause", [("trainer", "trainer was killed by SIGKILL"), ("api", "api was killed by SIGKILL")]
)
def test_kill9_required_child_fails_run_naming_it(child, cause):
    run = launch_standin()
    run_id = run["run_id"]
    run = wait_running(run_id)
    _wait_steps(run_id)
    os.kill(proc_record(run, child)["pid"], signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    assert cause in final["reason"]
    _check_after(final, f"kill -9 {child}", elapsed, "failed")
    assert_no_orphans(final)


def test_kill9_env_restarts_then_fails_when_out_of_restarts():
    run = launch_standin(env_restarts=1)
    run_id = run["run_id"]
    run = wait_running(run_id)
    first_pid = proc_record(run, "env")["pid"]
    os.kill(first_pid, signal.SIGKILL)
    elapsed, again = _time_to(
        run_id, lambda r: (p := proc_record(r, "env"))["pid"] != first_pid and p["state"] == "ready"
    )
    assert again["status"] == "running" and proc_record(again, "env")["restarts"] == 1
    _check_after(again, "kill -9 env (restart policy: back to ready)", elapsed, "running")
    events = [e["message"] for e in runs.run_events(run_id)]
    assert any(m.startswith("env was killed by SIGKILL") and "restarting in" in m for m in events), events

    os.kill(proc_record(again, "env")["pid"], signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    assert final["reason"].startswith("env was killed by SIGKILL") and "gave up after 1 restart" in final["reason"]
    _check_after(final, "kill -9 env (restarts used up)", elapsed, "failed")
    assert_no_orphans(final)


def test_kill9_supervisor_watchdog_ends_everything():
    run = launch_standin()
    run_id = run["run_id"]
    run = wait_running(run_id)
    _wait_steps(run_id)
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    assert final["reason"].startswith(f"supervisor died (pid {run['supervisor']['pid']})")
    _check_after(final, "kill -9 supervisor", elapsed, "failed")
    assert_no_orphans(final)
    assert all(p["state"] not in ("starting", "ready") for p in final["processes"])


def test_kill9_watchdog_is_replaced_and_still_guards_the_run():
    run = launch_standin()
    run_id = run["run_id"]
    run = wait_running(run_id)
    first = run["watchdog"]["pid"]
    os.kill(first, signal.SIGKILL)
    elapsed, again = _time_to(run_id, lambda r: (r.get("watchdog") or {}).get("pid") not in (None, first))
    _check_after(again, "kill -9 watchdog (replaced)", elapsed, "running")
    # The replacement knows the process groups: killing the supervisor now still leaves nothing behind.
    os.kill(again["supervisor"]["pid"], signal.SIGKILL)
    _, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    assert final["reason"].startswith("supervisor died")
    assert_no_orphans(final)


def _kill_client_run_goes_on(run_id: str, client, fault: str) -> None:
    """kill -9 a client process watching the run: the run neither notices nor stalls, it keeps stepping."""
    step_before = runs.get_run(run_id, sample=False)["last_metric"]["step"]
    os.kill(client.pid, signal.SIGKILL)
    client.wait(timeout=5)
    elapsed, after = _time_to(
        run_id, lambda r: r["status"] == "running" and (r["last_metric"].get("step") or 0) > step_before
    )
    assert all(p["state"] == "ready" for p in after["processes"])
    _check_after(after, fault, elapsed, "running")


def test_kill9_watching_client_leaves_run_untouched(hermes_home, tmp_path):
    run = launch_standin()
    run_id = run["run_id"]
    run = wait_running(run_id)
    log = tmp_path / "watcher.log"
    watcher = start_watcher(hermes_home, run_id, log)
    try:
        assert wait_for(lambda: log.exists() and b"look 3: running" in log.read_bytes(), 20), log.read_bytes()[-2000:]
        _kill_client_run_goes_on(run_id, watcher, "kill -9 watching client")
    finally:
        kill_tree(watcher)
    stopped = runs.stop_run(run_id)
    assert stopped["status"] == "stopped" and stopped["reason"] == "stopped by user"
    assert_no_orphans(stopped)


def test_kill9_dashboard_leaves_run_untouched(hermes_home, tmp_path):
    """The real dashboard (headless, in its own session) following the run, killed with -9: the run keeps
    stepping and the dashboard leaves nothing behind."""
    import subprocess
    import sys

    from tests.reliability.helpers import RPROCS, client_env

    run = launch_standin()
    run_id = run["run_id"]
    wait_running(run_id)
    status = tmp_path / "dashboard.status"
    dashboard = subprocess.Popen(
        [sys.executable, str(RPROCS / "dashboard.py"), run_id, str(status)],
        env=client_env(hermes_home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def showing() -> bool:
            text = status.read_text() if status.exists() else ""
            return text.startswith(run_id) and "metrics=0 " not in text and "processes=0" not in text

        assert wait_for(showing, 60), status.read_text() if status.exists() else "no status"
        _kill_client_run_goes_on(run_id, dashboard, "kill -9 dashboard")
        left = [p.pid for p in psutil.process_iter() if _session_of(p.pid) == dashboard.pid]
        assert not left, f"the dashboard left processes behind: {left}"
    finally:
        kill_tree(dashboard)
    stopped = runs.stop_run(run_id)
    assert stopped["status"] == "stopped"
    assert_no_orphans(stopped)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_sigstop_trainer_is_reported_stalled_and_stop_still_works(monkeypatch):
    threshold = 1.0
    monkeypatch.setenv("HERMES_RL_STALL_S", str(threshold))
    run = launch_standin(trainer_stop_timeout=10.0)
    run_id = run["run_id"]
    run = wait_running(run_id)
    _wait_steps(run_id)
    assert toolset.rl_check_status(run_id, min_interval_s=0)["stalled"] is False
    trainer = proc_record(run, "trainer")["pid"]
    try:
        freeze_until_stalled(run_id, trainer, threshold, "kill_matrix", DEADLINE_S)
        # Stopping a run whose trainer is frozen must not wait out the trainer's 10 s stop timeout:
        # a stopped process acts on SIGTERM only once continued.
        began = time.monotonic()
        final = runs.stop_run(run_id, wait=15)
        elapsed = time.monotonic() - began
    finally:
        try:
            os.kill(trainer, signal.SIGCONT)
        except OSError:
            pass
    assert final["reason"] == "stopped by user"
    assert proc_record(final, "trainer")["exit_code"] == -signal.SIGTERM
    _check_after(final, "SIGSTOP trainer, then stop", elapsed, "stopped")
    assert_no_orphans(final)


def test_sigstop_supervisor_then_stop_from_a_client():
    """A frozen supervisor (SIGSTOP, a debugger) still obeys a client's stop: SIGTERM comes with SIGCONT."""
    run = launch_standin()
    run_id = run["run_id"]
    run = wait_running(run_id)
    supervisor = run["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    try:
        began = time.monotonic()
        final = runs.stop_run(run_id, wait=10)
        elapsed = time.monotonic() - began
    finally:
        try:
            os.kill(supervisor, signal.SIGCONT)
        except OSError:
            pass
    assert final["reason"] == "stopped by user"
    _check_after(final, "SIGSTOP supervisor, then stop", elapsed, "stopped")
    assert_no_orphans(final)
