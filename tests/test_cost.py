"""Cost (docs/cost.md): the dated price table and prices.yaml, the estimate before a run, token counting
and the budget stop on a real local run, and a sweep's totals."""

from __future__ import annotations

import json
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base import prices
from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import rl_dir, run_dir
from hermes_rl.core.clients.cli import main
from hermes_rl.core.runs import cost, sweeps


def write_prices(text: str) -> None:
    rl_dir().mkdir(parents=True, exist_ok=True)
    (rl_dir() / "prices.yaml").write_text(text)


# -- prices ------------------------------------------------------------------------------------------


def test_builtin_prices_are_tinkers_published_ones_with_their_date():
    price = prices.lookup("Qwen/Qwen3-8B")
    assert (price.prefill, price.sample, price.train) == (0.195, 0.60, 0.44)
    assert price.as_of == "2026-12-05" and "Tinker" in price.source
    small = prices.lookup("Qwen/Qwen3-4B-Instruct-2507")
    assert (small.prefill, small.sample, small.train) == (0.07, 0.22, 0.22)
    # a million tokens of each kind costs the three prices added up
    assert price.usd({"prefill": 1_000_000, "sample": 1_000_000, "train": 1_000_000}) == pytest.approx(1.235)


def test_a_model_without_a_price_is_unknown_never_a_guess():
    assert prices.lookup("meta-llama/Llama-3.1-8B") is None
    out = cost.cost_of("meta-llama/Llama-3.1-8B", {"prefill": 10, "sample": 10, "train": 10})
    assert out["usd"] is None and out["text"] == "price unknown" and out["prices_as_of"] is None
    assert cost.cost_of(None, None)["text"] == "no token counts"


def test_prices_yaml_overrides_the_table_and_star_matches_any_model():
    write_prices(
        'Qwen/Qwen3-8B: {prefill: 1, sample: 2, train: 3, as_of: "2027-01-01"}\n'
        "tiny-toy: {prefill: 100, sample: 300, train: 200}\n"
    )
    mine = prices.lookup("Qwen/Qwen3-8B")
    assert (mine.prefill, mine.sample, mine.train, mine.as_of) == (1, 2, 3, "2027-01-01")
    assert "prices.yaml" in mine.source
    # a local model folder matches by its name
    assert prices.lookup("/home/u/.hermes/rl/models/tiny-toy").prefill == 100
    assert prices.lookup("other/model") is None
    write_prices('"*": {prefill: 0.5, sample: 0.5, train: 0.5}\n')
    assert prices.lookup("other/model").train == 0.5
    assert prices.lookup("Qwen/Qwen3-8B").train == 0.5  # the user's "*" is the user's word for every model


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("m: {prefill: 1, sample: 2}\n", "m lacks train"),
        ("m: {prefill: one, sample: 2, train: 3}\n", "m.prefill must be a number"),
        ("m: {prefill: -1, sample: 2, train: 3}\n", "m.prefill must be a number"),
        ("m: {prefill: 1, sample: 2, train: 3, input: 4}\n", "unknown key(s) input"),
        ("- m\n", "must map model names"),
        ("m: 3\n", "m must be a mapping"),
        ("m: [1, 2\n", "not valid YAML"),
    ],
)
def test_a_bad_prices_file_is_one_clear_error(text, words):
    write_prices(text)
    with pytest.raises(BadInput, match="prices.yaml") as caught:
        prices.lookup("m")
    assert words in str(caught.value)


# -- the estimate -------------------------------------------------------------------------------------


def test_the_estimate_of_a_tinker_run_of_100_steps_on_qwen3_8b():
    values = {"total_steps": 100, "batch_size": 128, "group_size": 16, "max_token_length": 2048}
    est = cost.estimate(
        {**values, "base_model": "Qwen/Qwen3-8B"}, prompt_tokens=200, completion_tokens=500, use_history=False
    )
    # per step: 8 groups' prompts prefilled, 128 completions sampled, 128 sequences trained
    assert est["per_step"] == {"prefill": 1600, "sample": 64000, "train": 89600}
    assert est["tokens"] == {"prefill": 160_000, "sample": 6_400_000, "train": 8_960_000}
    assert est["usd"] == pytest.approx((160_000 * 0.195 + 6_400_000 * 0.60 + 8_960_000 * 0.44) / 1e6)
    assert est["prices_as_of"] == "2026-12-05"
    assert any("prompts of 200 tokens (given)" in a for a in est["assumptions"])
    # nothing given: completions at max_token_length (an upper bound), said so
    rough = cost.estimate({**values, "base_model": "Qwen/Qwen3-8B"}, use_history=False)
    assert any("max_token_length: an upper bound" in a for a in rough["assumptions"])
    unknown = cost.estimate({**values, "base_model": "some/model"}, use_history=False)
    assert unknown["usd"] is None and unknown["text"] == "price unknown"
    assert any("no price for some/model" in a for a in unknown["assumptions"])


