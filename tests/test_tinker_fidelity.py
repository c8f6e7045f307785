"""Calls where the local Tinker server must answer as Tinker cloud does, through the unchanged `tinker`
SDK on the real tiny model: `RestClient.whoami()` (the JWT exchange), tinker-cookbook's download of a
training checkpoint (an age-encrypted external export), and the logprobs of sampling at a temperature
other than 1 (the untempered model's, equal to `compute_logprobs` and the learner's)."""

from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

from tests.fixtures_model import start_tinker_local

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    with start_tinker_local(tiny_model_dir, tmp_path_factory.mktemp("tinker") / "checkpoints") as running:
        saved = {name: os.environ.get(name) for name in running.env()}
        os.environ.update(running.env())
        try:
            yield running
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def service(server):
    client = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
    yield client
    client.close("success").result(timeout=30)


@pytest.fixture
def trainer(service, server):
    return service.create_lora_training_client(base_model=str(server.model_dir), rank=8, seed=7).result(timeout=60)


def test_whoami_answers_the_local_principal(server):
    rest = tinker.RestClient(base_url=server.url, api_key=server.api_key)
    identity = rest.whoami().result(timeout=30)
    assert (identity.user_urn, identity.org_urn, identity.email) == ("tml:user:local", "tml:organization:local", None)
    # The rest of the client works on the exchanged JWT.
    assert rest.list_training_runs().result(timeout=30).training_runs is not None


def test_jwt_exchange_needs_the_api_key_and_expired_tokens_are_refused(server):
    from hermes_rl.dataplane.tinker_local.auth import Credential

    exchange = server.url + "/api/v1/auth/token"
    assert httpx.post(exchange, json={}, headers={"X-API-Key": "tml-" + "x" * 30}, timeout=30).status_code == 401
    jwt = httpx.post(exchange, json={}, headers={"X-API-Key": server.api_key}, timeout=30).json()["jwt"]
    runs = server.url + "/api/v1/training_runs"
    assert httpx.get(runs, headers={"X-API-Key": jwt}, timeout=30).status_code == 200
    # A JWT cannot mint another, so a leaked one dies within the hour.
    assert httpx.post(exchange, json={}, headers={"X-API-Key": jwt}, timeout=30).status_code == 401
    expired = Credential(server.api_key).mint(now=0)
    refused = httpx.get(runs, headers={"X-API-Key": expired}, timeout=30)
    assert refused.status_code == 401 and "invalid_token" in refused.headers["www-authenticate"]
    forged = Credential("tml-another-server-key-0123456789").mint()
    assert httpx.get(runs, headers={"X-API-Key": forged}, timeout=30).status_code == 401
