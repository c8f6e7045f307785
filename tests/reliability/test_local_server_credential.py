"""The local Tinker server knows its clients: any local user can reach a loopback port, so every
request but /healthz must carry the credential the server was started with (TINKER_LOCAL_API_KEY, sent
as X-API-Key, what the tinker SDK does with its TINKER_API_KEY), and every number is checked (a JSON
number, finite, in range) before it touches a model. A run's supervisor makes one credential per run
and hands it to the server and the trainer through their environment only."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import httpx
import psutil
import pytest
import tinker
from tinker import types

from hermes_rl.core.base.paths import hermes_home
from tests.fixtures_model import ROOT, start_tinker_local
from tests.reliability.helpers import all_files, assert_no_orphans, run_processes, start_local_run, wait_for

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    with start_tinker_local(tiny_model_dir, tmp_path_factory.mktemp("tinker") / "checkpoints") as running:
        yield running


@pytest.fixture
def service(server, monkeypatch):
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    client = tinker.ServiceClient()
    yield client
    client.close("success").result(timeout=30)


def test_the_server_refuses_to_start_without_a_credential(tiny_model_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_LOCAL_API_KEY", "TINKER_API_KEY")}
    for key in (None, "tml-short", "not-a-tinker-key-but-long-enough-000"):
        argv = [sys.executable, "-m", "hermes_rl.dataplane.tinker_local", "--port", "0"]
        argv += ["--model-dir", str(tiny_model_dir), "--checkpoint-dir", str(tmp_path / "ck")]
        run_env = env if key is None else {**env, "TINKER_LOCAL_API_KEY": key}
        done = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=60)
        # once (one xdist worker, a full run) it exited 2 with nothing on stderr: show what its environment held
        shown = {k: ("…" if "KEY" in k else v) for k, v in run_env.items() if k.startswith(("TINKER", "HERMES", "PY"))}
        assert done.returncode == 2 and "TINKER_LOCAL_API_KEY" in done.stderr, (key, done.stderr, shown)
        assert key is None or key not in done.stderr  # the value is never logged


def test_a_bad_thread_count_is_refused_at_start_naming_it(tiny_model_dir, tmp_path):
    argv = [sys.executable, "-m", "hermes_rl.dataplane.tinker_local", "--port", "0"]
    argv += ["--model-dir", str(tiny_model_dir), "--checkpoint-dir", str(tmp_path / "ck")]
    env = {**os.environ, "TINKER_LOCAL_API_KEY": "tml-" + "0" * 32}
    for extra, variable, expected in (
        ([], "many", "TINKER_LOCAL_THREADS='many' is not a number"),
        ([], "-2", "TINKER_LOCAL_THREADS"),
        (["--threads", "-1"], "", "--threads -1"),
    ):
        done = subprocess.run(
            argv + extra,
            cwd=ROOT,
            env={**env, "TINKER_LOCAL_THREADS": variable},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and expected in done.stderr, (extra, variable, done.stderr)


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/api/v1/create_session"),
        ("POST", "/api/v1/optim_step"),
        ("POST", "/api/v1/load_weights"),
        ("POST", "/api/v1/forward_backward"),
        ("GET", "/api/v1/training_runs"),
        ("DELETE", "/api/v1/training_runs/m/checkpoints/weights/final"),
    ],
)
def test_requests_without_the_credential_are_refused(server, method, path):
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for headers in ({}, {"X-API-Key": "tml-local-" + "0" * 32}, {"Authorization": f"Bearer {server.api_key}"}):
            answer = http.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (path, headers, answer.text)
            assert answer.headers.get("x-should-retry") == "false"
        assert http.get("/healthz").status_code == 200  # readiness probes need no credential


def test_numbers_are_checked_before_the_model_sees_them(server, service):
    client = service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=3).result(timeout=60)
    tokenizer = client.get_tokenizer()
    ids = tokenizer.encode("Q: 3+4=\nA: 7\n")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    headers = {"X-API-Key": server.api_key, "content-type": "application/json"}
    hostile = [
        '{"learning_rate": NaN}',
        '{"learning_rate": Infinity}',
        '{"learning_rate": -Infinity}',
        '{"learning_rate": 1e999}',
        '{"learning_rate": 1e300}',
        '{"learning_rate": -0.1}',
        '{"learning_rate": true}',
        '{"learning_rate": "0.001"}',
        '{"learning_rate": 0.001, "beta1": 1.0}',
        '{"learning_rate": 0.001, "eps": NaN}',
    ]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for adam in hostile:
            client.forward_backward([datum], "cross_entropy").result(timeout=60)
            body = f'{{"model_id": "{client.model_id}", "adam_params": {adam}}}'
            answer = http.post("/api/v1/optim_step", content=body, headers=headers)
            if answer.status_code == 200:  # queued: its result must be the refusal
                answer = http.post("/api/v1/retrieve_future", json=answer.json(), headers=headers)
            assert "error" in answer.json(), (adam, answer.text)
        for sample in ('{"temperature": NaN}', '{"top_p": 0}', '{"max_tokens": -5}', '{"top_k": 1e999}'):
            body = f'{{"base_model": "{server.model_dir}", "prompt": {{"chunks": [{{"type": "encoded_text", '
            body += f'"tokens": {ids[:4]}}}]}}, "num_samples": 1, "sampling_params": {sample}}}'
            answer = http.post("/api/v1/asample", content=body, headers=headers)
            assert answer.status_code == 400 and "error" in answer.json(), (sample, answer.text)
    # Nothing reached the model: it still trains, with finite losses.
    out = client.forward_backward([datum], "cross_entropy").result(timeout=60)
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=60)
    after = client.forward_backward([datum], "cross_entropy").result(timeout=60)
    assert all(math.isfinite(v) for v in [*out.metrics.values(), *after.metrics.values()]), after.metrics


def _still_there(procs: list[psutil.Process]) -> list[tuple[dict, list[str]]]:
    """Each process's environment and command line, leaving out those that ended since they were listed
    (a run's processes start short-lived children of their own: W&B asks git about the folder)."""
    found = []
    for proc in procs:
        try:
            found.append((proc.environ(), proc.cmdline()))
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_makes_its_own_credential_and_passes_it_only_through_the_environment(tiny_model_dir):
    run = start_local_run(tiny_model_dir)
    run_id = run["run_id"]
    from hermes_rl.core import runs

    try:
        trainers = wait_for(lambda: run_processes(run, "trainer"), 120)
        servers = run_processes(run, "tinker")
        assert trainers and servers, runs.get_run(run_id, sample=False)
        keys = {env.get("TINKER_LOCAL_API_KEY") for env, _ in _still_there(trainers + servers)}
        assert len(keys) == 1 and None not in keys, "the server and the trainer share one credential"
        key = keys.pop()
        assert key.startswith("tml-") and len(key) >= 24
        assert key != os.environ.get("TINKER_LOCAL_API_KEY")
        for env, cmdline in _still_there(run_processes(run)):
            if env.get("HERMES_RL_PROCESS") not in ("trainer", "tinker"):
                assert "TINKER_LOCAL_API_KEY" not in env, cmdline
            assert key not in " ".join(cmdline)
        # The trainer is ready only once the local server took its credential (create_session onwards).
        assert wait_for(lambda: runs.get_run(run_id, sample=False)["status"] == "running", 300)
    finally:
        runs.stop_run(run_id, force=True)
    for path in all_files(hermes_home()):
        try:
            assert key.encode() not in path.read_bytes(), f"the credential is written in {path}"
        except OSError:
            continue
    for proc in psutil.process_iter():
        try:
            assert key not in " ".join(proc.cmdline())
        except psutil.Error:
            continue
    assert_no_orphans(runs.get_run(run_id, sample=False))