# -- sweeps -------------------------------------------------------------------------------------------


def _run_with_tokens(run_id: str, status: str, model: str, totals: dict | None, steps: int = 4) -> None:
    """A run folder as the trainer leaves it: run.json, config.yaml and metric rows with token totals."""
    folder = run_dir(run_id)
    folder.mkdir(parents=True)
    record = {"run_id": run_id, "status": status, "profile": "local", "backend": "local", "created_at": time.time()}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(f"tinker: {{base_model: {model}}}\nenv: {{batch_size: 8}}\n")
    with open(folder / "metrics.jsonl", "w") as handle:
        for step in range(1, steps + 1):
            row = {"step": step, "reward/mean": 0.5}
            if totals:
                row.update({f"tokens/{k}_total": v * step // steps for k, v in totals.items()})
            handle.write(json.dumps(row) + "\n")


def _sweep(sweep_id: str, members: list[tuple[int, str | None]], budget: float | None = None) -> None:
    record = {
        "sweep_id": sweep_id,
        "created_at": time.time(),
        "environment": "toy_addition",
        "profile": "local",
        "backend": "local",
        "grid": {"learning_rate": ["1e-4", "3e-4"]},
        "seeds": None,
        "members": [
            {
                "index": i,
                "config_index": config,
                "config": {"learning_rate": ["1e-4", "3e-4"][config]},
                "seed": None,
                "state": "started" if run_id else "queued",
                "run_id": run_id,
                "error": None,
                "started_at": None,
            }
            for i, (config, run_id) in enumerate(members)
        ],
    }
    if budget is not None:
        record["budget_usd"] = budget
    folder = sweeps.sweeps_dir() / sweep_id
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps(record))


def test_a_sweep_totals_its_runs_cost_per_configuration_and_in_all(capsys, monkeypatch):
    write_prices("tiny-toy: {prefill: 1000, sample: 1000, train: 1000}\n")
    _run_with_tokens("cccc0001", "completed", "/m/tiny-toy", {"prefill": 100, "sample": 200, "train": 700})
    _run_with_tokens("cccc0002", "completed", "/m/tiny-toy", {"prefill": 1000, "sample": 0, "train": 1000})
    _run_with_tokens("cccc0003", "completed", "/m/tiny-toy", {"prefill": 0, "sample": 0, "train": 500})
    _sweep("0123abce", [(0, "cccc0001"), (0, "cccc0002"), (1, "cccc0003")])
    status = sweeps.sweep_status("0123abce")
    first, second = status["summary"]
    assert first["cost"]["usd"] == pytest.approx(1.0 + 2.0) and first["cost"]["runs"] == 2
    assert first["cost"]["tokens"] == {"prefill": 1100, "sample": 200, "train": 1700}
    assert second["cost"]["usd"] == pytest.approx(0.5)
    assert status["cost"]["usd"] == pytest.approx(3.5) and status["cost"]["text"] == "$3.50"
    monkeypatch.setenv("COLUMNS", "220")
    assert main(["sweep", "show", "0123abce"]) == 0
    out = capsys.readouterr().out
    assert "$3.00" in out and "$0.5000" in out and "cost: $3.50" in out
    assert main(["compare", "cccc0001", "cccc0003"]) == 0
    assert "$1.00" in capsys.readouterr().out
    # one run of a model without a price: the total is unknown, its tokens still add up
    _run_with_tokens("cccc0004", "completed", "other/model", {"prefill": 1, "sample": 1, "train": 1})
    _sweep("0123abcf", [(0, "cccc0001"), (1, "cccc0004")])
    status = sweeps.sweep_status("0123abcf")
    assert status["cost"]["usd"] is None and status["cost"]["text"] == "price unknown"
    assert status["cost"]["tokens"]["train"] == 701


def test_a_sweeps_budget_is_shared_by_its_runs_as_they_start():
    write_prices("tiny-toy: {prefill: 1000, sample: 1000, train: 1000}\n")
    # one run ended having spent $1 of the sweep's $4: the 3 runs left share the other $3
    _run_with_tokens("dddd0001", "completed", "/m/tiny-toy", {"prefill": 0, "sample": 0, "train": 1000})
    _sweep("0123abd0", [(0, "dddd0001"), (0, None), (1, None), (1, None)], budget=4.0)
    sweep = sweeps.read_sweep("0123abd0")
    assert sweeps.member_budget(sweep, sweep["members"][1]) == pytest.approx(1.0)
    _run_with_tokens("dddd0002", "completed", "/m/tiny-toy", {"prefill": 0, "sample": 0, "train": 4000})
    _sweep("0123abd1", [(0, "dddd0002"), (1, None)], budget=4.0)
    spent = sweeps.read_sweep("0123abd1")
    with pytest.raises(Exception, match="the sweep's budget is spent"):
        sweeps.member_budget(spent, spent["members"][1])
    with pytest.raises(BadInput, match="not both"):
        sweeps.check_sweep_budget(2.0, {"budget_usd": ["1"]})


# -- a real local run ---------------------------------------------------------------------------------


@pytest.mark.timeout(420)
def test_a_local_run_counts_its_tokens_and_stops_at_its_budget(tiny_model_dir, capsys, monkeypatch):
    """The trainer counts what passes (prompts and completions through its inference server, sequences
    through forward_backward); at a user's price for the local model, a small budget stops the run
    within seconds, completed, with its checkpoint, the reason, and an alert at 80 %."""
    from tests.fixtures_model import use_tiny_model
    from tests.test_e2e_local import wait_final

    use_tiny_model(tiny_model_dir, total_steps=60)
    write_prices('tiny-toy: {prefill: 100, sample: 300, train: 200, as_of: "2026-12-05"}\n')
    monkeypatch.setenv("COLUMNS", "220")
    # before: an estimate, nothing started
    assert main(["start", "--env", "toy_addition", "--profile", "local", "--estimate", "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["steps"] == 60 and estimate["usd"] > 0 and runs.list_runs() == []

    assert main(["start", "--env", "toy_addition", "--profile", "local", "--budget-usd", "0.3", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    final = wait_final(run_id, 360)
    assert final["status"] == "completed", final.get("reason")
    assert "budget reached: $" in final["reason"] and "of $0.30" in final["reason"]

    rows = read_jsonl(run_dir(run_id) / "metrics.jsonl")
    last = rows[-1]
    assert 1 <= last["step"] < 60  # stopped early, by the budget
    assert all(row["tokens/train"] > 0 for row in rows if row["batch/sequences"])  # each trained step counted
    for kind in ("prefill", "sample", "train"):
        assert sum(row[f"tokens/{kind}"] for row in rows) == last[f"tokens/{kind}_total"] > 0
    # every trained completion was sampled through the inference server first
    trained_completion_tokens = sum(row.get("train/completion_tokens") or 0 for row in rows)
    assert last["tokens/sample_total"] >= trained_completion_tokens
    assert last["usage/cpu_s"] > 0
    results = json.loads((run_dir(run_id) / "results.json").read_text())
    assert results["final_checkpoint"] and results["steps"] == last["step"]

    assert main(["status", run_id, "--json"]) == 0
    status_cost = json.loads(capsys.readouterr().out)["cost"]
    tokens = status_cost["tokens"]
    expected = (tokens["prefill"] * 100 + tokens["sample"] * 300 + tokens["train"] * 200) / 1e6
    assert status_cost["usd"] == pytest.approx(expected, abs=1e-6) and expected >= 0.3
    assert status_cost["prices_as_of"] == "2026-12-05"
    # the local server's own usage report, read by the trainer at the end of the run (dataplane.cloud_usage):
    # every trained token agrees; the server saw at least the sampling of the trainer's last row (the
    # environments may sample after it)
    cloud = status_cost["cloud"]
    assert cloud["source"] == "local" and cloud["tokens"]["train"] == tokens["train"], cloud
    assert cloud["tokens"]["prefill"] >= tokens["prefill"] and cloud["tokens"]["sample"] >= tokens["sample"]
    assert cloud["usd"] is None  # the local server has no rate card
    # stopped early: at the rate measured, what its 60 steps would have cost
    assert status_cost["projected"]["steps"] == 60 and status_cost["projected"]["usd"] > status_cost["usd"]
    assert main(["runs"]) == 0
    assert f"${expected:.4f}" in capsys.readouterr().out
    assert main(["results", run_id]) == 0
    assert f"cost ${expected:.4f} (prefill " in capsys.readouterr().out
    # the agent's estimate now uses this run's measured tokens per sequence; it starts nothing
    from hermes_rl.core.clients.toolset import call_tool

    agent = call_tool("rl_start_training", {"estimate": True})
    assert agent["usd"] > 0 and any(run_id in a for a in agent["assumptions"]), agent
    assert [r["run_id"] for r in runs.list_runs()] == [run_id]
    alerts = read_jsonl(run_dir(run_id) / "alerts.jsonl")
    assert any(a.get("event") == "budget" and a["value"] >= 0.8 for a in alerts), alerts


def test_a_budget_without_a_price_is_said_at_start():
    from hermes_rl.core.runs.start import budget_notice

    config = {"tinker": {"base_model": "some/model", "budget_usd": 5.0}, "hermes": {"price": None}}
    assert "some/model has no price: the budget stops nothing" in budget_notice(config)
    assert budget_notice({**config, "hermes": {"price": {"prefill": 1, "sample": 1, "train": 1}}}) is None
    assert budget_notice({"tinker": {"base_model": "m"}, "hermes": {"price": None}}) is None
