"""Untrusted on the wire: which hosts get the OpenRouter key, and waits that are deadlines."""

from __future__ import annotations

import json

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.clients.toolset import call_tool
from hermes_rl.core.runs import trial
from tests.reliability.helpers import CORPUS

pytestmark = [pytest.mark.reliability]

ROUTER_KEY = "sk-or-v1-lookalike-0123456789abcdef"
URL_CASES = json.loads((CORPUS / "base_urls.json").read_text())["cases"]


@pytest.fixture
def router_key(hermes_home, monkeypatch):
    (hermes_home / ".env").write_text(f"OPENROUTER_API_KEY={ROUTER_KEY}\n")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return ROUTER_KEY


@pytest.mark.parametrize("url, expected", URL_CASES, ids=[c[0] for c in URL_CASES])
def test_only_openrouters_own_host_over_https_gets_the_key(url, expected, router_key):
    try:
        target = trial.resolve_target(["some/model"], trial._check_base_url(url))
    except BadInput as exc:
        assert expected == "refused", f"{url} refused: {exc}"
        return
    assert expected != "refused", f"{url} accepted as {target.kind}"
    if expected == "openrouter":
        assert target.kind == "openrouter" and target.key_name == "OPENROUTER_API_KEY"
    else:
        assert target.kind == "base_url" and target.key_name is None, target


@pytest.mark.timeout(180)
def test_a_look_alike_host_behind_a_proxy_never_sees_the_key(arith_env, openai_stub, router_key, monkeypatch):
    # The stub answers as an HTTP proxy would see it: absolute URLs, every header recorded.
    monkeypatch.setenv("HTTP_PROXY", openai_stub.base_url.rsplit("/v1", 1)[0])
    monkeypatch.setenv("http_proxy", openai_stub.base_url.rsplit("/v1", 1)[0])
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    out = call_tool(
        "rl_test_inference",
        {"num_steps": 1, "group_size": 2, "models": ["always-right"], "base_url": "http://evilopenrouter.ai/v1"},
    )
    assert out.get("target", {}).get("kind") == "base_url", out
    requests = openai_stub.requests
    assert requests and all("evilopenrouter.ai" in r["path"] for r in requests), requests
    assert not [r for r in requests if ROUTER_KEY in str(r["authorization"])]
