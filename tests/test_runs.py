"""The client run API: listing (fast, newest first, tolerant of junk), get_run sampling, lost runs,
results, bad ids, pipeline validation, and start_run over the real config/profile/training modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput, Conflict, MissingKey, NotFound
from hermes_rl.core.base.fsutil import atomic_write_json, last_jsonl_row
from hermes_rl.core.base.paths import run_dir, runs_dir
from hermes_rl.core.base.states import RECORDED_FINAL
from tests.fixtures_core import PY, lose_run, pid_alive, wait_status, wait_until

pytestmark = [pytest.mark.usefixtures("run_processes_cleanup"), pytest.mark.timeout(120)]


def make_run(
    run_id: str, *, created_at: float, status: str = "completed", rows=(), extra_text: str = "", **fields
) -> os.PathLike:
    """A run folder as a finished supervisor leaves it (no processes)."""
    folder = run_dir(run_id)
    folder.mkdir(parents=True, mode=0o700)
    run = {
        "run_id": run_id,
        "environment": "toy",
        "profile": "local",
        "status": status,
        "created_at": created_at,
        "started_at": created_at + 1,
        "ended_at": created_at + 9,
        "reason": fields.pop("reason", None),
        "supervisor": fields.pop("supervisor", {"pid": 1, "create_time": 0.0}),
        "ports": {},
        "processes": [],
        "total_steps": 10,
        "wandb": None,
        **fields,
    }
    atomic_write_json(folder / "run.json", run)
    with open(folder / "metrics.jsonl", "w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        handle.write(extra_text)
    return folder


def test_list_runs_newest_first_with_last_metric_and_junk_skipped():
    now = time.time()
    make_run("000000a1", created_at=now - 30, rows=[{"step": 1, "reward/mean": 0.1}, {"step": 2, "reward/mean": 0.2}])
    make_run(
        "000000b2", created_at=now - 10, rows=[{"step": 7, "reward/mean": 0.7}], extra_text='{"step": 8, "reward/me'
    )  # a partial last line: the writer is mid-line
    make_run(
        "000000c3",
        created_at=now - 20,
        status="failed",
        reason="trainer exited with code 1",
        extra_text="garbage\n{not json}\n",
    )
    (runs_dir() / "not-a-run").mkdir()
    (runs_dir() / "0000dead").mkdir()  # no run.json (yet)
    (runs_dir() / "0000beef").mkdir()
    (runs_dir() / "0000beef" / "run.json").write_text("{truncated")
    listed = runs.list_runs()
    # a run.json that does not parse is listed as unreadable (with the reason), after the dated runs
    assert [r["run_id"] for r in listed] == ["000000b2", "000000c3", "000000a1", "0000beef"]
    assert listed[-1]["status"] == "unreadable" and "run.json is unreadable" in listed[-1]["reason"]
    listed = listed[:-1]
    by_id = {r["run_id"]: r for r in listed}
    assert by_id["000000b2"]["step"] == 7 and by_id["000000b2"]["reward_mean"] == 0.7
    assert by_id["000000a1"]["step"] == 2
    assert by_id["000000c3"]["step"] is None and by_id["000000c3"]["reason"] == "trainer exited with code 1"
    assert set(by_id["000000a1"]) >= {
        "run_id",
        "environment",
        "profile",
        "status",
        "created_at",
        "step",
        "total_steps",
        "reward_mean",
        "reason",
    }


def test_list_runs_cache_notices_new_metrics_and_state():
    folder = make_run("0000aaaa", created_at=time.time(), rows=[{"step": 1, "reward/mean": 0.5}])
    assert runs.list_runs()[0]["step"] == 1
    with open(folder / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 2, "reward/mean": 0.9}) + "\n")
    assert runs.list_runs()[0]["step"] == 2
    run = json.loads((folder / "run.json").read_text())
    run.update(status="failed", reason="api exited with code 1")
    time.sleep(0.01)
    atomic_write_json(folder / "run.json", run)
    assert runs.list_runs()[0]["status"] == "failed"


def test_a_dead_or_reused_supervisor_pid_means_lost():
    now = time.time()
    # Our own pid with another create_time: a reused pid must not pass for the supervisor.
    make_run("0000f00d", created_at=now, status="running", supervisor={"pid": os.getpid(), "create_time": 12345.0})
    listed = runs.list_runs()
    assert listed[0]["status"] == "lost"
    assert "supervisor" in listed[0]["reason"]
    view = runs.get_run("0000f00d")
    assert view["status"] == "lost" and view["recorded_status"] == "running" and view["survivors"] == []
    stopped = runs.stop_run("0000f00d")
    assert stopped["status"] == "stopped"
    with pytest.raises(Conflict):
        runs.stop_run("0000f00d")
    # Identity is the start time in ticks since boot (immune to wall-clock steps) and the supervisor's
    # run-folder marker in its environment: a process lacking either is not the supervisor.
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.daemons import procscan

    for run_id, marked in (("0000f00e", True), ("0000f010", False)):
        env = {**os.environ, procscan.SUPERVISOR_MARKER: str(run_dir(run_id))} if marked else dict(os.environ)
        sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        try:
            # until it has exec'd, the child's /proc environ is still ours
            wait_until(lambda sup=sup: "sleep(60)" in open(f"/proc/{sup.pid}/cmdline").read(), timeout=10, what="exec")
            me = {
                "pid": sup.pid,
                "create_time": procscan.process_create_time(sup.pid),
                "start_ticks": procscan.process_start_ticks(sup.pid),
            }
            make_run(run_id, created_at=now, status="running", supervisor=me)
            assert runs.get_run(run_id, sample=False)["status"] == ("running" if marked else "lost")
            if marked:
                bad_ticks = {**me, "start_ticks": me["start_ticks"] + 7}
                make_run("0000f00f", created_at=now, status="running", supervisor=bad_ticks)
                assert runs.get_run("0000f00f", sample=False)["status"] == "lost"
        finally:
            sup.kill()
            sup.wait()


def test_last_jsonl_row_reads_backwards_past_partial_and_garbage_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    assert last_jsonl_row(path) is None
    path.write_text("")
    assert last_jsonl_row(path) is None
    path.write_text('{"step": 1}')  # no newline yet: not complete
    assert last_jsonl_row(path) is None
    big = "x" * 20000  # rows longer than the 8 KiB read blocks
    lines = [json.dumps({"step": i, "pad": big}) for i in range(5)]
    path.write_text("\n".join(lines) + "\nnot json\n[1, 2]\n" + '{"step": 99, "pa')
    assert last_jsonl_row(path)["step"] == 4
    path.write_text('{"step": 1}\n{"step": 2, "loss": NaN}\n')
    assert last_jsonl_row(path) == {"step": 2, "loss": None}


def test_get_run_samples_processes_without_blocking(specs):
    busy = specs.ProcessSpec(
        name="trainer",
        argv=[PY, "-c", "print('ready', flush=True)\nwhile True: pass"],
        readiness=specs.Readiness("log", pattern="^ready"),
    )
    run = runs.launch([specs.sleeper("api"), busy], environment="toy", profile="local")
    run_id = wait_status(run["run_id"], "running")["run_id"]
    with open(run_dir(run_id) / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 4, "reward/mean": 0.25}) + "\n")
    first = runs.get_run(run_id)
    time.sleep(0.5)
    second = runs.get_run(run_id)
    trainer = {p["name"]: p for p in second["processes"]}["trainer"]
    api = {p["name"]: p for p in second["processes"]}["api"]
    assert trainer["alive"] and trainer["health"] == "ready"
    assert trainer["cpu_percent"] > 5  # a busy loop, measured since the previous get_run
    assert api["cpu_percent"] < trainer["cpu_percent"]
    assert trainer["rss"] > 1_000_000 and trainer["threads"] >= 1 and trainer["uptime_s"] > 0
    assert first["last_metric"] == {"step": 4, "reward/mean": 0.25}
    assert second["logs"]["trainer"].endswith(f"trainer_{run_id}.log")
    assert second["supervisor_alive"] is True
    light = runs.get_run(run_id, sample=False)
    assert {p["name"]: p for p in light["processes"]}["trainer"]["cpu_percent"] is None
    runs.stop_run(run_id)
    done = {p["name"]: p for p in runs.get_run(run_id)["processes"]}
    assert not done["trainer"]["alive"] and done["trainer"]["health"] == "stopped"


def test_lost_run_reports_survivors_and_stop_ends_them(specs):
    tree = specs.log_ready("trainer", "spawn_tree.py", args=["--pids", "{run_dir}/pids"])
    run = runs.launch([tree], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    run_id = run["run_id"]
    grandchildren = [int(x) for x in (run_dir(run_id) / "pids").read_text().split()]
    lose_run(run)
    view = wait_until(lambda: (v := runs.get_run(run_id)) and v["status"] == "lost" and v, what="lost")
    survivors = {s["pid"] for s in view["survivors"]}
    assert set(grandchildren) <= survivors  # the direct child died by PDEATHSIG, its children did not
    assert all(s["process"] == "trainer" for s in view["survivors"])
    assert "still running" in view["reason"]
    assert runs.list_runs()[0]["status"] == "lost"
    stopped = runs.stop_run(run_id)
    assert stopped["status"] == "stopped"
    assert stopped["reason"] == "stopped by user (its supervisor was gone)"
    assert not any(pid_alive(pid) for pid in grandchildren)
    with pytest.raises(Conflict, match="already stopped"):
        runs.stop_run(run_id)


def test_get_results_samples_history_and_finds_the_checkpoint():
    rows = [{"step": i, "time": 1000.0 + i, "train/loss": 1.0 / i, "reward/mean": i / 120} for i in range(1, 121)]
    folder = make_run("0000c0de", created_at=time.time(), rows=rows)
    with open(folder / "env_metrics.jsonl", "w") as handle:
        handle.write(json.dumps({"step": 120, "train/percent_correct": 0.75}) + "\n")
    (folder / "checkpoints" / "step_60").mkdir(parents=True)
    time.sleep(0.01)
    (folder / "checkpoints" / "step_120").mkdir()
    results = runs.get_results("0000c0de")
    assert results["final_metrics"]["step"] == 120
    assert results["final_metrics"]["train/percent_correct"] == 0.75
    history = results["history"]
    assert len(history) == 50 and history[0]["step"] == 1 and history[-1]["step"] == 120
    gaps = {b["step"] - a["step"] for a, b in zip(history, history[1:])}
    assert gaps <= {2, 3}  # evenly spaced
    assert results["checkpoint"].endswith("step_120")  # newest folder when no results.json
    atomic_write_json(folder / "results.json", {"final_checkpoint": "/ckpt/final", "tinker_path": "tinker://x/1"})
    results = runs.get_results("0000c0de")
    assert results["checkpoint"] == "/ckpt/final" and results["tinker_path"] == "tinker://x/1"


def test_completed_run_results_end_to_end(specs):
    run = runs.launch([specs.complete(steps=4)], environment="toy", profile="local", total_steps=4)
    wait_status(run["run_id"], ("completed", "failed"))
    results = runs.get_results(run["run_id"])
    assert results["status"] == "completed"
    assert results["steps_done"] == 4 and results["final_metrics"]["reward/mean"] == 1.0
    assert results["checkpoint"].endswith("checkpoints/step_4") and results["tinker_path"] == "tinker://local/4"


@pytest.mark.parametrize("bad", ["../../etc", "ABCDEF12", "", None, "1234567", "12345678/..", 12345678])
def test_bad_run_ids_are_rejected_before_touching_paths(bad):
    for call in (runs.get_run, runs.stop_run, runs.get_results, runs.run_events):
        with pytest.raises(BadInput, match="invalid run id"):
            call(bad)


def test_unknown_run_is_not_found_and_finished_run_is_a_conflict():
    for call in (runs.get_run, runs.stop_run, runs.get_results, runs.run_events):
        with pytest.raises(NotFound, match="no run deadbeef"):
            call("deadbeef")
    make_run("00000d0e", created_at=time.time(), status="completed")
    with pytest.raises(Conflict, match="already completed"):
        runs.stop_run("00000d0e")


def test_bad_pipelines_are_refused_and_leave_nothing(specs):
    a = specs.sleeper("a", depends_on=[("b", "ready")])
    b = specs.sleeper("b", depends_on=[("a", "ready")])
    cases = {
        "dependency cycle": [a, b],
        "unknown process": [specs.sleeper("a", depends_on=[("ghost", "ready")])],
        "duplicate process name": [specs.sleeper("a"), specs.sleeper("a")],
        "readiness kind": [specs.ProcessSpec(name="a", argv=["x"], readiness=specs.Readiness("tcp"))],
        "invalid process name": [specs.ProcessSpec(name="Bad Name", argv=["x"])],
        "at least one process": [],
        "condition": [specs.sleeper("b"), specs.sleeper("a", depends_on=[("b", "healthy")])],
    }
    for message, pipeline in cases.items():
        with pytest.raises(BadInput, match=message):
            runs.launch(pipeline, environment="toy", profile="local")
    assert not runs_dir().exists() or not list(runs_dir().iterdir())


def test_start_run_needs_the_profile_key_before_creating_anything():
    with pytest.raises(MissingKey, match="TINKER_API_KEY"):
        runs.start_run("toy_addition", "tinker")
    assert runs.list_runs() == []


def test_start_run_launches_the_real_pipeline(hermes_home):
    import yaml

    run = runs.start_run("toy_addition", "local", overrides={"group_size": 4, "batch_size": 8})
    run_id = run["run_id"]
    try:
        assert run["environment"] == "toy_addition" and run["profile"] == "local"
        assert set(run["ports"]) == {"api", "inference", "tinker"} and len(set(run["ports"].values())) == 3
        assert run["supervisor"]["pid"] and run["total_steps"]
        config = yaml.safe_load((run_dir(run_id) / "config.yaml").read_text())
        assert config["env"]["rollout_server_url"] == f"http://127.0.0.1:{run['ports']['api']}"
        assert config["env"]["group_size"] == 4
        pipeline = json.loads((run_dir(run_id) / "pipeline.json").read_text())
        names = [p["name"] for p in pipeline]
        assert {"api", "trainer", "env"} <= set(names)
        assert "{port:" not in json.dumps(pipeline)  # every placeholder filled
        api = next(p for p in pipeline if p["name"] == "api")
        assert str(run["ports"]["api"]) in api["argv"]
    finally:
        if runs.get_run(run_id, sample=False)["status"] not in RECORDED_FINAL:
            runs.stop_run(run_id)
    final = runs.get_run(run_id)
    assert final["status"] in ("stopped", "failed")
    assert not any(p["alive"] for p in final["processes"])


def test_the_trainer_sends_the_sdks_telemetry_only_to_tinker_cloud():
    """On the local server the SDK's telemetry has no one to go to (a wrapper and an event queue around
    every call, CPU the run could use): the local trainer turns it off; with Tinker cloud the user's
    own TINKER_TELEMETRY setting stands."""
    from hermes_rl.core.envs.discovery import find_environment
    from hermes_rl.core.envs.profiles import get_profile
    from hermes_rl.core.runs.training import training_pipeline

    env = find_environment("toy_addition")
    local = {s.name: s for s in training_pipeline("0badc0de", get_profile("local"), env)}
    cloud = {s.name: s for s in training_pipeline("0badc0de", get_profile("tinker"), env)}
    assert local["trainer"].env["TINKER_TELEMETRY"] == "0"
    assert "TINKER_TELEMETRY" not in cloud["trainer"].env
