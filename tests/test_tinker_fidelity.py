"""Calls where the local Tinker server must answer as Tinker cloud does, through the unchanged `tinker`
SDK on the real tiny model: `RestClient.whoami()` (the JWT exchange), tinker-cookbook's download of a
training checkpoint (an age-encrypted external export), and the logprobs of sampling at a temperature
other than 1 (the untempered model's, equal to `compute_logprobs` and the learner's)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tinker_local_module):
    return tinker_local_module


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


def _toy_step(trainer) -> None:
    tokenizer = trainer.get_tokenizer()
    ids = tokenizer.encode("Q: 3+4=\nA: 7\n")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    trainer.forward_backward([datum], "cross_entropy").result(timeout=60)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)


def test_training_checkpoint_downloads_as_tinker_cookbook_asks(service, server, trainer, tmp_path):
    """tinker-cookbook 0.6.1's weights.download of tinker://RUN/weights/NAME, call for call: load the
    checkpoint into a new training run, export it age-encrypted to a fresh key, fetch the signed URLs,
    renew the TTL, download and decrypt, delete the export."""
    import urllib.request

    pyrage = pytest.importorskip("pyrage")
    from safetensors.numpy import load_file

    _toy_step(trainer)
    saved = trainer.save_state("trained").result(timeout=60).path
    identity = pyrage.x25519.Identity.generate()
    loaded = service.create_training_client_from_state(saved, user_metadata={"created_by": "test"}).result(timeout=60)
    export = loaded.save_weights_external(
        "download", ttl_seconds=3600, age_encryption_recipients=[str(identity.to_public())]
    ).result(timeout=60)
    rest = tinker.RestClient(base_url=server.url, api_key=server.api_key)
    urls = rest.get_external_weights_urls(export.path).result(timeout=30).urls
    assert sorted(urls) == ["adapter_config.json.age", "adapter_model.safetensors.age"]  # every file encrypted
    rest.set_checkpoint_ttl_from_tinker_path(export.path, 3600).result(timeout=30)
    for name, url in urls.items():
        fetched = tmp_path / name
        urllib.request.urlretrieve(url, str(fetched))
        pyrage.decrypt_file(str(fetched), str(tmp_path / name.removesuffix(".age")), [identity])
    rest.delete_checkpoint_from_tinker_path(export.path).result(timeout=30)
    # The decrypted adapter is the trained one: it equals a plain export of the same weights.
    plain = trainer.save_weights_external("plain").result(timeout=60).path
    plain_file = rest.get_external_weights_urls(plain).result(timeout=30).urls["adapter_model.safetensors"]
    expected = load_file(plain_file[len("file://") :])
    got = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert set(got) == set(expected) and all(np.array_equal(got[k], expected[k]) for k in got)
    assert '"peft_type": "LORA"' in (tmp_path / "adapter_config.json").read_text()
    # Another key cannot read the export, and the encrypted export is not loadable here.
    with pytest.raises(pyrage.DecryptError):
        pyrage.decrypt_file(
            str(tmp_path / "adapter_model.safetensors.age"), str(tmp_path / "x"), [pyrage.x25519.Identity.generate()]
        )
    with pytest.raises(tinker.RequestFailedError, match="not an age X25519 recipient"):
        loaded.save_weights_external("bad", age_encryption_recipients=["age1xyz"]).result(timeout=60)


def test_tinker_cookbook_weights_download(service, server, trainer, tmp_path):
    """The cookbook itself, where it is importable (it is not a dependency: its own pins downgrade
    transformers; `pip install --no-deps tinker-cookbook` is enough for its weights module)."""
    weights = pytest.importorskip("tinker_cookbook.weights")
    _toy_step(trainer)
    saved = trainer.save_state("for-cookbook").result(timeout=60).path
    out = weights.download(tinker_path=saved, output_dir=str(tmp_path / "adapter"), base_url=server.url)
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert out == str(tmp_path / "adapter")


def _learner_logprobs(trainer, prompt: list[int], completion: list[int]) -> np.ndarray:
    """The training forward pass's logprobs of `completion` after `prompt` (what an importance ratio's
    numerator is)."""
    ids = prompt + completion
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    out = trainer.forward([datum], "cross_entropy").result(timeout=60)
    return out.loss_fn_outputs[0]["logprobs"].to_numpy()[len(prompt) - 1 :]


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_importance_ratio_is_one_on_policy_at_any_temperature(trainer, temperature):
    """Sampled logprobs are the untempered model's: equal to compute_logprobs and to the learner's,
    so the ratio exp(learner - sampler) is 1 on-policy (it was exp(0.51) per token at T = 0.5)."""
    _toy_step(trainer)
    tokenizer = trainer.get_tokenizer()
    prompt = tokenizer.encode("Q: 3+4=\nA:")
    sampler = trainer.save_weights_and_get_sampling_client().result(timeout=60)
    params = types.SamplingParams(max_tokens=8, temperature=temperature, seed=3)
    sampled = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result(timeout=60).sequences
    assert any(seq.tokens for seq in sampled)
    for seq in sampled:
        behaviour = np.array(seq.logprobs)
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + list(seq.tokens))).result(timeout=60)
        np.testing.assert_allclose(behaviour, np.array(scored[len(prompt) :], dtype=float), atol=1e-4)
        ratio = np.exp(_learner_logprobs(trainer, prompt, list(seq.tokens)) - behaviour)
        np.testing.assert_allclose(ratio, 1.0, atol=1e-3)


def test_trainer_policy_rescored_logprobs_give_ratio_one(trainer):
    """The trainer's inference server with rescore_tempered (what it does against Tinker cloud, whose
    sampler may report tempered logprobs): the logprobs an environment gets back give ratio 1."""
    import asyncio

    from hermes_rl.dataplane.trainer.inference import Policy

    _toy_step(trainer)
    tokenizer = trainer.get_tokenizer()
    prompt = tokenizer.encode("Q: 1+2=\nA:")
    policy = Policy(tokenizer, "tiny", rescore_tempered=True)
    policy.set_client(trainer.save_weights_and_get_sampling_client().result(timeout=60), 1)
    samples = asyncio.run(policy.sample(prompt, 3, {"temperature": 0.5, "max_tokens": 6, "seed": 5}))
    for sample in samples:
        ratio = np.exp(_learner_logprobs(trainer, prompt, sample["tokens"]) - np.array(sample["logprobs"]))
        np.testing.assert_allclose(ratio, 1.0, atol=1e-3)
