"""Sweeps: the grid, validation before anything is queued, the queue under the local-run limit, the
per-configuration summary over seeds, and a real two-run sweep whose second run is started by the
first one's supervisor as it ends (no client open)."""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.fsutil import atomic_write_json
from hermes_rl.core.base.paths import run_dir, sweep_queue_flag, sweeps_dir
from hermes_rl.core.clients.cli import main
from hermes_rl.core.runs import sweeps


def test_the_grid_is_every_combination_in_the_order_given():
    grid = sweeps.parse_grid(["learning_rate=1e-4,3e-4", "group_size=4,8"])
    assert grid == {"learning_rate": ["1e-4", "3e-4"], "group_size": ["4", "8"]}
    assert sweeps.configurations(grid) == [
        {"learning_rate": "1e-4", "group_size": "4"},
        {"learning_rate": "1e-4", "group_size": "8"},
        {"learning_rate": "3e-4", "group_size": "4"},
        {"learning_rate": "3e-4", "group_size": "8"},
    ]
    for bad in (["learning_rate"], ["learning_rate=1e-4,,3e-4"], ["a=1", "a=2"]):
        with pytest.raises(BadInput):
            sweeps.parse_grid(bad)


@pytest.mark.parametrize(
    "items, seeds, words",
    [
        (["learning_rate=1e-4,3"], None, r"configuration learning_rate=3: learning_rate must be <= 1"),
        (["group_size=4,1"], None, "group_size=1"),
        (["no_such_field=1"], None, "no_such_field"),
        (["learning_rate=1e-4"], 0, "--seeds"),
        (["seed=1,2"], 2, "not both"),
    ],
)
def test_a_sweep_with_one_bad_configuration_is_refused_whole_and_nothing_is_queued(items, seeds, words):
    with pytest.raises(BadInput, match=words):
        sweeps.create_sweep(sweeps.parse_grid(items), seeds=seeds, env_name="toy_addition", profile="local")
    assert not sweeps.list_sweeps()
    assert not sweep_queue_flag().exists()


def _sweep_record(sweep_id: str, members: list[dict], environment: str = "toy_addition") -> None:
    atomic_write_json(
        sweeps_dir() / sweep_id / "sweep.json",
        {
            "sweep_id": sweep_id,
            "created_at": time.time(),
            "environment": environment,
            "profile": "local",
            "backend": "local",
            "grid": {"learning_rate": ["1e-4", "3e-4"]},
            "seeds": [0, 1],
            "members": members,
        },
    )


def _member(index: int, config_index: int, lr: str, seed: int, run_id: str | None = None) -> dict:
    return {
        "index": index,
        "config_index": config_index,
        "config": {"learning_rate": lr},
        "seed": seed,
        "state": "started" if run_id else "queued",
        "run_id": run_id,
        "error": None,
        "started_at": None,
    }


def _fake_run(run_id: str, status: str, rewards: list[float], evals: list[tuple[int, float]]) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    record = {"run_id": run_id, "status": status, "profile": "local", "backend": "local", "created_at": time.time()}
    (folder / "run.json").write_text(json.dumps(record))
    with open(folder / "metrics.jsonl", "w") as handle:
        for step, reward in enumerate(rewards, 1):
            handle.write(json.dumps({"step": step, "reward/mean": reward}) + "\n")
    with open(folder / "env_metrics.jsonl", "w") as handle:
        for step, value in evals:
            handle.write(json.dumps({"step": step, "eval/percent_correct": value}) + "\n")


