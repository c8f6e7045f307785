"""The per-run supervisor, proven with small real programs (tests/procs/): readiness ordering,
failure propagation, completion, ordered stop, stop during start, restart policy, kill -9 of the
supervisor, watchdog, port clashes, secrets."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.paths import run_dir
from tests.fixtures_core import PY, pid_alive, proc_path, processes_with_env, wait_status, wait_until

pytestmark = [pytest.mark.usefixtures("run_processes_cleanup"), pytest.mark.timeout(90)]


def events(run_id, event=None):
    rows = runs.run_events(run_id)
    return [e for e in rows if event is None or e.get("event") == event]


def procs(run):
    return {p["name"]: p for p in run["processes"]}


def assert_nothing_left(run_id):
    """No process of the run is alive: by recorded pid and by the environment marker."""
    run = runs.get_run(run_id, sample=False)
    for proc in run["processes"]:
        if proc.get("pid"):
            assert not pid_alive(proc["pid"]), f"{proc['name']} (pid {proc['pid']}) survived"
    wait_until(
        lambda: not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run_id))),
        10,
        what="no process with the run's marker",
    )


def test_dependants_start_only_after_readiness(specs):
    pipeline = [
        specs.http("api", delay=0.6),
        specs.log_ready("tinker", depends_on=[("api", "ready")]),
        specs.sleeper("trainer", depends_on=[("tinker", "ready")]),
        specs.sleeper("env", depends_on=[("trainer", "started")]),
    ]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    p = procs(run)
    # The HTTP probe waits for 200, not for the port to open: the server answers 503 for 0.6 s.
    assert p["api"]["ready_at"] - p["api"]["started_at"] >= 0.6
    assert p["tinker"]["started_at"] >= p["api"]["ready_at"]
    assert p["trainer"]["started_at"] >= p["tinker"]["ready_at"]
    assert p["env"]["started_at"] >= p["trainer"]["started_at"]
    assert [p[n]["state"] for n in ("api", "tinker", "trainer", "env")] == ["ready"] * 4
    started = [e["process"] for e in events(run["run_id"], "process_state") if e["state"] == "starting"]
    assert started == ["api", "tinker", "trainer", "env"]
    assert run["ports"]["api"] == p["api"]["port"]
    assert all(p[n]["pgid"] == p[n]["pid"] for n in p), "each child leads its own process group"
    runs.stop_run(run["run_id"])
    assert_nothing_left(run["run_id"])


def test_required_exit_fails_run_naming_process_and_code(specs):
    pipeline = [specs.http("api"), specs.crash("trainer", after=0.2, code=3, depends_on=[("api", "ready")])]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "failed")
    assert run["reason"] == "trainer exited with code 3"
    assert "simulated failure" in run["detail"]  # last log lines say why
    p = procs(run)
    assert p["trainer"]["state"] == "failed" and p["trainer"]["exit_code"] == 3
    assert p["api"]["state"] == "stopped"
    assert run["ended_at"] >= run["created_at"]
    assert_nothing_left(run["run_id"])


def test_completion_stops_the_rest_and_completes(specs):
    pipeline = [
        specs.http("api"),
        specs.complete(steps=3, depends_on=[("api", "ready")]),
        specs.sleeper("env", depends_on=[("trainer", "started")]),
    ]
    run = runs.launch(pipeline, environment="toy", profile="local", total_steps=3)
    run = wait_status(run["run_id"], ("completed", "failed"))
    assert run["status"] == "completed", run["reason"]
    assert run["reason"] == "trainer finished"
    p = procs(run)
    assert p["trainer"]["state"] == "exited" and p["trainer"]["exit_code"] == 0
    assert p["env"]["state"] == "stopped" and p["api"]["state"] == "stopped"
    assert run["last_metric"]["step"] == 3
    assert_nothing_left(run["run_id"])


def test_a_trainer_that_stops_early_says_why_in_the_runs_reason(specs):
    said = "stopped early at step 126: eval flat for 3 evals since step 49 (best 0.960) (stop_on_plateau)"
    pipeline = [specs.sleeper("api"), specs.complete(steps=2, finish_reason=said, depends_on=[("api", "started")])]
    run = wait_status(runs.launch(pipeline, environment="toy", profile="local")["run_id"], ("completed", "failed"))
    assert run["status"] == "completed"
    assert run["reason"] == f"trainer {said}"
    assert_nothing_left(run["run_id"])


def test_an_environment_done_with_its_work_exits_and_the_trainer_still_finishes(specs):
    """An Atropos environment returns once run-api holds the data for total_steps, while the trainer
    still has batches to train: its clean exit is not the run's failure."""
    pipeline = [
        specs.sleeper("api"),
        specs.complete(steps=40, depends_on=[("api", "started")]),
        specs.log_ready("env", args=["--exit-after", "0.2"], done_on_clean_exit=True, depends_on=[("api", "started")]),
    ]
    run = wait_status(runs.launch(pipeline, environment="toy", profile="local")["run_id"], ("completed", "failed"))
    assert run["status"] == "completed", run["reason"]
    assert run["reason"] == "trainer finished" and run["last_metric"]["step"] == 40
    env = procs(run)["env"]
    assert env["state"] == "exited" and env["exit_code"] == 0
    exited = [e for e in events(run["run_id"], "process_state") if e["process"] == "env" and e["state"] == "exited"]
    assert exited and exited[0]["message"] == "env finished its work"
    assert_nothing_left(run["run_id"])


