"""Kill matrix on live runs of the REAL local pipeline (core/training.py: model -> api (Atropos run-api),
tinker (dataplane.tinker_local), trainer (dataplane.trainer), env (environments/toy_addition.py, restarted
on failure at most twice)); tests/reliability/test_kill_matrix.py runs the same faults over small stand-ins.

Four real runs (each ~30-50 s to its first trained step on the shared 2-core machine):
1. survivable faults, then a fatal one: kill -9 of the env (restarted by policy; the new env registers with
   run-api again and the trainer keeps training on its groups), kill -9 of a watching client (the run does
   not notice), SIGSTOP of the trainer (reported stalled; SIGCONT: steps resume, not stalled), and kill -9
   of run-api (environments cannot survive a run-api restart: the run fails at once, naming the api);
2. kill -9 of the local Tinker server -> failed, naming tinker (the trainer stops at once, not SIGKILLed);
3. kill -9 of the trainer -> failed, naming the trainer;
4. kill -9 of the supervisor -> failed, "supervisor died", every grandchild ended by the watchdog.
For each fatal fault: the final state within 2 s of the kill (measured and recorded), a reason naming the
cause, 0 orphans (session, process group and environment-marker scan with psutil), the run still listed,
and every process's log still holding its earlier lines.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import toolset
from tests.reliability.helpers import (
    FINAL,
    assert_no_orphans,
    freeze_until_stalled,
    kill_tree,
    orphans,
    proc_record,
    record,
    run_processes,
    start_local_run,
    start_watcher,
    wait_for,
    wait_running,
)

pytestmark = [pytest.mark.reliability, pytest.mark.usefixtures("run_processes_cleanup")]

DEADLINE_S = 2.0  # from the fault to the run's final state
START_S = 240.0  # from start_run to running with trained steps (slow imports, loaded machine)
STALL_S = 2.0  # HERMES_RL_STALL_S while the trainer is frozen
PIPELINE = ("api", "model", "tinker", "trainer", "env")


# ---------------------------------------------------------------- helpers


def _view(run_id: str) -> dict:
    return runs.get_run(run_id, sample=False)


def _step(run_id: str) -> int:
    return _view(run_id)["last_metric"].get("step") or 0


def _time_to(run_id: str, predicate, timeout: float = 10.0) -> tuple[float, dict]:
    """Seconds from now until get_run satisfies predicate (polled every 20 ms), and that view.
    Call it right after the fault: its clock starts on entry."""
    began = time.monotonic()
    seen = wait_for(lambda: (r := _view(run_id)) and predicate(r) and r, timeout, max_interval=0.02)
    elapsed = time.monotonic() - began
    assert seen, f"condition not reached in {timeout}s: {_view(run_id)}\n{_log_tails(_view(run_id))}"
    return elapsed, seen


def _wait_steps(run_id: str, steps: int, timeout: float = START_S) -> int:
    reached = wait_for(lambda: (s := _step(run_id)) >= steps and s, timeout, interval=0.2)
    assert reached, (
        f"run {run_id} did not reach step {steps} in {timeout}s: {_view(run_id)}\n{_log_tails(_view(run_id))}"
    )
    return reached


def _start(model_dir: Path, steps: int = 3) -> dict:
    """A real local run, running, with `steps` trained steps; returns get_run."""
    run_id = start_local_run(model_dir)["run_id"]
    try:
        wait_running(run_id, timeout=START_S)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_log_tails(_view(run_id))}") from None
    _wait_steps(run_id, steps)
    run = _view(run_id)
    assert sorted(p["name"] for p in run["processes"]) == sorted(PIPELINE), run["processes"]
    return run


def _read(path) -> str:
    return Path(path).read_text(encoding="utf-8", errors="replace")


def _log_tails(run: dict, lines: int = 15) -> str:
    out = []
    for name, path in (run.get("logs") or {}).items():
        if path and os.path.exists(path):
            out.append(f"--- {name} ---\n" + "\n".join(_read(path).splitlines()[-lines:]))
    return "\n".join(out)


# Lines each process writes early in a healthy run: they must survive every fault.
LOG_MARKERS = {
    "api": ("Uvicorn running on http://127.0.0.1:", '"POST /register HTTP/1.1" 200'),
    "model": (),
    "tinker": ("tinker-local ready on http://127.0.0.1:",),
    "trainer": ("registered with run-api at", "step 1/"),
    "env": ("toy_addition: operands",),
}


def _assert_logs_intact(run: dict) -> None:
    for name, markers in LOG_MARKERS.items():
        text = _read(run["logs"][name])
        assert text.startswith("==== hermes-rl "), f"{name} log lost its header: {text[:200]!r}"
        for marker in markers:
            assert marker in text, f"{name} log lost {marker!r}:\n{text[-2000:]}"
    # Every trained step is on record, none lost or torn.
    rows = read_jsonl(run_dir(run["run_id"]) / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)) and rows, rows[-3:]


def _check_final(run: dict, fault: str, elapsed: float, status: str, reason_prefix: str) -> None:
    run_id = run["run_id"]
    assert run["status"] == status, (run, _log_tails(run))
    assert (run.get("reason") or "").startswith(reason_prefix), run.get("reason")
    record("kill_matrix_real", fault=fault, status=run["status"], reason=run.get("reason"), seconds=round(elapsed, 3))
    assert elapsed < DEADLINE_S, f"{fault}: final state {elapsed:.2f}s after the fault\n{runs.run_events(run_id)[-12:]}"
    listed = {r["run_id"]: r for r in runs.list_runs()}
    assert run_id in listed and listed[run_id]["status"] == status, "run lost from list_runs"
    assert all(p["state"] not in ("starting", "ready", "pending") for p in run["processes"]), run["processes"]
    _assert_logs_intact(run)
    assert_no_orphans(run)


def _sigkilled_after_stop(run_id: str) -> list[str]:
    """Processes the supervisor had to SIGKILL while stopping: a process that ignored SIGTERM."""
    return [
        e["message"] for e in runs.run_events(run_id) if e.get("event") == "signal" and e.get("signal") == "SIGKILL"
    ]


def _env_registrations(run: dict) -> list[int]:
    """Offsets in run-api's log of each environment's POST /register-env."""
    text = _read(run["logs"]["api"])
    found, at = [], text.find('"POST /register-env HTTP/1.1" 200')
    while at >= 0:
        found.append(at)
        at = text.find('"POST /register-env HTTP/1.1" 200', at + 1)
    return found


def _alive(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(pid: int) -> set[int]:
    try:
        return {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


# ---------------------------------------------------------------- 1: survivable faults, then run-api dies


@pytest.mark.timeout(600)
def test_env_restart_client_kill_trainer_stall_then_api_death(tiny_model_dir, hermes_home, tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_RL_STALL_S", str(STALL_S))
    run = _start(tiny_model_dir)
    run_id = run["run_id"]

    # -- kill -9 env: restarted by policy, re-registers with run-api, and the trainer trains on its groups.
    assert len(_env_registrations(run)) == 1
    old_env = proc_record(run, "env")["pid"]
    old_env_tree = {p.pid for p in run_processes(run, "env")}
    os.kill(old_env, signal.SIGKILL)
    killed_at = time.monotonic()
    # Restarted at once; ready again only once it has registered with run-api (checked below).
    elapsed, again = _time_to(
        run_id, lambda r: (p := proc_record(r, "env"))["pid"] != old_env and p["state"] in ("starting", "ready")
    )
    assert again["status"] == "running" and proc_record(again, "env")["restarts"] == 1
    events = [e["message"] for e in runs.run_events(run_id)]
    assert any(m.startswith("env was killed by SIGKILL") and "restarting in" in m for m in events), events
    record(
        "kill_matrix_real",
        fault="kill -9 env (restart policy: back to ready)",
        status="running",
        reason=next(m for m in events if m.startswith("env was killed")),
        seconds=round(elapsed, 3),
    )
    assert elapsed < DEADLINE_S, f"env restarted {elapsed:.2f}s after its kill"

    # The new environment imports atroposlib again (~10 s of CPU), registers with run-api, then sends groups.
    registered = wait_for(lambda: len(_env_registrations(again)) >= 2, 120, interval=0.2)
    assert registered, f"the restarted env never registered with run-api\n{_log_tails(_view(run_id), 40)}"
    assert wait_for(lambda: proc_record(runs.get_run(run_id, sample=False), "env")["state"] == "ready", 30), (
        "the restarted env registered with run-api but was never marked ready"
    )
    reregistered_s = time.monotonic() - killed_at
    step_at_registration = _step(run_id)
    # The old env's groups still queued in run-api (it stays about max_batches_offpolicy = 2 batches
    # ahead) are used up within a second of its death, long before the new env registers: 5 more
    # steps after the registration are trained on the new env's groups.
    _wait_steps(run_id, step_at_registration + 5, timeout=90)
    api_log = _read(again["logs"]["api"])
    after = api_log[_env_registrations(again)[1] :]
    assert after.count('"POST /scored_data HTTP/1.1" 200') >= 1, after[-2000:]
    fed_s = time.monotonic() - killed_at
    record(
        "kill_matrix_real",
        fault="kill -9 env (new env registered with run-api, training continues)",
        status="running",
        reason="second POST /register-env; +5 trained steps after it",
        seconds=round(reregistered_s, 3),
        steps_resumed_s=round(fed_s, 3),
    )
    assert "toy_addition: operands" in _read(again["logs"]["env"]).split("attempt 2")[-1]
    # Nothing of the killed env lives on beside its replacement (its W&B service processes included).
    new_env_tree = _descendants(proc_record(_view(run_id), "env")["pid"])
    leftovers = wait_for(
        lambda: (
            not [
                p
                for p in run_processes(again, "env")
                if p.pid not in _descendants(proc_record(_view(run_id), "env")["pid"])
            ]
        ),
        15,
    )
    assert leftovers, (
        f"processes of the killed env still alive: "
        f"{[(p.pid, p.cmdline()[:3]) for p in run_processes(again, 'env') if p.pid not in new_env_tree]}"
        f" (old tree {sorted(old_env_tree)})"
    )

    # -- kill -9 of a watching client (the dashboard's reads): the run neither notices nor stalls.
    log = tmp_path / "watcher.log"
    watcher = start_watcher(hermes_home, run_id, log)
    try:
        assert wait_for(lambda: log.exists() and b"look 3: running" in log.read_bytes(), 60), log.read_bytes()[-2000:]
        step_before = _step(run_id)
        os.kill(watcher.pid, signal.SIGKILL)
        elapsed, after_client = _time_to(
            run_id, lambda r: r["status"] == "running" and (r["last_metric"].get("step") or 0) > step_before, timeout=30
        )
        watcher.wait(timeout=5)
    finally:
        kill_tree(watcher)
    assert all(p["state"] == ("exited" if p["name"] == "model" else "ready") for p in after_client["processes"])
    record(
        "kill_matrix_real", fault="kill -9 watching client", status="running", reason=None, seconds=round(elapsed, 3)
    )

    # -- SIGSTOP trainer: reported stalled (run-api's access log keeps growing meanwhile: no sign of
    # progress); SIGCONT: training resumes and the stall clears.
    assert wait_for(lambda: toolset.rl_check_status(run_id, min_interval_s=0)["stalled"] is False, 30)
    trainer = proc_record(_view(run_id), "trainer")["pid"]
    try:
        freeze_until_stalled(run_id, trainer, STALL_S, "kill_matrix_real", DEADLINE_S)
        assert psutil.Process(trainer).status() == psutil.STATUS_STOPPED
        frozen_step = _step(run_id)
    finally:
        os.kill(trainer, signal.SIGCONT)
    elapsed, resumed = _time_to(
        run_id, lambda r: not r["stalled"] and (r["last_metric"].get("step") or 0) > frozen_step, timeout=30
    )
    assert resumed["status"] == "running" and proc_record(resumed, "trainer")["pid"] == trainer
    assert toolset.rl_check_status(run_id, min_interval_s=0)["stalled"] is False
    # (A step whose Tinker request was already sent when the trainer froze is recorded at once.)
    record(
        "kill_matrix_real",
        fault="SIGCONT trainer (steps resume, stall cleared)",
        status="running",
        reason=None,
        seconds=round(elapsed, 3),
        step=resumed["last_metric"]["step"],
    )

    # -- kill -9 run-api: environments cannot re-attach to a new run-api, so the run fails at once.
    _wait_steps(run_id, _step(run_id) + 2, timeout=60)
    os.kill(proc_record(_view(run_id), "api")["pid"], signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    _check_final(final, "kill -9 api (run-api dies mid-run)", elapsed, "failed", "api was killed by SIGKILL")
    assert proc_record(final, "env")["restarts"] == 1
    assert not _sigkilled_after_stop(run_id), _sigkilled_after_stop(run_id)


# ---------------------------------------------------------------- 2, 3: a required child dies


@pytest.mark.timeout(420)
@pytest.mark.parametrize("child", ["tinker", "trainer"])
def test_kill9_required_child_fails_run_naming_it(tiny_model_dir, child):
    run = _start(tiny_model_dir)
    run_id = run["run_id"]
    assert proc_record(run, child)["required"] is True
    os.kill(proc_record(run, child)["pid"], signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    _check_final(final, f"kill -9 {child}", elapsed, "failed", f"{child} was killed by SIGKILL")
    # The others stopped on SIGTERM: none (the trainer waiting on a dead Tinker server above all) had
    # to be SIGKILLed after its stop timeout.
    assert not _sigkilled_after_stop(run_id), _sigkilled_after_stop(run_id)
    if child == "tinker":
        assert proc_record(final, "trainer")["exit_code"] == 0, proc_record(final, "trainer")


# ---------------------------------------------------------------- 4: the supervisor dies


@pytest.mark.timeout(420)
def test_kill9_supervisor_watchdog_ends_every_process(tiny_model_dir):
    run = _start(tiny_model_dir)
    run_id = run["run_id"]
    supervisor = run["supervisor"]["pid"]
    before = orphans(run)
    tree = run_processes(run)
    os.kill(supervisor, signal.SIGKILL)
    elapsed, final = _time_to(run_id, lambda r: r["status"] in FINAL)
    _check_final(final, "kill -9 supervisor", elapsed, "failed", f"supervisor died (pid {supervisor})")
    survivors = [p.pid for p in tree if _alive(p)]
    assert not survivors, f"still alive: {survivors} of {before}"
    record(
        "kill_matrix_real",
        fault="kill -9 supervisor (processes ended)",
        status="failed",
        reason=final["reason"],
        seconds=round(elapsed, 3),
        processes=len(tree),
    )
