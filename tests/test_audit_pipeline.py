"""The audit on real local runs (run-api, the local Tinker server, the trainer, a toy environment): a run
whose groups all score alike says no_signal within a minute of its first dropped group, a run whose
completions hit the token limit is suspect, a run at a low temperature is told its samples are identical.
(That the default task learns and the audit says so is asserted on README's default run,
tests/test_e2e_local.py.) Each test prints the audit it saw (docs/audit.md quotes them)."""

from __future__ import annotations

import json
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.paths import run_dir
from tests.fixtures_model import use_tiny_model
from tests.test_e2e_local import wait_final
from tests.test_run_health import SAME_SCORES, _cli_status, _report, _write_env

pytestmark = [pytest.mark.slow]


def _wait_for_verdict(run_id: str, verdicts: tuple[str, ...], timeout: float = 300.0) -> dict:
    from hermes_rl.core.runs import report

    deadline = time.monotonic() + timeout
    status = {}
    while time.monotonic() < deadline:
        status = report.status_report(run_id)
        if status["audit"]["verdict"] in verdicts:
            return status
        assert status["status"] in ("starting", "running"), (status["status"], status["reason"], status["audit"])
        time.sleep(1.0)
    raise AssertionError(f"no {verdicts} verdict in {timeout} s: {status.get('audit')}")


def _first_dropped_at(run_id: str) -> float | None:
    try:
        record = json.loads((run_dir(run_id) / "health.json").read_text())
    except (OSError, ValueError):
        return None
    times = [
        p["first_at"]
        for observed in record.get("processes", {}).values()
        for p in observed.get("problems") or []
        if "Scores are the same" in p.get("message", "")
    ]
    return min(times) if times else None


@pytest.mark.timeout(600)
def test_a_run_whose_groups_all_score_alike_says_no_signal_within_a_minute(tiny_model_dir, run_cleanup, capsys):
    from hermes_rl.core.clients import toolset

    use_tiny_model(tiny_model_dir, total_steps=50)
    _write_env("same_scores_env", SAME_SCORES)
    run_id = runs.start_run("same_scores_env", "local", {"ensure_scores_are_not_same": True})["run_id"]
    run_cleanup.append(run_id)
    status = _wait_for_verdict(run_id, ("no_signal",))
    seen = time.time()
    dropped_at = _first_dropped_at(run_id)
    assert dropped_at is not None
    _report(f"\nno-signal run: first dropped group → no_signal {seen - dropped_at:.0f} s; audit {status['audit']}")
    assert seen - dropped_at <= 60
    audit = status["audit"]
    assert audit["signals"]["zero_variance_share"] == 1.0
    assert audit["signals"]["groups_dropped_same_scores"] >= 2
    assert "groups scored alike" in audit["reasons"][0] and "group_size" in audit["reasons"][0]
    assert set(audit["signals"]) >= {
        "zero_variance_share",
        "truncated_share",
        "mean_completion_tokens",
        "entropy",
        "reward_components",
    }
    cli = _cli_status(run_id, capsys)
    assert cli["audit"]["verdict"] == "no_signal"
    assert toolset.rl_check_status(run_id)["audit"]["verdict"] == "no_signal"


@pytest.mark.timeout(600)
def test_a_run_whose_completions_hit_the_token_limit_is_suspect(tiny_model_dir, run_cleanup):
    use_tiny_model(tiny_model_dir, total_steps=12)
    run_id = runs.start_run("toy_addition", "local", {"max_completion_tokens": 2})["run_id"]
    run_cleanup.append(run_id)
    final = wait_final(run_id, 400)
    assert final["status"] == "completed", final.get("reason")
    from hermes_rl.core.runs import report

    audit = report.results_summary(run_id)["audit"]
    _report(f"\ntruncating run: {audit}")
    rows = [json.loads(line) for line in (run_dir(run_id) / "metrics.jsonl").read_text().splitlines()]
    assert all(r["signals/truncated_share"] is not None for r in rows)
    assert audit["signals"]["truncated_share"] >= 0.5
    assert audit["signals"]["mean_completion_tokens"] == pytest.approx(2.0, abs=0.1)  # a reply may end at 1 token
    assert audit["verdict"] == "suspect"
    assert any("end at the token limit" in r for r in audit["reasons"])


@pytest.mark.timeout(600)
def test_a_run_at_a_low_temperature_is_told_its_samples_are_identical(tiny_model_dir, run_cleanup):
    """temperature 0.01: each group is one answer repeated, scored 0 — not a task too hard (toy_addition
    learns at 1.0). The environment records each group's expected answer, which the reason shows."""
    use_tiny_model(tiny_model_dir, total_steps=50)
    launched = time.time()
    run_id = runs.start_run("toy_addition", "local", {"temperature": 0.01})["run_id"]
    run_cleanup.append(run_id)
    status = _wait_for_verdict(run_id, ("no_signal",))
    _report(f"\nlow-temperature run: launch → no_signal {time.time() - launched:.0f} s; audit {status['audit']}")
    runs.stop_run(run_id)
    audit = status["audit"]
    assert "the samples are identical: 100 % of the last" in audit["reasons"][0], audit
    assert "raise temperature" in audit["reasons"][0] and "too hard" not in audit["reasons"][0]
    assert audit["signals"]["identical_share"] == 1.0 and audit["signals"]["entropy"] < 0.2
    example = audit["signals"]["example"]
    assert example["prompt"].startswith("Q: ") and example["expected"].isdigit()
