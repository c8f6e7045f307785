"""Hermes Agent plugin: registers the ten rl_* tools in toolset "rl".

Loaded through the `hermes_agent.plugins` entry point (rl = hermes_rl.core.clients.hermes_plugin); Hermes calls
`register(ctx)`. No import of hermes-agent: we only call `ctx.register_tool`, passing just the keyword
arguments its signature accepts (0.19 rejects unknown ones; newer versions take more).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

from hermes_rl.core.base.secrets import keys_present
from hermes_rl.core.clients.toolset import TOOLS, call_tool_json

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


def make_handler(name: str) -> Callable[..., str]:
    """A Hermes handler `(args, **kwargs) -> str`: the tool's JSON result, never an exception."""

    def handler(args: Any = None, **_context: Any) -> str:
        return call_tool_json(name, args)

    handler.__name__ = f"{name}_handler"
    handler.__qualname__ = handler.__name__
    return handler


def _accepted(register_tool: Callable, offered: dict) -> dict:
    """Keep only the keyword arguments `register_tool` declares (all of them if it takes **kwargs)."""
    try:
        params = inspect.signature(register_tool).parameters
    except (TypeError, ValueError):
        return {k: offered[k] for k in ("name", "toolset", "schema", "handler") if k in offered}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    names = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in offered.items() if k in names}


def register(ctx: Any) -> None:
    for tool in TOOLS:
        function = tool.schema["function"]
        offered = {
            "name": tool.name,
            "toolset": TOOLSET,
            # Hermes wraps this as {"type": "function", "function": {**schema, "name": name}}
            "schema": {"name": tool.name, "description": function["description"], "parameters": function["parameters"]},
            "handler": make_handler(tool.name),
            "check_fn": check_requirements,
            "is_async": False,
            "description": function["description"],
            "emoji": "🧪",
        }
        ctx.register_tool(**_accepted(ctx.register_tool, offered))
