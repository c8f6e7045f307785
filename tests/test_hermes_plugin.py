"""The Hermes Agent plugin: register(ctx) against recording contexts shaped like Hermes' PluginContext."""

from __future__ import annotations

import importlib
import json
import logging
from importlib.metadata import entry_points

import pytest

from hermes_rl.core.clients import hermes_plugin
from hermes_rl.core.clients.mcp_server import mcp_tools
from hermes_rl.core.clients.toolset import TOOL_SCHEMAS


class Hermes019Context:
    """PluginContext.register_tool as in hermes-agent 0.19: a fixed signature, unknown kwargs rejected."""

    def __init__(self):
        self.calls: list[dict] = []

    def register_tool(
        self,
        name: str,
        toolset: str,
        schema: dict,
        handler,
        check_fn=None,
        requires_env: list | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
    ) -> None:
        self.calls.append(
            dict(
                name=name,
                toolset=toolset,
                schema=schema,
                handler=handler,
                check_fn=check_fn,
                requires_env=requires_env,
                is_async=is_async,
                description=description,
                emoji=emoji,
            )
        )

    def definitions(self) -> list[dict]:
        # what Hermes' registry hands the model: {"type": "function", "function": {**schema, "name": name}}
        return [{"type": "function", "function": {**c["schema"], "name": c["name"]}} for c in self.calls]


class MinimalContext:
    """An older/smaller signature: anything beyond these four would be a TypeError."""

    def __init__(self):
        self.calls: list[tuple] = []

    def register_tool(self, name, toolset, schema, handler):
        self.calls.append((name, toolset, schema, handler))


class KwargsContext:
    def __init__(self):
        self.calls: list[dict] = []

    def register_tool(self, name, toolset, schema, handler, **extra):
        self.calls.append({"name": name, **extra})


def test_register_adds_the_ten_tools_in_toolset_rl():
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    assert [c["name"] for c in ctx.calls] == [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert {c["toolset"] for c in ctx.calls} == {"rl"}
    assert all(c["is_async"] is False and callable(c["check_fn"]) for c in ctx.calls)
    assert all(c["requires_env"] is None for c in ctx.calls)  # no key is required: the local backend needs none


def test_schema_parity_hermes_mcp_and_table():
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    assert ctx.definitions() == TOOL_SCHEMAS
    served = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.inputSchema}}
        for t in mcp_tools()
    ]
    assert served == TOOL_SCHEMAS


def test_only_accepted_keyword_arguments_are_passed():
    small = MinimalContext()
    hermes_plugin.register(small)  # a TypeError here would mean an unknown kwarg was passed
    assert len(small.calls) == 10
    loose = KwargsContext()
    hermes_plugin.register(loose)
    assert {"check_fn", "description", "emoji", "is_async"} <= set(loose.calls[0])


def test_handlers_take_args_and_context_and_return_json_text(hermes_home):
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    handlers = {c["name"]: c["handler"] for c in ctx.calls}
    out = handlers["rl_list_runs"]({}, task_id="t1", user_task="x")
    assert isinstance(out, str) and json.loads(out) == {"runs": [], "count": 0}
    err = json.loads(handlers["rl_check_status"]({"run_id": "../../x"}, task_id="t1"))
    assert "invalid run id" in err["error"] and "hint" in err
    assert "missing required argument" in json.loads(handlers["rl_get_results"]({}))["error"]
    assert "must be an object" in json.loads(handlers["rl_list_runs"](["not", "an", "object"]))["error"]


def test_check_fn_names_the_missing_keys(monkeypatch, hermes_home, caplog):
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    check = ctx.calls[0]["check_fn"]
    with caplog.at_level(logging.INFO, logger="hermes_rl.core.clients.hermes_plugin"):
        assert check() is True  # the tools work without keys (local backend)
    assert "TINKER_API_KEY" in caplog.text and "OPENROUTER_API_KEY" in caplog.text
    assert set(check.missing_keys()) == {"TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"}
    (hermes_home / ".env").write_text("TINKER_API_KEY=tml-abc123\n")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-xyz")
    assert set(check.missing_keys()) == {"WANDB_API_KEY"}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hermes_rl.core.clients.hermes_plugin"):
        check()
    assert "tml-abc123" not in caplog.text and "sk-or-xyz" not in caplog.text


def test_check_fn_is_false_with_the_reason_when_no_backend_can_run(monkeypatch, hermes_home, caplog):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    check = ctx.calls[0]["check_fn"]
    with caplog.at_level(logging.INFO, logger="hermes_rl.core.clients.hermes_plugin"):
        assert check() is False  # no key, and the local backend cannot import torch
    assert "torch not installed" in caplog.text and "hermes-rl[local]" in caplog.text
    (hermes_home / ".env").write_text("TINKER_API_KEY=tml-abc123\n")  # Tinker cloud needs no torch here
    assert check() is True


def test_entry_point_names_the_module():
    points = [e for e in entry_points(group="hermes_agent.plugins") if e.name == "rl"]
    assert points and points[0].value == "hermes_rl.core.clients.hermes_plugin"
    module = points[0].load()
    assert module is importlib.import_module("hermes_rl.core.clients.hermes_plugin") and callable(module.register)


def test_plugin_module_does_not_need_hermes_agent():
    with pytest.raises(ImportError):
        importlib.import_module("hermes_cli")
    importlib.reload(hermes_plugin)
