"""Hermes Agent plugin: the ten rl_* tools in toolset "rl", the skill rl:training, and run notices.

Loaded through the `hermes_agent.plugins` entry point (rl = hermes_rl.core.clients.hermes_plugin); Hermes calls
`register(ctx)`. No import of hermes-agent: we only call the PluginContext methods 0.19 has, passing just the
keyword arguments their signatures accept (0.19 rejects unknown ones; newer versions take more). Hermes gives
an entry-point plugin a manifest holding only its name; register() fills in the rest from plugin.yaml.

A run started from a conversation is watched (core.clients.run_watch); when it ends or stalls the
conversation is told through Hermes' own channels (see Notices), so the agent never polls to learn it.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..base.secrets import keys_present
from .run_watch import watch_run
from .toolset import SKILL_FILE, TOOLS, call_tool, call_tool_json

MANIFEST_FILE = Path(__file__).with_name("plugin.yaml")
SKILL_NAME = "training"  # Hermes qualifies it with the plugin's name: rl:training
TOOLSET = "rl"
log = logging.getLogger(__name__)

# What each key unlocks; none is needed for the tools to work (the local backend needs no key).
KEY_USES = {
    "TINKER_API_KEY": "training on Tinker cloud (without it runs use the local CPU backend)",
    "WANDB_API_KEY": "online W&B logging (without it W&B runs offline)",
    "OPENROUTER_API_KEY": "rl_test_inference against OpenRouter models",
}


def missing_keys() -> dict[str, str]:
    """{key: what it would enable} for every optional key that is not set."""
    present = keys_present()
    return {name: use for name, use in KEY_USES.items() if not present.get(name)}


# Packages each backend's processes import (looked up, never imported here: core stays light).
TRAIN_MODULES = ("atroposlib", "tinker", "datasets")
LOCAL_MODULES = TRAIN_MODULES + ("torch", "transformers", "fastapi", "uvicorn")


def _absent(modules: tuple[str, ...]) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def unavailable_reason() -> str | None:
    """Why no run could start from this Python, or None: Tinker cloud needs its key and the [train]
    packages; the keyless local backend needs the [local] ones."""
    if keys_present().get("TINKER_API_KEY"):
        missing = _absent(TRAIN_MODULES)
        extra = "train"
    else:
        missing = _absent(LOCAL_MODULES)
        extra = "local"
    if not missing:
        return None
    return (
        f"rl tools unavailable: {', '.join(missing)} not installed in this Python; install hermes-rl[{extra}] "
        f"into Hermes' environment (pip install 'hermes-rl[{extra}]')"
        + ("" if extra == "train" else ", or set TINKER_API_KEY and install hermes-rl[train]")
    )


def check_requirements() -> bool:
    """Hermes' check_fn: False (with the reason as a warning) when no backend can run; missing optional
    keys are named in the log."""
    reason = unavailable_reason()
    if reason:
        log.warning("%s", reason)
        return False
    missing = missing_keys()
    if missing:
        log.info(
            "rl tools: %s not set (set in the environment or $HERMES_HOME/.env): %s",
            ", ".join(missing),
            "; ".join(f"{k} enables {v}" for k, v in missing.items()),
        )
    return True


check_requirements.missing_keys = missing_keys  # type: ignore[attr-defined]


def manifest() -> dict:
    """plugin.yaml as data."""
    return yaml.safe_load(MANIFEST_FILE.read_text(encoding="utf-8"))


def _describe(plugin_manifest: Any, data: dict) -> None:
    """Fill the fields Hermes left empty on an entry-point plugin's manifest (what `hermes tools list` and
    `hermes plugins` show); a field Hermes did fill (from a plugin.yaml of its own) is left as it is."""
    for key in ("version", "description", "author", "provides_tools", "provides_hooks", "requires_env"):
        if hasattr(plugin_manifest, key) and not getattr(plugin_manifest, key) and data.get(key) is not None:
            setattr(plugin_manifest, key, data[key])


class Notices:
    """Delivers run notices to the conversation that started the run, through Hermes' plugin API:

    - between turns, `inject_message` (the interactive CLI takes it as the next input: a new turn starts
      and the agent reads the notice at once);
    - during a turn (an injected message would interrupt the agent), appended to the next tool result of
      that session (hook transform_tool_result); one still held when the turn ends is injected then (hook
      on_session_end, which Hermes fires at the end of every turn);
    - with no CLI to inject into (gateway, one-shot), added to the next turn of that session as context
      (hook pre_llm_call). Notices are never lost silently: they wait until one of these happens.
    """

    def __init__(self, inject: Callable[[str], bool] | None):
        self._inject = inject
        self._lock = threading.Lock()
        self._held: list[tuple[str, str]] = []  # (session id, text)
        self._turns = 0  # turns in progress in this process

    def watch(self, run_id: str, session_id: str) -> None:
        watch_run(run_id, lambda text: self.deliver(text, session_id))

    def deliver(self, text: str, session_id: str) -> None:
        with self._lock:
            self._held.append((session_id, text))
            busy = self._turns > 0
        if not busy:
            self._flush()

    def _flush(self) -> None:
        if self._inject is None:
            return
        with self._lock:
            held, self._held = self._held, []
        kept = []
        for session_id, text in held:
            try:
                injected = bool(self._inject(text))
            except Exception:
                log.warning("rl: injecting a run notice failed", exc_info=True)
                injected = False
            if not injected:
                kept.append((session_id, text))
        if kept:
            with self._lock:
                self._held[:0] = kept

    def pre_llm_call(self, session_id: str = "", **_: Any) -> dict | None:
        """Hook: a turn starts; the notices held for its session become part of its context."""
        with self._lock:
            self._turns += 1
            mine = [text for sid, text in self._held if sid in (session_id, "")]
            self._held = [(sid, text) for sid, text in self._held if sid not in (session_id, "")]
        return {"context": "\n".join(mine)} if mine else None

    def transform_tool_result(self, result: Any = None, session_id: str = "", **_: Any) -> str | None:
        """Hook: a tool answered during a turn; the notices held for its session follow its result."""
        if not isinstance(result, str):
            return None
        with self._lock:
            mine = [text for sid, text in self._held if sid in (session_id, "")]
            self._held = [(sid, text) for sid, text in self._held if sid not in (session_id, "")]
        return result + "\n\n" + "\n".join(mine) if mine else None

    def on_session_end(self, **_: Any) -> None:
        """Hook: a turn ended; what arrived during it is injected now."""
        with self._lock:
            self._turns = max(0, self._turns - 1)
            idle = self._turns == 0
        if idle:
            self._flush()


WATCH_TIP = (
    "you will be told in this conversation when the run completes, fails, is lost or stalls; "
    "rl_check_status is not needed to learn that"
)


def make_handler(name: str, notices: Notices | None = None) -> Callable[..., str]:
    """A Hermes handler `(args, **kwargs) -> str`: the tool's JSON result, never an exception. With
    `notices`, a run that rl_start_training starts is watched for the calling session."""

    def handler(args: Any = None, **context: Any) -> str:
        if notices is None or name != "rl_start_training":
            return call_tool_json(name, args)
        result = call_tool(name, args)
        if result.get("run_id") and "error" not in result:
            try:
                notices.watch(result["run_id"], str(context.get("session_id") or ""))
                result["tips"] = [*result.get("tips", []), WATCH_TIP]
            except Exception:  # the run is started either way; only the notice is lost
                log.warning("rl: cannot watch run %s", result["run_id"], exc_info=True)
        return json.dumps(result, ensure_ascii=False, allow_nan=False)

    handler.__name__ = f"{name}_handler"
    handler.__qualname__ = handler.__name__
    return handler


def _accepted(function: Callable, offered: dict) -> dict:
    """Keep only the keyword arguments `function` declares (all of them if it takes **kwargs)."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {k: offered[k] for k in ("name", "toolset", "schema", "handler") if k in offered}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    names = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in offered.items() if k in names}


