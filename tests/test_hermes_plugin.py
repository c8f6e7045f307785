"""The Hermes Agent plugin: register(ctx) against recording contexts shaped like Hermes' PluginContext."""

from __future__ import annotations

import importlib
import json
import logging
import re
import threading
import time
from importlib.metadata import entry_points

import pytest

from hermes_rl.core import runs
from hermes_rl.core.clients import hermes_plugin
from hermes_rl.core.clients.mcp_server import mcp_tools
from hermes_rl.core.clients.run_watch import watch_run
from hermes_rl.core.clients.toolset import SKILL_FILE, TOOL_NAMES, TOOL_SCHEMAS, TOOLS, skill_text
from tests.fixtures_core import lose_run
from tests.fixtures_toolset import completing_spec, crashing_spec, launch_run, sleeper_spec, wait_status


class EntryPointManifest:
    """The manifest Hermes 0.19 makes for an entry-point plugin: its name and nothing else."""

    def __init__(self, name: str = "rl"):
        self.name, self.key, self.source = name, name, "entrypoint"
        self.version = self.description = self.author = ""
        self.requires_env, self.provides_tools, self.provides_hooks = [], [], []


class Hermes019Context:
    """PluginContext as in hermes-agent 0.19: register_tool with a fixed signature (unknown kwargs
    rejected), register_hook, register_skill (the SKILL.md must exist), inject_message and the manifest."""

    def __init__(self, injects: bool = True):
        self.calls: list[dict] = []
        self.hooks: dict[str, list] = {}
        self.skills: dict[str, dict] = {}
        self.injected: list[str] = []
        self.injects = injects  # False: no CLI attached (gateway), as inject_message reports it
        self.manifest = EntryPointManifest()

    def register_hook(self, hook_name: str, callback) -> None:
        self.hooks.setdefault(hook_name, []).append(callback)

    def register_skill(self, name: str, path, description: str = "") -> None:
        if not path.exists():
            raise FileNotFoundError(f"SKILL.md not found at {path}")
        self.skills[f"{self.manifest.name}:{name}"] = {"path": path, "description": description}

    def inject_message(self, content: str, role: str = "user") -> bool:
        if self.injects:
            self.injected.append(content)
        return self.injects

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
    assert isinstance(out, str) and json.loads(out) == {"runs": [], "count": 0, "total": 0}
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


# -- manifest and skill ----------------------------------------------------------------------------


def test_manifest_fills_what_hermes_shows_for_an_entry_point_plugin():
    from importlib.metadata import version

    data = hermes_plugin.manifest()
    assert data["name"] == "rl" and data["version"] == version("hermes-rl")
    assert data["provides_tools"] == list(TOOL_NAMES)
    assert data["requires_env"] == []  # no key is needed: the local backend runs without any
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    # what `hermes tools` and `hermes plugins` read from the manifest after loading
    assert ctx.manifest.version == data["version"] and "RL training" in ctx.manifest.description
    assert ctx.manifest.provides_tools == list(TOOL_NAMES)
    hooks = {"pre_llm_call", "transform_tool_result", "on_session_end"}
    assert set(ctx.manifest.provides_hooks) == set(ctx.hooks) == hooks
    own = Hermes019Context()
    own.manifest.description = "from a plugin.yaml of Hermes' own"
    hermes_plugin.register(own)
    assert own.manifest.description == "from a plugin.yaml of Hermes' own"


def test_the_skill_is_registered_and_teaches_the_whole_workflow():
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    skill = ctx.skills["rl:training"]
    assert skill["path"] == SKILL_FILE and skill["description"].startswith("Train an RL policy")
    text = skill_text()
    assert not text.startswith("---")  # the body, without front matter
    for tool in TOOL_NAMES:
        assert f"`{tool}" in text, f"the skill never names {tool}"
    for idea in ("locked", "profile", "rate_limited", "min_interval_s", "next_check_in_s", "stalled", "[hermes-rl]"):
        assert idea in text, idea
    # every name the skill quotes is a parameter or a key the answers really hold (at the top or nested)
    table = json.dumps([[tool.returns, tool.returns_alt, list(tool.properties)] for tool in TOOLS])
    quoted = set(re.findall(r"`([a-z_]+)(?::[^`]*)?`", text)) - set(TOOL_NAMES) - {"tinker", "local"}
    assert quoted and all(re.search(rf"\b{key}\b", table) for key in quoted), [
        key for key in quoted if not re.search(rf"\b{key}\b", table)
    ]


# -- run notices -----------------------------------------------------------------------------------