def test_an_environment_exiting_cleanly_before_it_was_ready_fails_the_run(specs):
    env = specs.ProcessSpec(
        name="env",
        argv=[PY, proc_path("early_exit.py")],
        done_on_clean_exit=True,
        readiness=specs.Readiness("log", pattern=r"^ready", timeout_s=20.0),
    )
    run = runs.launch([specs.sleeper("api"), specs.sleeper("trainer"), env], environment="toy", profile="local")
    run = wait_status(run["run_id"], ("failed", "completed"))
    assert run["status"] == "failed" and run["reason"].startswith("env exited")
    assert_nothing_left(run["run_id"])


def test_clean_exit_before_work_is_done_is_a_failure(specs):
    trainer = specs.ProcessSpec(
        name="trainer", argv=[PY, proc_path("early_exit.py")], completes_run=True, completion_file="{run_dir}/done"
    )
    run = runs.launch([specs.sleeper("api"), trainer], environment="toy", profile="local")
    run = wait_status(run["run_id"], ("failed", "completed"))
    assert run["status"] == "failed"
    assert run["reason"].startswith("trainer exited 0 before finishing")
    assert procs(run)["trainer"]["exit_code"] == 0


def test_stop_goes_in_reverse_dependency_order(specs):
    pipeline = [
        specs.sleeper("api"),
        specs.log_ready("trainer", depends_on=[("api", "started")]),
        specs.sleeper("env", depends_on=[("trainer", "ready")]),
    ]
    run = runs.launch(pipeline, environment="toy", profile="local")
    wait_status(run["run_id"], "running")
    stopped = runs.stop_run(run["run_id"])
    assert stopped["status"] == "stopped" and stopped["reason"] == "stopped by user"
    order = [e["process"] for e in events(run["run_id"], "signal") if e["signal"] == "SIGTERM"]
    assert order == ["env", "trainer", "api"]
    ended = [e["process"] for e in events(run["run_id"], "process_state") if e["state"] == "stopped"]
    assert ended == ["env", "trainer", "api"]
    statuses = [e["status"] for e in events(run["run_id"], "run_status")]
    assert statuses == ["running", "stopping", "stopped"]
    assert_nothing_left(run["run_id"])


def test_sigterm_ignored_gets_sigkill_after_stop_timeout(specs):
    stubborn = specs.log_ready("api", "ignore_term.py", stop_timeout=0.5)
    run = runs.launch([stubborn], environment="toy", profile="local")
    wait_status(run["run_id"], "running")
    began = time.monotonic()
    stopped = runs.stop_run(run["run_id"])
    took = time.monotonic() - began
    assert stopped["status"] == "stopped"
    assert procs(stopped)["api"]["exit_code"] == -signal.SIGKILL
    assert took >= 0.5
    kills = [e for e in events(run["run_id"], "signal") if e["signal"] == "SIGKILL"]
    assert [e["process"] for e in kills] == ["api"]
    assert_nothing_left(run["run_id"])


