"""verifiers v1 tasksets beside Atropos environments (docs/verifiers.md): listed from their own interpreter
($HERMES_RL_ENV_PYTHON), configured from their TasksetConfig and EnvConfig, refused with one line when they
cannot train here, and trained end to end with verifiers running its own episodes (its Env, the null
harness's chat program, its subprocess runtime) against the run's endpoint, on the local profile: what only
verifiers' runtime does (a reward that takes the runtime, a metric, an intercept, a stop hook), every seat of
a two-seat Env, multi-turn, and mixed with an Atropos environment; vf-eval itself against a run's endpoint.
The tasksets are tests/data/vf_tasksets, pip-installed in a venv of their own (tests/fixtures_verifiers.py):
no hub, and no network once that venv and verifiers' chat program (uv's cache) exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.failures import ENDS_A_WORKER, exception_type, exit_failure_line
from hermes_rl.core.base.fsutil import read_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.envs import discovery, drafts, verifiers_envs
from hermes_rl.core.readers import rollouts
from hermes_rl.core.runs import report
from tests.fixtures_model import use_tiny_model
from tests.test_e2e_local import no_survivors, wait_final


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_rl.core.clients.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "250"},  # a wide table: rows are not elided
    )


def test_envs_lists_tasksets_beside_atropos_by_kind_with_fields_and_reasons(vf_env):
    listed = _cli("envs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows["toy_addition"]["kind"] == "atropos"
    digits = rows["hermes-vf-digits"]
    assert digits["kind"] == "verifiers" and digits["class_name"] == "DigitsTaskset"
    assert digits["description"].startswith("Repeat one digit") and digits["python"] == str(vf_env)
    assert digits["error"] is None and digits["refused"] is None
    assert rows["hermes-vf-guess"]["kind"] == "verifiers" and rows["hermes-vf-guess"]["error"] is None
    # a package that fails to import is listed with its reason, never a traceback
    assert "hermes_vf_no_such_module" in rows["hermes-vf-broken"]["error"]
    # an old-API package: one line naming the version needed
    assert "verifiers >= 0.4.0" in rows["hermes-vf-oldapi"]["error"]
    assert "container" in rows["hermes-vf-boxed"]["refused"]
    assert "external service" in rows["nemo_gym"]["refused"]
    # found by its module's imports though it declares no dependency on verifiers, under its own module name
    features = rows["hermes-vf-features-dist"]
    assert features["error"] is None and features["class_name"] == "FeaturesTaskset", features
    # an old-API package whose import fails under verifiers 0.4 (verifiers.envs is gone) is still old API
    assert "No module named" not in rows["hermes-vf-oldapi"]["error"]
    assert "not a taskset" in rows["hermes-vf-harness"]["error"]
    # a two-seat Env: its seats, and its own settings editable with their descriptions
    duel = drafts.get_config("hermes-vf-duel", "local")
    bonus = next(row for row in duel.editable if row["name"] == "bonus")
    assert bonus["type"] == "float" and "winner" in bonus["description"]

    # the table marks each row's kind
    table = _cli("envs")
    assert "verifiers" in table.stdout and "atropos" in table.stdout and "hermes-vf-digits" in table.stdout


def test_listing_is_cached_until_the_interpreter_changes(vf_env, monkeypatch):
    first = {e.id for e in discovery.discover_environments() if e.kind == "verifiers"}
    assert "hermes-vf-digits" in first
    verifiers_envs.clear_cache()  # memory only: the next process reads the disk cache, never the bridge

    def no_bridge(python):
        raise AssertionError("the bridge was asked again although nothing was installed")

    monkeypatch.setattr(verifiers_envs, "_ask", no_bridge)
    assert {e.id for e in discovery.discover_environments() if e.kind == "verifiers"} == first


def test_ids_did_you_mean_and_a_missing_interpreter(vf_env, monkeypatch):
    env = discovery.find_environment("hermes-vf-digits")
    assert env.kind == "verifiers" and env.python == str(vf_env)
    assert discovery.find_environment("hermes_vf_digits").id == "hermes-vf-digits"  # its module name
    with pytest.raises(NotFound) as missing:
        discovery.find_environment("hermes-vf-digit")
    assert "hermes-vf-digits" in missing.value.hint
    monkeypatch.setenv(verifiers_envs.ENV_PYTHON_VAR, "/nonexistent/bin/python")
    assert any("/nonexistent/bin/python" in n for n in discovery.discovery_notices())


def test_taskset_config_fields_are_typed_validated_and_saved(vf_env):
    view = drafts.get_config("hermes-vf-digits", "local")
    fields = {row["name"]: row for row in view.editable}
    assert fields["max_digit"]["type"] == "int" and fields["max_digit"]["default"] == 4
    assert fields["max_digit"]["maximum"] == 9
    assert fields["max_tokens"]["type"] == "int"
    with pytest.raises(BadInput, match="max_digit must be <= 9"):
        drafts.set_field("max_digit", 12, "hermes-vf-digits", "local")
    with pytest.raises(BadInput, match="unknown field"):
        drafts.set_field("max_digits", 3, "hermes-vf-digits", "local")
    drafts.set_field("max_digit", 7, "hermes-vf-digits", "local")
    values = drafts.resolve_run_values(discovery.find_environment("hermes-vf-digits"), _profile("local"))
    assert values["max_digit"] == 7


def _profile(name: str):
    from hermes_rl.core.envs.profiles import resolve_profile

    return resolve_profile(name)[0]


def test_start_refuses_sandboxed_old_api_and_broken_tasksets_in_one_line(vf_env):
    with pytest.raises(BadInput) as boxed:
        runs.start_run("hermes-vf-boxed", "local")
    assert "cannot train here" in boxed.value.message and "container" in boxed.value.message
    with pytest.raises(BadInput) as old:
        runs.start_run("hermes-vf-oldapi", "local")
    assert "verifiers >= 0.4.0" in old.value.message and "\n" not in old.value.message
    with pytest.raises(BadInput) as broken:
        runs.start_run("hermes-vf-broken", "local")
    assert "hermes_vf_no_such_module" in broken.value.message
    with pytest.raises(BadInput) as corpus:  # its tasks cannot be made here: said at start, with the reason
        runs.start_run("hermes-vf-corpus", "local")
    assert "cannot be made here" in corpus.value.message and "hermes-vf-words/words.txt" in corpus.value.message
    assert "corpus installed" in (corpus.value.hint or "")
    started = _cli("start", "--env", "hermes-vf-boxed", "--profile", "local")
    assert started.returncode != 0 and "Traceback" not in started.stderr
    assert not runs.list_runs()  # refused before anything started


@pytest.mark.timeout(420)
def test_verifiers_runs_its_own_episodes_and_vf_eval_runs_against_the_runs_endpoint(vf_env, tiny_model_dir):
    """A runtime reward, a metric, an intercept and a stop hook all run (the old bridge ran none of them), the
    trainer trains on what the endpoint sampled, and verifiers' own vf-eval evaluates the live policy."""
    use_tiny_model(tiny_model_dir, total_steps=200)
    overrides = {"group_size": 4, "batch_size": 8, "max_tokens": 6, "ensure_scores_are_not_same": False}
    run = runs.start_run("hermes-vf-features-dist", "local", overrides)
    folder = run_dir(run["run_id"])
    try:
        # vf-eval runs while the run trains: from the moment the trainer serves its policy
        _wait_for(lambda: report.status_report(run["run_id"])["endpoint_key_file"], 240, run["run_id"])
        status = report.status_report(run["run_id"])
        key_file = Path(status["endpoint_key_file"])  # as `status` tells a user: the key, in a private file
        assert key_file.stat().st_mode & 0o077 == 0
        key = key_file.read_text().strip()
        argv = [str(vf_env.parent / "vf-eval"), "hermes_vf_features", "-m", "policy", "-n", "2", "-r", "2"]
        argv += ["--no-push", "--client.base-url", status["endpoint"], "--client.api-key-var", "HERMES_RL_ENDPOINT_KEY"]
        argv += ["--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess"]
        argv += ["--sampling.max-tokens", "4", "-o", str(folder / "vf-eval")]
        evaluating = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PATH": f"{vf_env.parent}{os.pathsep}{os.environ['PATH']}"}
            | {"HERMES_RL_ENDPOINT_KEY": key},
        )
        _wait_for(lambda: len(read_jsonl(folder / "metrics.jsonl")) >= 2, 240, run["run_id"])
        out, err = evaluating.communicate(timeout=180)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(status["endpoint"] + "/models", timeout=30)
    finally:
        runs.stop_run(run["run_id"], wait=30)
    assert evaluating.returncode == 0, out[-2000:] + err[-2000:]
    assert refused.value.code == 401  # a client without the key gets nothing
    assert not key_file.exists()  # the key went with the endpoint
    # nowhere else: not in the run's config, state or any process's log
    assert not [p.name for p in folder.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    # vf-eval's own record: every rollout answered by the run's policy, none an error
    traces = [json.loads(line) for path in (folder / "vf-eval").rglob("traces.jsonl") for line in path.open()]
    assert traces and all(t.get("ok") for t in traces), traces[:1]
    env_rows = [r for r in read_jsonl(folder / "env_metrics.jsonl") if r.get("environment") == run["environment"]]
    assert env_rows and all("reward/marked_in_the_box" in r for r in env_rows), env_rows  # the runtime reward
    assert all(r["metric/marked"] == 1.0 for r in env_rows)  # the intercept rewrote every reply the trace holds
    assert all(r["verifiers/turns"] == 1.0 for r in env_rows)  # the stop hook ended each episode after a turn
    recorded = rollouts.read_rollouts(run["run_id"], step=1)
    assert recorded["completions"] and all("Say the digit" in c["prompt"] for c in recorded["completions"])
    # trained on what was sampled: the intercept's marks are in the trace, never in the trained tokens
    assert not any("[seen]" in c["text"] or "[right]" in c["text"] for c in recorded["completions"])
    assert no_survivors(runs.get_run(run["run_id"], sample=False))


def _wait_for(condition, timeout: float, run_id: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        run = runs.get_run(run_id, sample=False)
        assert run["status"] in ("starting", "running"), run.get("reason")
        time.sleep(1.0)
    raise AssertionError(f"run {run_id}: not in {timeout:g} s")


@pytest.mark.timeout(420)
def test_every_seat_of_a_two_seat_env_trains_and_a_seat_that_never_played_does_not(vf_env, tiny_model_dir):
    use_tiny_model(tiny_model_dir, total_steps=3)  # enough deals for a pool of the second seat's short ones
    overrides = {"group_size": 4, "batch_size": 8, "max_tokens": 4, "ensure_scores_are_not_same": False}
    run = runs.start_run("hermes-vf-duel", "local", overrides)
    final = wait_final(run["run_id"], 360)
    assert final["status"] == "completed", final.get("reason")
    folder = run_dir(run["run_id"])
    env_rows = [r for r in read_jsonl(folder / "env_metrics.jsonl") if r.get("environment") == "hermes-vf-duel"]
    assert any("seat/first/reward" in r for r in env_rows) and any("seat/second/reward" in r for r in env_rows)
    assert sum(r.get("seat/second/groups", 0) for r in env_rows) >= 1  # the log says which seats trained
    texts = [c["prompt"] for step in (1, 2) for c in rollouts.read_rollouts(run["run_id"], step=step)["completions"]]
    assert any("The other player said" in t for t in texts) and any("The other player" not in t for t in texts)
    # the second seat's hands it forfeited without a turn: counted in the env log, never trained
    log = open(final["logs"]["env"], encoding="utf-8").read()
    assert "seat second: an episode with no sampled tokens" in log
    # the deals where it played only some hands: pooled into groups of its own, not thrown away
    assert "seat second played only some hands of a deal: its hands are pooled" in log


def test_an_image_taskset_on_a_text_only_policy_is_refused_once_with_the_reason(vf_env, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "env": {"rollout_server_url": "http://127.0.0.1:9", "group_size": 2, "batch_size": 2}
                | {"total_steps": 1, "max_token_length": 256},
                "openai": [{"base_url": "http://127.0.0.1:9/v1", "model_name": "tiny"}],
            }
        )
    )
    bridge = [str(vf_env), verifiers_envs.bridge_path(), "serve", "--config", str(config)]
    refused = subprocess.run(bridge + ["--taskset", "hermes-vf-picture"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "VerifiersRefusedError" in refused.stderr and "prompts hold images" in refused.stderr, refused.stderr[-800:]
    assert exception_type(exit_failure_line(refused.stderr)) in ENDS_A_WORKER  # the supervisor does not restart it


@pytest.mark.timeout(420)
def test_a_multi_turn_taskset_trains_with_whole_episodes_in_rollouts(vf_env, tiny_model_dir):
    use_tiny_model(tiny_model_dir, total_steps=2)
    run = runs.start_run("hermes-vf-guess", "local", {"group_size": 4, "batch_size": 8, "max_tokens": 3})
    final = wait_final(run["run_id"], 360)
    assert final["status"] == "completed", final.get("reason")
    env_rows = [r for r in read_jsonl(run_dir(run["run_id"]) / "env_metrics.jsonl") if "verifiers/turns" in r]
    assert env_rows and max(r["verifiers/turns"] for r in env_rows) > 1.0, env_rows
    # an episode's later turns are in the recorded text: the environment's replies between the guesses
    texts = [c["text"] for step in (1, 2) for c in rollouts.read_rollouts(run["run_id"], step=step)["completions"]]
    assert any("Try" in text for text in texts), texts[:3]
    assert not any("Guess my number" in text for text in texts)  # the prompt is not repeated as a reply


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_an_atropos_environment_and_a_taskset_train_in_one_run(vf_env, tiny_model_dir):
    use_tiny_model(tiny_model_dir, total_steps=4)
    # the mixed-in taskset runs with its own draft; half of every batch is each one's
    drafts.set_fields({"group_size": 4, "batch_size": 8, "max_tokens": 6}, "hermes-vf-digits", "local")
    mix = {"environment": "hermes-vf-digits", "weight": 1.0, "min_batch_allocation": 0.5}
    run = runs.start_run(
        "toy_addition",
        "local",
        {"group_size": 4, "batch_size": 8},
        workers={"min_batch_allocation": 0.5, "environments": [mix]},
    )
    final = wait_final(run["run_id"], 360)
    assert final["status"] == "completed", final.get("reason")
    names = {p["name"] for p in final["processes"]}
    assert {"env", "env-hermes_vf_digits"} <= names, names
    for name, prompt in (("toy_addition", "+"), ("hermes-vf-digits", "Say the digit")):
        recorded = rollouts.read_rollouts(run["run_id"], environment=name)  # NotFound if it trained none
        assert all(prompt in c["prompt"] for c in recorded["completions"]), name
    env_rows = read_jsonl(run_dir(run["run_id"]) / "env_metrics.jsonl")
    assert any(r.get("environment") == "hermes-vf-digits" and "reward/exact" in r for r in env_rows)


@pytest.mark.timeout(420)
def test_a_taskset_whose_reward_raises_fails_the_run_with_the_reason(vf_env, tiny_model_dir):
    use_tiny_model(tiny_model_dir, total_steps=2)
    run = runs.start_run("hermes-vf-raises", "local", {"group_size": 2, "batch_size": 2, "max_tokens": 2})
    final = wait_final(run["run_id"], 360)
    assert final["status"] == "failed"
    # the worker's own verdict, once: a restart would fail the same way
    assert "VerifiersTasksetError" in final["reason"] and "not restarted" in final["reason"], final["reason"]
    logs = "".join(p.read_text(errors="replace") for p in run_dir(run["run_id"]).rglob("*.log"))
    assert "this reward always fails" in logs


def test_test_inference_of_a_taskset_runs_verifiers_episodes_against_the_server(vf_env, openai_stub, hermes_home):
    """test-inference (what `status` recommends for a stalled run) works for tasksets too: verifiers runs each
    episode against the server (streamed, as its chat program asks) and scores it."""
    from hermes_rl.core.runs.trial import InferenceTrial

    summary = InferenceTrial.prepare(
        2, 2, ["always-right"], openai_stub.base_url, env_name="hermes-vf-features-dist", timeout_s=240
    ).run()
    result = summary["models"][0]
    assert result["steps"] == 2 and result["completions"] == 4 and result["errors"] == [], result
    assert any(r["path"].endswith("/chat/completions") for r in openai_stub.answers.requests)


def test_a_listing_that_failed_is_asked_again_not_served_for_good(monkeypatch, hermes_home):
    answers = iter([{"ok": False, "error": "listing its tasksets took over 1 s"}, {"ok": True, "tasksets": []}])
    monkeypatch.setattr(verifiers_envs, "_ask", lambda python: next(answers))
    python = str(hermes_home / "venv" / "bin" / "python")  # an interpreter no other test's cache knows
    assert verifiers_envs.listing(python)["ok"] is False
    later = verifiers_envs.time.monotonic() + verifiers_envs.FAILURE_MEMO_S
    monkeypatch.setattr(verifiers_envs.time, "monotonic", lambda: later)
    assert verifiers_envs.listing(python)["ok"] is True  # asked again, not the failure cached
    verifiers_envs.clear_cache(python)