def test_notices_reach_the_conversation_between_turns_and_never_interrupt_one():
    ctx = Hermes019Context()
    hermes_plugin.register(ctx)
    notices = ctx.hooks["pre_llm_call"][0].__self__
    notices.deliver("[hermes-rl] Run aaaaaaaa completed", "s1")
    assert ctx.injected == ["[hermes-rl] Run aaaaaaaa completed"]  # idle: a new turn starts with it
    ctx.hooks["pre_llm_call"][0](session_id="s1", user_message="hi")  # a turn starts
    notices.deliver("[hermes-rl] Run bbbbbbbb failed", "s1")
    assert len(ctx.injected) == 1  # Hermes would interrupt the agent with it: held
    transform = ctx.hooks["transform_tool_result"][0]
    assert transform(tool_name="read_file", result='{"content": "x"}', session_id="s2") is None  # another chat
    assert transform(tool_name="read_file", result='{"content": "x"}', session_id="s1") == (
        '{"content": "x"}\n\n[hermes-rl] Run bbbbbbbb failed'
    )  # the agent reads it with the next tool result of its turn
    notices.deliver("[hermes-rl] Run dddddddd completed", "s1")  # arrives after the turn's last tool call
    ctx.hooks["on_session_end"][0](session_id="s1", completed=True, interrupted=False)
    assert ctx.injected[1:] == ["[hermes-rl] Run dddddddd completed"]  # the turn is over: injected


def test_without_a_cli_a_notice_joins_the_next_turn_of_its_session():
    ctx = Hermes019Context(injects=False)  # gateway or one-shot: inject_message returns False
    hermes_plugin.register(ctx)
    pre_llm_call = ctx.hooks["pre_llm_call"][0]
    pre_llm_call.__self__.deliver("[hermes-rl] Run cccccccc completed", "s1")
    assert pre_llm_call(session_id="s2", user_message="other chat") is None
    assert pre_llm_call(session_id="s1", user_message="so?") == {"context": "[hermes-rl] Run cccccccc completed"}
    assert pre_llm_call(session_id="s1", user_message="again") is None  # told once


def _watched(run_id: str, **kwargs) -> tuple[list[str], threading.Event]:
    told: list[str] = []
    stop = threading.Event()
    watch_run(run_id, told.append, stop=stop, **kwargs)
    return told, stop


def _wait_for(told: list[str], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(told) < count:
        assert time.monotonic() < deadline, f"told {told} after {timeout} s"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_a_watched_run_that_completes_is_told_once_without_anyone_polling(hermes_home, run_cleanup):
    run_id = launch_run([completing_spec(steps=3, step_s=0.3)], total_steps=3)
    run_cleanup.append(run_id)
    # recheck_s far beyond the test: only the run's own writes can wake the watcher in time
    told, stop = _watched(run_id, recheck_s=600)
    _wait_for(told, 1, timeout=30)
    ended = runs.get_run(run_id, sample=False)
    assert ended["status"] == "completed"
    assert told[0].startswith(f"[hermes-rl] Run {run_id} ") and "completed at step 3/3" in told[0]
    assert f"rl_get_results('{run_id}')" in told[0] and "hermes-rl " not in told[0]
    time.sleep(1.0)
    assert len(told) == 1


@pytest.mark.timeout(60)
def test_a_watched_run_that_fails_is_told_with_the_reason(hermes_home, run_cleanup):
    run_id = launch_run([sleeper_spec(), crashing_spec(after=1.0, code=3)])
    run_cleanup.append(run_id)
    told, stop = _watched(run_id, recheck_s=600)
    _wait_for(told, 1, timeout=40)
    assert f"Run {run_id} " in told[0] and " failed" in told[0] and "3" in told[0]
    assert f"rl_start_training(resume_run_id='{run_id}')" in told[0]


@pytest.mark.timeout(60)
def test_a_watched_run_that_stalls_then_loses_its_supervisor_is_told_both(hermes_home, run_cleanup, monkeypatch):
    monkeypatch.setenv("HERMES_RL_STALL_S", "1")
    run_id = launch_run([sleeper_spec()])
    run_cleanup.append(run_id)
    run = wait_status(run_id, ("running",))
    told, stop = _watched(run_id, recheck_s=0.5)  # neither a stall nor a dead supervisor writes a file
    _wait_for(told, 1, timeout=20)
    assert f"Run {run_id} " in told[0] and "is stalled" in told[0] and f"rl_stop_training('{run_id}')" in told[0]
    lose_run(run)
    _wait_for(told, 2, timeout=20)
    assert f"Run {run_id} " in told[1] and " lost" in told[1]
    stop.set()