def test_sigint_to_supervisor_is_a_user_stop(specs):
    run = runs.launch([specs.sleeper("api")], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    os.kill(run["supervisor"]["pid"], signal.SIGINT)
    run = wait_status(run["run_id"], "stopped")
    assert run["reason"] == "stopped by user"


def test_stop_during_start_cancels_pending_starts(specs):
    pipeline = [specs.http("api", delay=60, timeout=120), specs.sleeper("trainer", depends_on=[("api", "ready")])]
    run = runs.launch(pipeline, environment="toy", profile="local")
    wait_until(
        lambda: procs(runs.get_run(run["run_id"], sample=False))["api"]["state"] == "starting", what="api starting"
    )
    began = time.monotonic()
    stopped = runs.stop_run(run["run_id"])
    assert time.monotonic() - began < 8  # no waiting for the 60 s readiness
    assert stopped["status"] == "stopped"
    trainer = procs(stopped)["trainer"]
    assert trainer["state"] == "stopped" and trainer["pid"] is None
    assert not [
        e for e in events(run["run_id"], "process_state") if e.get("process") == "trainer" and e["state"] == "starting"
    ]
    assert [e for e in events(run["run_id"], "process_state") if e.get("cancelled")]
    assert_nothing_left(run["run_id"])


def test_restart_on_failure_backs_off_and_gives_up(specs, tmp_path):
    record = tmp_path / "starts.txt"
    flaky = specs.crash(
        "flaky",
        after=0.0,
        code=2,
        record=str(record),
        restart=specs.RestartPolicy("on_failure", max_restarts=2, backoff_s=0.3),
    )
    run = runs.launch([specs.sleeper("api"), flaky], environment="toy", profile="local")
    run = wait_status(run["run_id"], "failed", timeout=30)
    assert run["reason"] == "flaky exited with code 2 (gave up after 2 restarts)"
    assert procs(run)["flaky"]["restarts"] == 2
    starts = [float(x) for x in record.read_text().split()]
    assert len(starts) == 3
    # backoff_s * 2**(n-1): at least 0.3 s before the first restart, 0.6 s before the second.
    assert starts[1] - starts[0] >= 0.3
    assert starts[2] - starts[1] >= 0.6
    scheduled = events(run["run_id"], "process_state")
    delays = [e["delay_s"] for e in scheduled if e.get("process") == "flaky" and "delay_s" in e]
    assert delays == [0.3, 0.6]


def test_restart_that_recovers_keeps_the_run_going(specs, tmp_path):
    # Fails once (no marker file yet), then runs: the run is running with restarts == 1.
    marker = tmp_path / "second"
    code = (
        f"import os, sys, time\np = {str(marker)!r}\n"
        "if not os.path.exists(p):\n    open(p, 'w').close(); sys.exit(5)\n"
        "print('ready', flush=True); time.sleep(3600)\n"
    )
    flaky = specs.ProcessSpec(
        name="env",
        argv=[PY, "-c", code],
        readiness=specs.Readiness("log", pattern="^ready", timeout_s=20),
        restart=specs.RestartPolicy("on_failure", max_restarts=3, backoff_s=0.1),
    )
    run = runs.launch([flaky], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    env = procs(run)["env"]
    assert env["restarts"] == 1 and env["state"] == "ready"
    runs.stop_run(run["run_id"])


def test_readiness_timeout_fails_with_clear_reason(specs):
    run = runs.launch([specs.http("api", delay=60, timeout=0.5)], environment="toy", profile="local")
    run = wait_status(run["run_id"], "failed")
    assert run["reason"].startswith("api was not ready within 0.5s")
    assert "did not return 200" in run["reason"]
    assert_nothing_left(run["run_id"])


def test_missing_executable_is_a_clear_reason(specs):
    bad = specs.ProcessSpec(name="api", argv=["/nonexistent/hermes-api"])
    run = runs.launch([bad], environment="toy", profile="local")
    run = wait_status(run["run_id"], "failed")
    assert run["reason"] == "cannot start api: executable '/nonexistent/hermes-api' not found"


def test_port_taken_before_spawn_is_replaced_and_dependants_are_told(specs):
    """A port picked at launch that another program takes before the process starts: the process gets a
    free one, and so do the addresses its dependants read (their argv and the run's config file)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        by_argv = specs.ProcessSpec(
            name="client",
            argv=[PY, proc_path("client.py"), "http://127.0.0.1:{port:api}/health"],
            depends_on=[("api", "ready")],
            readiness=specs.Readiness("log", pattern=r"^ready", timeout_s=20.0),
        )
        by_file = specs.ProcessSpec(
            name="reader",
            argv=[PY, proc_path("client.py"), "--from-file", "{run_dir}/config.yaml"],
            depends_on=[("api", "ready")],
            readiness=specs.Readiness("log", pattern=r"^ready", timeout_s=20.0),
        )
        config = {"env": {"rollout_server_url": f"http://127.0.0.1:{port}"}}
        pipeline = [specs.http("api"), by_argv, by_file]
        run = runs.launch(pipeline, environment="toy", profile="local", ports={"api": port}, config=config)
        run = wait_status(run["run_id"], "running")
        moved = run["ports"]["api"]
        assert moved != port
        api = next(p for p in run["processes"] if p["name"] == "api")
        assert api["argv_redacted"][-3] == str(moved)
        for name in ("client", "reader"):
            log = Path(next(p for p in run["processes"] if p["name"] == name)["log"]).read_text()
            assert f"ready: http://127.0.0.1:{moved}" in log, log
        events = [e["message"] for e in runs.run_events(run["run_id"]) if e["event"] == "port"]
        assert events == [f"port {port} of api was taken by another program: moved to {moved} (also in config.yaml)"]
        runs.stop_run(run["run_id"], wait=20)
        # Without a declared port the server itself fails to bind: its exit and its last log line say so.
        server = specs.ProcessSpec(name="api", argv=[PY, proc_path("http_server.py"), "--port", str(port)])
        run = runs.launch([server], environment="toy", profile="local")
        run = wait_status(run["run_id"], "failed")
        # the reason carries the words the server printed last (core.base.failures.last_line)
        assert run["reason"].startswith(f"api exited with code 1: cannot bind 127.0.0.1:{port}: ")
        assert "cannot bind" in run["detail"]
    finally:
        holder.close()


def test_kill_9_of_supervisor_leaves_no_child_or_grandchild(specs):
    pipeline = [
        specs.log_ready("api", "ignore_term.py"),
        specs.log_ready(
            "trainer",
            "spawn_tree.py",
            args=["--pids", "{run_dir}/pids", "--ignore-term"],
            depends_on=[("api", "ready")],
        ),
    ]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    grandchildren = [int(x) for x in (run_dir(run["run_id"]) / "pids").read_text().split()]
    children = [p["pid"] for p in run["processes"]]
    everyone = children + grandchildren
    assert all(pid_alive(pid) for pid in everyone)
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_until(
        lambda: not any(pid_alive(pid) for pid in everyone),
        15,
        what="children and grandchildren to die with the supervisor",
    )
    assert not processes_with_env("HERMES_RL_RUN_DIR", str(run_dir(run["run_id"])))
    run = wait_status(run["run_id"], "failed")
    assert run["reason"].startswith("supervisor died")
    assert all(p["state"] == "stopped" for p in run["processes"])


def test_watchdog_is_restarted_and_still_cleans_up(specs):
    pipeline = [specs.log_ready("trainer", "spawn_tree.py", args=["--pids", "{run_dir}/pids"])]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    first = run["watchdog"]["pid"]
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: [e for e in events(run["run_id"], "watchdog") if "restarted" in e["message"]], what="watchdog restart"
    )
    grandchildren = [int(x) for x in (run_dir(run["run_id"]) / "pids").read_text().split()]
    os.kill(run["supervisor"]["pid"], signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(pid) for pid in grandchildren), 15, what="grandchildren to die")
    assert wait_status(run["run_id"], "failed")["reason"].startswith("supervisor died")


def test_two_concurrent_runs_get_distinct_ports(specs):
    a = runs.launch(
        [specs.http("api"), specs.http("inference", depends_on=[("api", "ready")])], environment="toy", profile="local"
    )
    b = runs.launch(
        [specs.http("api"), specs.http("inference", depends_on=[("api", "ready")])], environment="toy", profile="local"
    )
    a, b = wait_status(a["run_id"], "running"), wait_status(b["run_id"], "running")
    ports = list(a["ports"].values()) + list(b["ports"].values())
    assert len(set(ports)) == 4
    assert {r["run_id"] for r in runs.list_runs()} >= {a["run_id"], b["run_id"]}
    assert runs.stop_run(a["run_id"])["status"] == "stopped"
    assert runs.get_run(b["run_id"], sample=False)["status"] == "running"  # untouched by the other stop
    assert runs.stop_run(b["run_id"])["status"] == "stopped"


def test_secrets_reach_only_named_children_and_never_files(specs, monkeypatch, hermes_home):
    key = "tml-secret-value-1234567890"
    monkeypatch.setenv("TINKER_API_KEY", key)
    probe = (
        "import os, time; print('KEY-' + ('yes' if os.environ.get('TINKER_API_KEY', '').startswith('tml-secret')"
        " else 'no'), flush=True); time.sleep(60)"
    )
    with_key = specs.ProcessSpec(
        name="trainer",
        argv=[PY, "-c", probe],
        secret_env=["TINKER_API_KEY"],
        readiness=specs.Readiness("log", pattern="KEY-"),
    )
    without = specs.ProcessSpec(name="env", argv=[PY, "-c", probe], readiness=specs.Readiness("log", pattern="KEY-"))
    run = runs.launch([with_key, without], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    logs = {p["name"]: open(p["log"]).read() for p in run["processes"]}
    assert "KEY-yes" in logs["trainer"] and "KEY-no" in logs["env"]
    runs.stop_run(run["run_id"])
    for path in list(run_dir(run["run_id"]).iterdir()) + [Path(p["log"]) for p in run["processes"]]:
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path.name


def test_a_secret_in_argv_or_env_is_refused(specs, monkeypatch, hermes_home):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-abcdef")
    leaky = specs.ProcessSpec(name="trainer", argv=[PY, "-c", "pass", "--key", "wandb-secret-abcdef"])
    with pytest.raises(BadInput, match="secret_env"):
        runs.launch([leaky], environment="toy", profile="local")
    named = specs.ProcessSpec(name="trainer", argv=[PY, "-c", "pass"], env={"WANDB_API_KEY": "x"})
    with pytest.raises(BadInput, match="secret_env"):
        runs.launch([named], environment="toy", profile="local")
    assert runs.list_runs() == []  # nothing half-made is left behind


def test_a_second_client_process_reads_and_stops_a_run_it_did_not_start(specs, hermes_home):
    import subprocess

    run = runs.launch(
        [specs.sleeper("api"), specs.sleeper("trainer", depends_on=[("api", "started")])],
        environment="toy",
        profile="local",
    )
    run_id = wait_status(run["run_id"], "running")["run_id"]
    code = (
        "import json, sys\nfrom core import runs\n"
        f"listed = [r['run_id'] for r in runs.list_runs()]\n"
        f"seen = runs.get_run({run_id!r})\n"
        f"stopped = runs.stop_run({run_id!r})\n"
        "print(json.dumps({'listed': listed, 'seen': seen['status'], 'rss': seen['processes'][0]['rss'],"
        " 'stopped': stopped['status']}))\n"
    )
    env = dict(os.environ, HERMES_HOME=str(hermes_home))
    out = subprocess.run(
        [PY, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["listed"] == [run_id]
    assert answer["seen"] == "running" and answer["rss"] > 0
    assert answer["stopped"] == "stopped"
    assert runs.get_run(run_id)["status"] == "stopped"


def test_supervisor_refuses_a_run_that_already_has_one(specs):
    import subprocess

    run = runs.launch([specs.sleeper("api")], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    out = subprocess.run(
        [PY, "-m", "hermes_rl.core.daemons.supervisor", run["run_id"], "--foreground"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert out.returncode == 2
    assert "already has a supervisor" in out.stdout
    assert runs.get_run(run["run_id"], sample=False)["status"] == "running"
    runs.stop_run(run["run_id"])


def test_completed_dependency_waits_for_a_one_shot_step(specs):
    setup = specs.ProcessSpec(name="model", argv=[PY, "-c", "import time; time.sleep(0.3); print('built')"])
    pipeline = [setup, specs.sleeper("tinker", depends_on=[("model", "completed")])]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    p = procs(run)
    assert p["model"]["state"] == "exited" and p["model"]["exit_code"] == 0
    assert p["tinker"]["started_at"] >= p["model"]["ended_at"]
    runs.stop_run(run["run_id"])
    broken = specs.ProcessSpec(name="model", argv=[PY, "-c", "import sys; sys.exit(4)"], required=False)
    run = runs.launch(
        [broken, specs.sleeper("tinker", depends_on=[("model", "completed")])], environment="toy", profile="local"
    )
    run = wait_status(run["run_id"], "failed")
    assert run["reason"] == "model exited with code 4"
    assert procs(run)["tinker"]["pid"] is None


def test_a_client_can_restart_one_process(specs):
    pipeline = [specs.http("api"), specs.log_ready("trainer", depends_on=[("api", "ready")])]
    run = runs.launch(pipeline, environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    old = procs(run)["trainer"]
    after = runs.restart_process(run["run_id"], "trainer")
    new = procs(after)["trainer"]
    assert new["pid"] != old["pid"] and new["restarts"] == 1
    assert not pid_alive(old["pid"])
    assert procs(after)["api"]["pid"] == procs(run)["api"]["pid"]  # its dependency kept running
    assert wait_status(run["run_id"], "running")["status"] == "running"
    wait_until(
        lambda: procs(runs.get_run(run["run_id"], sample=False))["trainer"]["state"] == "ready",
        what="restarted trainer ready",
    )
    with pytest.raises(runs.NotFound):
        runs.restart_process(run["run_id"], "ghost")
    runs.stop_run(run["run_id"])
    with pytest.raises(runs.Conflict):
        runs.restart_process(run["run_id"], "trainer")


def test_a_second_stop_escalates_to_sigkill_at_once(specs):
    stubborn = specs.log_ready("api", "ignore_term.py", stop_timeout=60)
    run = runs.launch([stubborn], environment="toy", profile="local")
    wait_status(run["run_id"], "running")
    first = runs.stop_run(run["run_id"], wait=0.3)
    assert first["status"] == "stopping"  # still inside api's 60 s stop timeout
    began = time.monotonic()
    second = runs.stop_run(run["run_id"], force=True)
    assert second["status"] == "stopped" and time.monotonic() - began < 10
    assert procs(second)["api"]["exit_code"] == -signal.SIGKILL


def test_two_stops_at_the_same_moment_are_one_orderly_stop(specs):
    stubborn = specs.log_ready("api", "ignore_term.py", stop_timeout=2)
    run = runs.launch([stubborn], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    os.kill(run["supervisor"]["pid"], signal.SIGTERM)  # e.g. the dashboard and an agent both stop it
    os.kill(run["supervisor"]["pid"], signal.SIGTERM)
    run = wait_status(run["run_id"], "stopped")
    kill = [e for e in events(run["run_id"], "signal") if e["signal"] == "SIGKILL"]
    sigterm = [e for e in events(run["run_id"], "signal") if e["signal"] == "SIGTERM"]
    assert kill[0]["time"] - sigterm[0]["time"] >= 1.9  # the stop timeout was honoured, not cut short


def test_stop_ends_a_process_tree_and_sweeps_escaped_grandchildren(specs):
    tree = specs.log_ready("trainer", "spawn_tree.py", args=["--pids", "{run_dir}/pids"], stop_timeout=1.5)
    run = runs.launch([tree], environment="toy", profile="local")
    run = wait_status(run["run_id"], "running")
    same_group, escaped = [int(x) for x in (run_dir(run["run_id"]) / "pids").read_text().split()]
    stopped = runs.stop_run(run["run_id"])
    assert stopped["status"] == "stopped"
    assert not pid_alive(same_group) and not pid_alive(escaped)
    # A cooperative tree needs no SIGKILL (reaped-late zombies of the group do not count as alive) ...
    assert not [e for e in events(run["run_id"], "signal") if e["signal"] == "SIGKILL"]
    # ... and the grandchild that left the group with setsid() is found by its environment marker.
    sweeps = events(run["run_id"], "sweep")
    assert sweeps and escaped in sweeps[0]["pids"]


def test_pipeline_written_before_the_namespace_is_read_with_todays_names(tmp_path):
    """Old pipeline.json files start `-m dataplane.…` with the project root injected: read with today's
    module names and without the injected root, a user's own PYTHONPATH and folders are kept."""
    import json

    from hermes_rl.core.base.paths import PROJECT_ROOT
    from hermes_rl.core.daemons.pipeline import load_pipeline

    legacy = [
        {
            "name": "trainer",
            "argv": [PY, "-m", "dataplane.trainer", "--config", "c.yaml"],
            "env": {"PYTHONPATH": str(PROJECT_ROOT), "PYTHONUNBUFFERED": "1"},
            "cwd": str(PROJECT_ROOT),
        },
        {
            "name": "env",
            "argv": [PY, "/their/env.py", "serve", "-m", "x"],
            "env": {"PYTHONPATH": "/their/lib"},
            "cwd": "/their",
        },
    ]
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(legacy))
    trainer, env = load_pipeline(path)
    assert trainer.argv[1:3] == ["-m", "hermes_rl.dataplane.trainer"]
    assert trainer.env == {"PYTHONUNBUFFERED": "1"} and trainer.cwd is None
    assert env.argv == legacy[1]["argv"] and env.env == {"PYTHONPATH": "/their/lib"} and env.cwd == "/their"
