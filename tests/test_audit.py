"""Is it learning, and if not, why: the trainer's per-step signals (dataplane/trainer/signals.py) and the
audit's verdict on them (core/base/audit_rule.py), on synthetic rows and /batch payloads."""

from __future__ import annotations

import json
import time

import pytest

from hermes_rl.core.base.audit_rule import audit, audit_lines
from hermes_rl.core.daemons.run_audit import audit_run_dir
from hermes_rl.dataplane.trainer.signals import SignalTracker


def _row(step: int, reward: float, **signals) -> dict:
    base = {
        "step": step,
        "reward/mean": reward,
        "batch/groups": 4,
        "batch/sequences": 32,
        "advantages/std": 0.3,
        "signals/groups_zero_variance": 0,
        "signals/batch_fill": 1.0,
        "signals/truncated_share": 0.0,
        "signals/completion_tokens_mean": 5.0,
        "signals/entropy": 0.8,
    }
    return {**base, **{f"signals/{k}": v for k, v in signals.items()}}


def _run(rewards, **signals) -> list[dict]:
    return [_row(i + 1, r, **signals) for i, r in enumerate(rewards)]


def _evals(*values, every: int = 10) -> list[dict]:
    return [{"step": i * every, "eval/percent_correct": v} for i, v in enumerate(values)]


def test_a_rising_reward_is_learning():
    rows = _run([0.2 + 0.02 * i for i in range(30)])
    result = audit(rows, rows, _evals(0.2, 0.5, 0.9), _evals(0.2, 0.5, 0.9))
    assert result["verdict"] == "learning", result
    assert "reward 0.29 → 0.69" in result["reasons"][0] and "greedy eval 0.20 → 0.90" in result["reasons"][0]


def test_a_flat_reward_is_flat_and_says_what_to_try():
    rows = _run([0.3, 0.32, 0.29, 0.31] * 6)
    result = audit(rows, rows)
    assert result["verdict"] == "flat"
    assert "is flat" in result["reasons"][0] and "learning_rate" in result["reasons"][0]


def test_too_few_steps_is_unknown():
    rows = _run([0.1, 0.5])
    assert audit(rows, rows)["verdict"] == "unknown"
    assert audit([], [])["verdict"] == "unknown"
    assert audit([], [])["signals"]["zero_variance_share"] is None


def test_groups_that_all_score_alike_are_no_signal_with_the_numbers():
    rows = _run([0.0] * 12, groups_zero_variance=4)
    result = audit(rows, rows)
    assert result["verdict"] == "no_signal"
    assert result["signals"]["zero_variance_share"] == 1.0
    assert result["reasons"][0].startswith("100 % of 40 groups scored alike")
    assert "every answer is wrong" in result["reasons"][0] and "easier task" in result["reasons"][0]


def test_groups_the_environment_dropped_for_scoring_alike_are_no_signal_before_any_step():
    result = audit([], [], dropped={"same_scores": 7})
    assert result["verdict"] == "no_signal"
    assert result["signals"]["groups_dropped_same_scores"] == 7
    assert "(7 dropped by the environment for it)" in result["reasons"][0]
    # one dropped group is not yet a pattern
    assert audit([], [], dropped={"same_scores": 1})["verdict"] == "unknown"


def test_a_run_whose_groups_mostly_teach_nothing_is_warned_about_but_can_still_learn():
    rows = _run([0.1 + 0.03 * i for i in range(20)], groups_zero_variance=3)
    result = audit(rows, rows)
    assert result["verdict"] == "learning"
    assert any(r.startswith("75 % of groups scored alike") for r in result["reasons"])


def test_truncated_completions_are_suspect():
    rows = _run([0.2 + 0.01 * i for i in range(12)], truncated_share=0.8, completion_tokens_mean=64.0)
    result = audit(rows, rows)
    assert result["verdict"] == "suspect"
    assert result["signals"]["truncated_share"] == pytest.approx(0.8)
    assert any("80 % of completions end at the token limit" in r for r in result["reasons"])


def test_groups_alike_because_every_completion_is_cut_say_so():
    rows = _run([0.0] * 12, groups_zero_variance=4, truncated_share=1.0, completion_tokens_mean=1.0)
    result = audit(rows, rows)
    assert result["verdict"] == "no_signal"
    assert (
        "100 % of completions are cut at the token limit (1.0 tokens on average) before they can answer"
        in result["reasons"][0]
    )


def test_completions_growing_past_twice_their_first_length_are_suspect():
    rows = [_row(i + 1, 0.2 + 0.02 * i, completion_tokens_mean=10.0 + 3 * i) for i in range(20)]
    result = audit(rows, rows)
    assert result["verdict"] == "suspect"
    assert result["signals"]["length_drift"] > 2
    assert any("completions grew" in r for r in result["reasons"])


