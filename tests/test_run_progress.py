"""How a run is going, beyond one row: the trailing-mean headline reward, where a step's time goes
(the trainer's time/… phases), eval plateaus (with the trainer's stop_on_plateau) and sorting runs."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.base.plateau import plateau
from hermes_rl.core.base.states import STEP_PHASES, STEP_TIME
from hermes_rl.core.clients.cli import main
from hermes_rl.core.readers.metrics import REWARD_WINDOW, headline_reward, trailing_mean
from hermes_rl.core.runs import list_runs
from hermes_rl.core.runs.ordering import sort_runs
from hermes_rl.core.runs.progress import eval_plateau, step_time


def test_the_plateau_rule_counts_flat_evals_since_the_best_one():
    assert plateau([(10, 0.2), (20, 0.5), (30, 0.8)]) is None
    flat = plateau([(10, 0.2), (20, 0.9), (30, 0.9), (40, 0.895), (50, 0.905)])
    assert flat["flat_evals"] == 3 and flat["since_step"] == 20
    assert flat["text"] == "eval flat for 3 evals since step 20 (best 0.900)"
    # a gain within min_delta is no gain; a real one restarts the count
    assert plateau([(10, 0.9), (20, 0.905), (30, 0.9), (40, 0.95)], evals=2) is None
    assert plateau([(10, 0.5), (20, 0.5)], evals=3) is None  # too few evals to call it


def test_the_headline_reward_is_the_mean_of_the_last_window_steps(tmp_path):
    series = [(step, 0.0) for step in range(1, 11)] + [(step, 1.0) for step in range(11, 11 + REWARD_WINDOW)]
    assert trailing_mean(series) == {"value": 1.0, "window": REWARD_WINDOW, "steps": REWARD_WINDOW}
    assert trailing_mean(series[:4])["steps"] == 4 and trailing_mean([]) is None
    with open(tmp_path / "metrics.jsonl", "w") as handle:
        for step, value in series:
            handle.write(json.dumps({"step": step, "reward/mean": value}) + "\n")
        handle.write('{"step": 99, "reward/me')  # a partial last line is not read
    assert headline_reward(tmp_path)["value"] == pytest.approx(1.0)


def _phase_row(step: int, wait: float, train: float) -> dict:
    row = dict.fromkeys(STEP_PHASES, 0.0)
    row.update({"step": step, "time/wait_batch_s": wait, "time/forward_backward_s": train})
    row[STEP_TIME] = sum(row[k] for k in STEP_PHASES)
    return row


def test_step_time_names_the_dominant_phase(tmp_path):
    with open(tmp_path / "metrics.jsonl", "w") as handle:
        handle.write(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n")  # a row without phases is skipped
        for step in range(2, 12):
            handle.write(json.dumps(_phase_row(step, 0.0704, 0.0396)) + "\n")
    found = step_time(tmp_path)
    assert found["text"] == "step 0.11 s: 64% waiting for rollouts"
    assert found["dominant"]["key"] == "time/wait_batch_s" and found["steps"] == 10
    assert step_time(tmp_path / "nowhere") is None


def _run(run_id: str, created: float, rewards: list[float], evals: list[tuple[int, float]], phases=False) -> None:
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps({"run_id": run_id, "status": "completed", "created_at": created, "total_steps": len(rewards)})
    )
    with open(folder / "metrics.jsonl", "w") as handle:
        for step, reward in enumerate(rewards, 1):
            row = _phase_row(step, 0.01, 0.09) if phases else {"step": step}
            handle.write(json.dumps({**row, "reward/mean": reward}) + "\n")
    with open(folder / "env_metrics.jsonl", "w") as handle:
        for step, value in evals:
            handle.write(json.dumps({"step": step, "eval/percent_correct": value}) + "\n")


def test_runs_show_eval_and_the_trailing_reward_and_sort_by_eval(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    now = time.time()
    _run("dddd0001", now - 30, [0.2] * 30 + [0.9], [(10, 0.96)])  # its last batch is lucky, its mean is not
    _run("dddd0002", now - 20, [0.5] * 30, [(10, 0.4)])
    _run("dddd0003", now - 10, [0.1] * 3, [])
    listed = {r["run_id"]: r for r in list_runs()}
    assert listed["dddd0001"]["reward"] == pytest.approx((0.2 * 19 + 0.9) / 20)
    assert listed["dddd0001"]["reward_mean"] == 0.9 and listed["dddd0001"]["reward_window"] == REWARD_WINDOW
    assert [r["run_id"] for r in sort_runs(list_runs(), "eval")] == ["dddd0001", "dddd0002", "dddd0003"]
    assert [r["run_id"] for r in sort_runs(list_runs(), "reward")] == ["dddd0002", "dddd0001", "dddd0003"]
    assert [r["run_id"] for r in sort_runs(list_runs())] == ["dddd0003", "dddd0002", "dddd0001"]
    assert main(["runs", "--sort", "eval"]) == 0
    out = capsys.readouterr().out
    assert "reward (mean of last 20)" in out and "eval" in out and "0.96" in out
    assert out.index("dddd0001") < out.index("dddd0002") < out.index("dddd0003")


def test_status_says_the_dominant_phase_and_the_plateau(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    _run("eeee0001", time.time(), [0.5] * 25, [(5, 0.5), (10, 0.9), (15, 0.9), (20, 0.9), (25, 0.9)], phases=True)
    assert main(["status", "eeee0001"]) == 0
    out = capsys.readouterr().out
    assert "step 0.10 s: 90% forward_backward" in out
    assert "eval flat for 3 evals since step 10" in out
    assert "(mean of last 20 steps)" in out
    assert main(["status", "eeee0001", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plateau"]["since_step"] == 10 and report["reward"]["window"] == REWARD_WINDOW
    assert eval_plateau(run_dir("eeee0001"), evals=5) is None


def test_the_trainer_stops_on_a_plateau_only_when_asked(tmp_path):
    from hermes_rl.dataplane.trainer.loop import Trainer

    path = tmp_path / "env_metrics.jsonl"
    trainer = Trainer(SimpleNamespace(stop_on_plateau=2, env_metrics_path=path, run_dir=tmp_path))
    assert trainer.eval_plateau() is None  # no file yet
    with open(path, "w") as handle:
        for step, value in ((4, 0.3), (8, 0.8)):
            handle.write(json.dumps({"step": step, "eval/percent_correct": value}) + "\n")
    assert trainer.eval_plateau() is None
    with open(path, "a") as handle:
        handle.write(json.dumps({"step": 10, "train/percent_correct": 0.7}) + "\n")  # not an eval
        for step in (12, 16):
            handle.write(json.dumps({"step": step, "eval/percent_correct": 0.8}) + "\n")
    flat = trainer.eval_plateau()
    assert flat["since_step"] == 8
    assert trainer.finish_reason() is None  # not stopped yet: the run's reason stays "trainer finished"
    trainer.stopped_on_plateau = {**flat, "step": 16}
    assert trainer.finish_reason() == f"stopped early at step 16: {flat['text']} (stop_on_plateau)"
    assert Trainer(SimpleNamespace(stop_on_plateau=0, env_metrics_path=path, run_dir=tmp_path)).eval_plateau() is None


def test_stop_on_plateau_is_an_editable_setting_that_reaches_the_trainer(tmp_path):
    from hermes_rl.core.envs.discovery import find_environment
    from hermes_rl.core.envs.drafts import resolve_run_values
    from hermes_rl.core.envs.profiles import get_profile
    from hermes_rl.core.runs.runconfig import build_run_config, run_config_yaml
    from hermes_rl.dataplane.trainer.settings import load_settings

    env, profile = find_environment("toy_addition"), get_profile("local")
    values = resolve_run_values(env, profile, {"stop_on_plateau": "4"})
    config = build_run_config(env, profile, values, {"api": 1, "inference": 2, "tinker": 3}, "ffff0001", seed=7)
    assert config["tinker"]["stop_on_plateau"] == 4 and config["tinker"]["seed"] == 7
    path = tmp_path / "config.yaml"
    path.write_text(run_config_yaml(config))
    settings = load_settings(str(path))
    assert (settings.stop_on_plateau, settings.seed) == (4, 7)
    with pytest.raises(Exception, match="stop_on_plateau"):
        resolve_run_values(env, profile, {"stop_on_plateau": "-1"})
