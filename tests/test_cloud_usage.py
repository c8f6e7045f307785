"""Tinker's own usage report beside hermes-rl's count: the local server answers the billing usage API as
the official SDK's AdminClient reads it, dataplane.cloud_usage sums a run's sessions from it, and
`hermes-rl status` shows both and how they differ (docs/cost.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from hermes_rl.dataplane import cloud_usage  # noqa: E402

pytestmark = pytest.mark.timeout(180)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def used(tinker_local_module):
    """One session that trained on one batch and sampled once, with the tokens each of those carried."""
    server = tinker_local_module
    service = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
    trainer = service.create_lora_training_client(base_model=str(server.model_dir), rank=4).result(timeout=60)
    tokenizer = trainer.get_tokenizer()
    batch = []
    for a, b in [(3, 4), (1, 2)]:
        ids = tokenizer.encode(f"Q: {a}+{b}=\nA: {a + b}\n")
        batch.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
            )
        )
    trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
    sampler = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    prompt = tokenizer.encode("Q: 2+2=\nA:")
    out = sampler.sample(
        types.ModelInput.from_ints(prompt), 3, types.SamplingParams(max_tokens=5, temperature=1.0)
    ).result(timeout=60)
    expected = {
        "train": sum(d.model_input.length for d in batch),
        "prefill": len(prompt),  # one request with num_samples=3 prefills its prompt once
        "sample": sum(len(seq.tokens) for seq in out.sequences),
    }
    session_id = trainer.holder.get_session_id()
    yield server, session_id, expected
    service.close("success").result(timeout=30)


def _hour_window() -> tuple[datetime, datetime]:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return now - timedelta(hours=1), now + timedelta(hours=1)


def test_the_sdk_admin_client_reads_the_local_servers_usage_per_session(used):
    server, session_id, expected = used
    admin = tinker.AdminClient(base_url=server.url, api_key=server.api_key)
    usage = admin.get_billing_usage(*_hour_window()).result(timeout=30)
    mine = [event for event in usage.data if event.session_id == session_id]
    counted = {kind: 0 for kind in expected}
    for event in mine:
        counted[cloud_usage.KIND_OF_EVENT[event.event_info.type]] += event.event_info.token_count
        assert event.base_model == str(server.model_dir) and event.estimated_cost_usd is None  # no rate card
        assert event.bucket_end - event.bucket_start == timedelta(hours=1)
    assert counted == expected
    assert session_id in usage.sessions and usage.cost_data_through is None
    # what Tinker cloud refuses, refused alike: a bound off the hour, a window over 14 days
    start, _end = _hour_window()
    with pytest.raises(tinker.BadRequestError, match="UTC hour"):
        admin.get_billing_usage(start + timedelta(minutes=5), start + timedelta(hours=2)).result(timeout=30)
    with pytest.raises(tinker.BadRequestError, match="14 days"):
        admin.get_billing_usage(start - timedelta(days=15), start).result(timeout=30)


def test_a_runs_usage_is_summed_from_its_sessions_and_written_for_status(used, tmp_path):
    server, session_id, expected = used
    run = tmp_path / "run"
    run.mkdir()
    cloud_usage.record_session(run, session_id, server.url, local=True)
    record = cloud_usage.check(run, base_url=server.url, api_key=server.api_key)
    assert record["tokens"] == expected and record["usd"] is None  # unpriced events: unknown, not $0
    assert record["source"] == "local" and record["sessions"] == [session_id]
    written = json.loads((run / "cloud_usage.json").read_text())
    assert written["tokens"] == expected
    assert "api_key" not in json.dumps(written) and server.api_key not in (run / "tinker_session.json").read_text()


def _cli(run, env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.cloud_usage", str(run), "--timeout", str(timeout_s)],
        env={**os.environ, "PYTHONPATH": ROOT, "TINKER_TELEMETRY": "0", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_key_no_key_or_no_server_is_one_clear_line(used, tmp_path):
    server, session_id, _expected = used
    run = tmp_path / "run"
    run.mkdir()
    cloud_usage.record_session(run, session_id, None, local=False)
    cases = [
        ({"TINKER_BASE_URL": server.url, "TINKER_API_KEY": "tml-" + "x" * 40}, "refused the usage request (401)", 20),
        ({"TINKER_BASE_URL": server.url, "TINKER_API_KEY": ""}, "TINKER_API_KEY is not set", 20),
        # nothing listens on port 9: the SDK would retry for ever; the check gives up at its timeout
        ({"TINKER_BASE_URL": "http://127.0.0.1:9", "TINKER_API_KEY": "tml-" + "x" * 40}, "127.0.0.1:9 did not", 2),
    ]
    for env, words, timeout_s in cases:
        done = _cli(run, env, timeout_s)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not (run / "cloud_usage.json").exists()


def test_status_shows_the_cloud_figure_beside_the_count_and_how_they_differ(tmp_path, capsys):
    """A run whose trainer counted 1.0k train tokens where Tinker reported 1.1k: the difference is said,
    with the lag; unknown cloud USD is not compared."""
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.clients.cli import main
    from tests.test_cost import _run_with_tokens

    _run_with_tokens("c10d0001", "completed", "Qwen/Qwen3-8B", {"prefill": 100, "sample": 200, "train": 1000})
    report = {"checked_at": time.time(), "tokens": {"prefill": 100, "sample": 200, "train": 1100}, "usd": None}
    atomic_write_json(run_dir("c10d0001") / "cloud_usage.json", {**report, "source": "cloud"})
    assert main(["status", "c10d0001", "--json"]) == 0
    cloud = json.loads(capsys.readouterr().out)["cost"]["cloud"]
    assert cloud["tokens"]["train"] == 1100 and cloud["usd"] is None
    assert "train 1.1k vs 1.0k (+10.0 %)" in cloud["differs"] and "lags up to a few hours" in cloud["differs"]
    assert "prefill" not in cloud["differs"] and "$" not in cloud["differs"]
    assert main(["status", "c10d0001"]) == 0
    assert "Tinker cloud reports no USD estimate" in capsys.readouterr().out
    # the HTML report's cost card says the same, so a shared report carries Tinker's own figure
    from hermes_rl.core.runs.export import html_report

    page = html_report("c10d0001")
    assert "Tinker cloud reports no USD estimate" in page and "train 1.1k vs 1.0k (+10.0 %)" in page
    # the same counts on both sides: they agree
    atomic_write_json(
        run_dir("c10d0001") / "cloud_usage.json",
        {**report, "tokens": {"prefill": 100, "sample": 200, "train": 1000}, "source": "cloud"},
    )
    assert main(["status", "c10d0001", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"]["cloud"]["differs"] is None
    # `status --cloud` asks first; a run whose trainer recorded no session says so in one line
    assert main(["status", "c10d0001", "--cloud"]) != 0
    err = capsys.readouterr().err
    assert "tinker_session.json does not exist" in err and "Traceback" not in err, err


def test_numbers_read_right_an_ended_runs_projection_and_differences_worth_saying(tmp_path, capsys, monkeypatch):
    """A run its budget ended at step 10 of 400 is not projected as if it went on ("at this rate: … for 400
    steps") but says what all its steps would have cost; a count within 1 % of the report's agrees, and one
    that differs is never shown as "1.3k vs 1.3k"."""
    from hermes_rl.core.base.fsutil import atomic_write_json
    from hermes_rl.core.base.paths import run_dir
    from hermes_rl.core.clients.cli import main
    from tests.test_cost import _run_with_tokens, write_prices

    monkeypatch.setenv("COLUMNS", "220")
    write_prices('Qwen/Qwen3-8B: {prefill: 100, sample: 300, train: 200, as_of: "2026-12-05"}\n')
    _run_with_tokens("c10d0002", "completed", "Qwen/Qwen3-8B", {"prefill": 1300, "sample": 2000, "train": 90000}, 10)
    record = json.loads((run_dir("c10d0002") / "run.json").read_text())
    record.update(total_steps=400, reason="budget reached: $22.70 of $22.00 (stopped at step 10)")
    (run_dir("c10d0002") / "run.json").write_text(json.dumps(record))
    report = {"checked_at": time.time(), "tokens": {"prefill": 1320, "sample": 2010, "train": 91000}, "usd": None}
    atomic_write_json(run_dir("c10d0002") / "cloud_usage.json", {**report, "source": "cloud"})
    assert main(["status", "c10d0002"]) == 0
    out = capsys.readouterr().out
    assert "all 400 steps would have cost $" in out and "at this rate:" not in out, out
    differs = out.split("it differs:")[1]
    assert "prefill 1,320 vs 1,300 (+1.5 %)" in differs and "train 91.0k vs 90.0k (+1.1 %)" in differs, out
    assert "sample" not in differs  # +0.5 %: agrees
    assert main(["runs"]) == 0  # every list says its budget ended it, not plainly "completed"
    assert "completed (budget)" in capsys.readouterr().out