def test_one_reward_part_carrying_the_reward_while_eval_falls_is_suspect():
    """README's SmolLM2 demo: reward 0.04 → 0.25 from the partial credit while greedy eval falls 0.04 → 0."""
    rows = _run([0.04 + 0.01 * i for i in range(22)])
    env = [{"step": i, "reward/wordy": 0.22, "reward/exact": 0.01} for i in range(20)] + _evals(0.04, 0.02, 0.0)
    result = audit(rows, rows, env, env)
    assert result["verdict"] == "suspect", result
    assert result["signals"]["reward_components"] == {"wordy": 0.22, "exact": 0.01}
    reasons = " ".join(result["reasons"])
    assert "reward rose 0.08 → 0.20 while greedy eval fell 0.04 → 0.00" in reasons
    assert "reward part 'wordy' carries 96 % of the reward" in reasons


def test_a_dominant_reward_part_that_eval_follows_is_fine():
    rows = _run([0.2 + 0.02 * i for i in range(22)])
    env = [{"step": i, "reward/exact": 0.6, "reward/near_miss": 0.05} for i in range(20)] + _evals(0.2, 0.6)
    result = audit(rows, rows, env, env)
    assert result["verdict"] == "learning"
    assert any("greedy eval follows" in r for r in result["reasons"])


def test_entropy_collapse_without_a_reward_gain_is_suspect():
    rows = [_row(i + 1, 0.3, entropy=0.9 if i < 3 else 0.02) for i in range(15)]
    result = audit(rows, rows)
    assert result["verdict"] == "suspect"
    assert any("entropy collapsed 0.900 → 0.020" in r for r in result["reasons"])


def test_empty_batches_are_no_signal_and_old_rows_without_signals_still_audit():
    old = [
        {"step": i + 1, "reward/mean": 0.0, "batch/groups": 2, "batch/groups_dropped": 2, "batch/sequences": 0}
        for i in range(8)
    ]
    result = audit(old, old)
    assert result["verdict"] == "no_signal"
    assert result["signals"]["empty_batches"] == 8


def test_the_audit_of_a_run_folder_reads_metrics_env_metrics_and_dropped_groups(tmp_path):
    rows = _run([0.0] * 3, groups_zero_variance=3)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "rew')
    (tmp_path / "env_metrics.jsonl").write_text(json.dumps({"step": 1, "reward/exact": 0.0}) + "\n")
    problem = {"message": "Scores are the same in a group, skipping...", "level": "warning", "count": 40}
    (tmp_path / "health.json").write_text(json.dumps({"processes": {"env": {"problems": [problem]}}}))
    result = audit_run_dir(tmp_path)
    assert result["verdict"] == "no_signal"
    assert result["signals"]["steps"] == 3 and result["signals"]["groups_dropped_same_scores"] == 40
    assert result["signals"]["zero_variance_share"] == pytest.approx(
        49 / 52, abs=1e-4
    )  # of 12 trained groups 9 alike, + 40 dropped
    lines = audit_lines(result)
    assert lines[0].startswith("audit: no_signal  (groups alike 94 % · truncated 0 % · 5.0 tokens")
    assert audit_run_dir(tmp_path / "missing")["verdict"] == "unknown"


# -- the trainer's per-step signals -------------------------------------------------------------------


class _Served:
    """What the trainer's inference server remembers of the completions it served."""

    def __init__(self, known: dict[tuple[int, ...], tuple[str, int]]):
        self.known = known

    def __call__(self, tokens):
        return self.known.get(tuple(tokens), (None, None))


def _group(completions, scores, prompt=(1, 2, 3)):
    tokens = [list(prompt) + list(c) for c in completions]
    masks = [[-100] * len(prompt) + list(c) for c in completions]
    logprobs = [[1.0] * len(prompt) + [-0.5] * len(c) for c in completions]
    return {"tokens": tokens, "masks": masks, "scores": scores, "inference_logprobs": logprobs}


def test_the_trainer_signals_of_a_batch():
    served = _Served({(7, 8): ("stop", 4), (9, 9, 9, 9): ("length", 3), (5,): ("stop", 5)})
    tracker = SignalTracker(batch_size=8, sampled=served)
    batch = [
        _group([(7, 8), (9, 9, 9, 9)], [1.0, 0.0]),  # one right, one cut at the limit
        _group([(5,), (6, 6)], [0.0, 0.0]),  # both wrong: no signal
    ]
    row = tracker.row(batch, policy_version=5)
    assert row["signals/groups_zero_variance"] == 1 and row["signals/zero_variance_share"] == 0.5
    assert row["signals/completions"] == 4 and row["signals/batch_fill"] == 0.5  # a short batch
    assert row["signals/truncated_share"] == pytest.approx(1 / 3)  # of the three whose end is known
    assert row["signals/completion_tokens_mean"] == pytest.approx(9 / 4)
    assert row["signals/length_drift"] == pytest.approx(1.0)
    assert row["signals/entropy"] == pytest.approx(0.5)  # the sampled tokens' mean -logprob, prompt aside
    assert row["signals/advantage_abs_mean"] == pytest.approx(0.25)
    assert row["signals/staleness_mean"] == pytest.approx(1.0) and row["signals/staleness_max"] == 2
    longer = tracker.row([_group([(1,) * 9, (2,) * 9], [1.0, 0.0])], policy_version=6)
    assert longer["signals/length_drift"] == pytest.approx(9 / ((9 / 4 + 9) / 2))