def test_the_summary_gives_each_configuration_its_evals_and_final_reward_over_seeds():
    # lr 1e-4: two seeds; the reward is the mean of each run's last 20 steps, not its last batch
    _fake_run("bbbb0001", "completed", [0.0] * 10 + [0.5] * 20, [(10, 0.2), (20, 0.6), (30, 0.5)])
    _fake_run("bbbb0002", "completed", [1.0] * 5 + [0.7] * 20, [(10, 0.4), (20, 0.8), (30, 0.9)])
    _fake_run("bbbb0003", "completed", [0.2] * 30, [(10, 0.1)])
    _sweep_record(
        "0123abcd",
        [
            _member(0, 0, "1e-4", 0, "bbbb0001"),
            _member(1, 0, "1e-4", 1, "bbbb0002"),
            _member(2, 1, "3e-4", 0, "bbbb0003"),
            _member(3, 1, "3e-4", 1),
        ],
    )
    status = sweeps.sweep_status("0123abcd")
    first, second = status["summary"]
    assert first["config"] == {"learning_rate": "1e-4"} and first["runs"] == ["bbbb0001", "bbbb0002"]
    assert first["eval_first"]["mean"] == pytest.approx(0.3) and first["eval_first"]["std"] == pytest.approx(0.1)
    assert first["eval_best"]["mean"] == pytest.approx(0.75)  # 0.6 and 0.9
    assert first["eval_last"]["mean"] == pytest.approx(0.7)
    assert first["final_reward"]["mean"] == pytest.approx(0.6) and first["final_reward"]["n"] == 2
    assert second["runs"] == ["bbbb0003", None] and second["states"] == ["completed", "queued"]
    assert second["final_reward"] == {"mean": pytest.approx(0.2), "std": 0.0, "n": 1}
    assert status["run_ids"] == ["bbbb0001", "bbbb0002", "bbbb0003"]