def register(ctx: Any) -> None:
    data = manifest()
    if getattr(ctx, "manifest", None) is not None:
        _describe(ctx.manifest, data)
    hooks = callable(getattr(ctx, "register_hook", None))
    notices = Notices(getattr(ctx, "inject_message", None)) if hooks else None
    for tool in TOOLS:
        function = tool.schema["function"]
        offered = {
            "name": tool.name,
            "toolset": TOOLSET,
            # Hermes wraps this as {"type": "function", "function": {**schema, "name": name}}
            "schema": {"name": tool.name, "description": function["description"], "parameters": function["parameters"]},
            "handler": make_handler(tool.name, notices),
            "check_fn": check_requirements,
            "is_async": False,
            "description": function["description"],
            "emoji": "🧪",
        }
        ctx.register_tool(**_accepted(ctx.register_tool, offered))
    if notices is not None:
        ctx.register_hook("pre_llm_call", notices.pre_llm_call)
        ctx.register_hook("transform_tool_result", notices.transform_tool_result)
        ctx.register_hook("on_session_end", notices.on_session_end)
    if callable(getattr(ctx, "register_skill", None)):
        skill = yaml.safe_load(SKILL_FILE.read_text(encoding="utf-8").split("---", 2)[1])
        ctx.register_skill(SKILL_NAME, SKILL_FILE, description=skill["description"])
    from .toolset import keep_warm

    keep_warm()  # the agent's process lives for its session: probes, runs and tests fork from warm servers