def test_an_override_finish_reason_counts_without_the_server():
    group = _group([(7, 8)], [1.0])
    group["overrides"] = [{"finish_reason": "length"}]
    row = SignalTracker(batch_size=1).row([group], policy_version=0)
    assert row["signals/truncated_share"] == 1.0 and row["signals/staleness_mean"] is None


# -- the alert ------------------------------------------------------------------------------------------

_FLAT_TRAINER = """
import json, sys, time
rows = [{"step": i + 1, "reward/mean": 0.0, "batch/groups": 2, "batch/sequences": 0,
         "signals/groups_zero_variance": 2} for i in range(3)]
with open(sys.argv[1], "a") as handle:
    handle.write("".join(json.dumps(r) + "\\n" for r in rows))
time.sleep(3600)
"""


@pytest.mark.slow
def test_a_running_run_that_turns_no_signal_raises_the_audit_alert_once(specs, hermes_home):
    from hermes_rl.core import runs
    from tests.fixtures_core import PY, wait_status, wait_until
    from tests.test_alerts import Hook, write_rules

    hook = Hook()
    try:
        write_rules(hermes_home, f"webhook:\n  url: {hook.url}\nrules:\n  - on: audit\n")
        trainer = specs.ProcessSpec(
            name="trainer",
            argv=[PY, "-c", _FLAT_TRAINER, "{run_dir}/metrics.jsonl"],
            completes_run=True,
            completion_file="{run_dir}/done",
        )
        run = runs.launch([trainer], environment="toy", profile="local")
        wait_status(run["run_id"], ("running",))
        wait_until(lambda: hook.received, 30, what="the audit alert's post")
        time.sleep(12)  # another audit is taken: the same verdict is not told again
        events = hook.events()
        assert [e["event"] for e in events] == ["audit"]
        assert events[0]["verdict"] == "no_signal"
        assert events[0]["message"].startswith("audit no_signal: 100 % of 6 groups scored alike")
        runs.stop_run(run["run_id"])
    finally:
        hook.close()


# -- where it is shown ----------------------------------------------------------------------------------


def test_status_status_json_results_and_the_html_report_carry_the_audit(hermes_home, capsys):
    from hermes_rl.core.clients import cli, toolset
    from hermes_rl.core.runs import export
    from tests.fixtures_tui import write_run

    write_run("a1b2c3d4", status="completed", steps=40, total_steps=40)
    assert cli.main(["status", "a1b2c3d4", "--json"]) in (0, None)
    audit_json = json.loads(capsys.readouterr().out)["audit"]
    assert audit_json["verdict"] == "learning"
    assert set(audit_json) == {"verdict", "reasons", "signals"}
    assert {"zero_variance_share", "truncated_share", "mean_completion_tokens", "entropy", "reward_components"} <= set(
        audit_json["signals"]
    )
    assert cli.main(["status", "a1b2c3d4"]) in (0, None)
    text = capsys.readouterr().out
    assert (
        "audit: learning  (groups alike" in text
        and "over 40 steps reward 0.43 → 0.83, greedy eval 0.25 → 1.00 (8 evals): rose" in text
    )
    assert toolset.rl_get_results("a1b2c3d4")["audit"]["verdict"] == "learning"
    assert toolset.rl_check_status("a1b2c3d4")["audit"]["verdict"] == "learning"
    page = export.html_report("a1b2c3d4")
    assert "Audit: is it learning?" in page and '<span class="status">learning</span>' in page


# -- reasons that say what happened ----------------------------------------------------------------------


def test_a_process_that_fails_with_plain_words_puts_them_in_the_runs_reason(specs):
    """A model preparation that prints `cannot prepare smollm2: ...` and exits 2 (dataplane/models.py) no
    longer ends the run with only `model exited with code 2`."""
    from hermes_rl.core import runs
    from tests.fixtures_core import PY, wait_status

    said = "import sys; print('smollm2: downloading (10%)'); print('\\x1b[31mcannot prepare smollm2:\\x1b[0m "
    said += "the gguf package is missing: pip install gguf', file=sys.stderr); sys.exit(2)"
    model = specs.ProcessSpec(name="model", argv=[PY, "-c", said], required=False)
    run = runs.launch(
        [model, specs.sleeper("tinker", depends_on=[("model", "completed")])], environment="toy", profile="local"
    )
    run = wait_status(run["run_id"], "failed")
    assert run["reason"] == (
        "model exited with code 2: cannot prepare smollm2: the gguf package is missing: pip install gguf"
    )


def test_the_last_line_counts_only_as_a_message():
    from hermes_rl.core.base.failures import exit_failure_line, last_line

    assert last_line("step 1\nTraceback (most recent call last): simulated failure\n") is None
    assert last_line("error:\n    indented detail\n") is None
    assert last_line("") is None
    assert exit_failure_line("ValueError: bad\nbye\n") == "ValueError: bad"  # an exception line comes first
    assert exit_failure_line("loading\nno GPU found, giving up\n") == "no GPU found, giving up"