def test_sweep_show_and_compare_sweep_print_the_summary(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")
    _fake_run("bbbb0001", "completed", [0.5] * 3, [(1, 0.5)])
    _fake_run("bbbb0002", "stopped", [0.25] * 3, [(1, 0.25)])
    _sweep_record("0123abcd", [_member(0, 0, "1e-4", 0, "bbbb0001"), _member(1, 1, "3e-4", 0, "bbbb0002")])
    assert main(["compare", "--sweep", "0123abcd"]) == 0
    out = capsys.readouterr().out
    assert "learning_rate=1e-4" in out and "learning_rate=3e-4" in out and "mean of last 20" in out
    assert main(["sweep", "show", "0123abcd"]) == 0
    assert "0.500" in capsys.readouterr().out
    assert main(["compare", "--sweep", "0123abcd", "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in compared["runs"]] == ["bbbb0001", "bbbb0002"]
    assert compared["runs"][1]["reward"]["value"] == pytest.approx(0.25)
    with pytest.raises(NotFound):
        sweeps.read_sweep("ffffffff")


def test_a_full_local_limit_leaves_members_queued_and_the_flag_set(monkeypatch):
    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    # a run starting a moment ago (no supervisor yet) holds the only place
    folder = run_dir("cccc0001")
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps({"run_id": "cccc0001", "status": "starting", "backend": "local", "created_at": time.time()})
    )
    _sweep_record("0123abcd", [_member(0, 0, "1e-4", 0), _member(1, 1, "3e-4", 0)])
    assert sweeps.start_queued() == []
    assert [m["state"] for m in sweeps.read_sweep("0123abcd")["members"]] == ["queued", "queued"]
    assert sweep_queue_flag().exists()  # an ending supervisor will start the queue


def test_a_member_that_cannot_start_is_failed_with_why_and_the_queue_flag_cleared():
    _sweep_record("0123abcd", [_member(0, 0, "1e-4", 0)], environment="no_such_environment")
    sweep_queue_flag().touch()
    assert sweeps.start_queued() == []
    member = sweeps.read_sweep("0123abcd")["members"][0]
    assert member["state"] == "failed" and "no_such_environment" in member["error"]
    assert not sweep_queue_flag().exists()


def test_an_ending_run_starts_the_queue_program_detached(monkeypatch):
    """What a supervisor (or, when it died, its watchdog) does as its run ends."""
    from hermes_rl.core.daemons import procscan
    from hermes_rl.core.daemons.spawn import start_sweep_queue
    from tests.fixtures_core import wait_until

    assert start_sweep_queue() is None  # no queue flag: nothing started
    assert not (sweeps_dir() / "queue.log").exists()
    _sweep_record("0123abcd", [_member(0, 0, "1e-4", 0)], environment="no_such_environment")
    sweep_queue_flag().touch()
    monkeypatch.setenv(procscan.SUPERVISOR_MARKER, str(run_dir("cccc0001")))  # as in a supervisor
    assert start_sweep_queue() is None
    wait_until(lambda: sweeps.read_sweep("0123abcd")["members"][0]["state"] == "failed", timeout=60, what="queue ran")
    wait_until(lambda: not sweep_queue_flag().exists(), timeout=10, what="flag cleared")
    assert "no_such_environment" not in (sweeps_dir() / "queue.log").read_text()  # a failure is in sweep.json


def test_a_cancelled_sweep_starts_no_more_runs(capsys):
    _fake_run("bbbb0001", "completed", [0.5], [])
    _sweep_record("0123abcd", [_member(0, 0, "1e-4", 0, "bbbb0001"), _member(1, 1, "3e-4", 0)])
    sweep_queue_flag().touch()
    assert main(["sweep", "cancel", "0123abcd"]) == 0
    assert "1 run(s) will not start" in capsys.readouterr().out
    assert [m["state"] for m in sweeps.read_sweep("0123abcd")["members"]] == ["started", "cancelled"]
    assert not sweep_queue_flag().exists()
    assert sweeps.start_queued() == []
    assert main(["sweep", "cancel"]) == 1
    assert "needs a sweep id" in capsys.readouterr().err


def test_the_queue_program_refuses_other_arguments(capsys):
    assert sweeps.main(["start"]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)  # two real runs one after the other: 5-9 min on 2 saturated cores
def test_a_sweep_under_a_limit_of_one_runs_to_completion_started_by_supervisors(tiny_model_dir, monkeypatch, capsys):
    from tests.fixtures_model import use_tiny_model

    use_tiny_model(tiny_model_dir, total_steps=6)
    monkeypatch.setenv("HERMES_RL_MAX_LOCAL_RUNS", "1")
    assert main(["sweep", "--set", "learning_rate=1e-4,3e-4", "--env", "toy_addition", "--profile", "local"]) == 0
    out = capsys.readouterr().out
    assert "1 started, 1 queued" in out.replace("runs, ", "")
    assert "learning_rate=3e-4: queued" in out  # a member's state, not an unknown run status ("? queued")
    (sweep,) = sweeps.list_sweeps()
    deadline = time.time() + 780
    while time.time() < deadline:
        members = sweeps.sweep_status(sweep["sweep_id"])["members"]
        if all(m.get("status") in ("completed", "failed", "stopped", "lost") for m in members):
            break
        # never two local runs at once: the second waits for the first to end
        assert sum(m.get("status") in ("starting", "running", "stopping") for m in members) <= 1
        time.sleep(1.0)
    status = sweeps.sweep_status(sweep["sweep_id"])
    assert [m["status"] for m in status["members"]] == ["completed", "completed"], status["members"]
    assert not sweep_queue_flag().exists()
    runs = [json.loads((run_dir(m["run_id"]) / "run.json").read_text()) for m in status["members"]]
    assert [r["sweep"]["id"] for r in runs] == [sweep["sweep_id"]] * 2
    # learning_rate is a training value: each run's own (its config.yaml), not a derived profile
    assert [r["profile_changes"] for r in runs] == [{}, {}]
    configs = [yaml.safe_load((run_dir(r["run_id"]) / "config.yaml").read_text()) for r in runs]
    assert [c["tinker"]["learning_rate"] for c in configs] == [pytest.approx(1e-4), pytest.approx(3e-4)]
    assert runs[1]["profile_values"]["learning_rate"] == pytest.approx(3e-4)
    trained = [json.loads(line) for line in open(run_dir(runs[1]["run_id"]) / "metrics.jsonl")]
    assert trained[-1]["train/learning_rate"] == pytest.approx(3e-4)
    assert runs[1]["created_at"] >= runs[0]["ended_at"] - 1.0  # started once the first had ended
    assert os.path.exists(sweeps_dir() / "queue.log")
    assert all(row["final_reward"] is not None for row in status["summary"])
