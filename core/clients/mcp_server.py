"""MCP server over stdio: the ten rl_* tools with the same JSON schemas as the Hermes plugin.

`hermes-rl mcp` calls main(). The low-level Server serves TOOL_SCHEMAS as they are; every call goes
through toolset.call_tool_json (our own argument checks, so MCP and Hermes clients get the
same errors). Stdout carries only the protocol: the real fd 1 is kept for it and fd 1 is pointed at
stderr, so a stray print, a library's banner or a child process can never corrupt the stream.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from io import TextIOWrapper
from typing import Any

SERVER_NAME = "hermes-rl"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("hermes-rl")
    except Exception:  # not installed as a distribution (e.g. run from a checkout)
        return "0.0.0"


def mcp_tools() -> list:
    """TOOL_SCHEMAS as MCP Tool objects (name, description, inputSchema = parameters)."""
    from mcp import types

    from .toolset import TOOL_SCHEMAS

    return [
        types.Tool(
            name=s["function"]["name"],
            description=s["function"]["description"],
            inputSchema=s["function"]["parameters"],
        )
        for s in TOOL_SCHEMAS
    ]


def build_server():
    """The configured low-level MCP Server (used by main() and by in-memory tests)."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    from .toolset import CANCEL, call_tool_json, skill_text

    server: Server = Server(SERVER_NAME, version=_version(), instructions=skill_text())

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return mcp_tools()

    # validate_input=False: call_tool checks arguments against the same schemas (jsonschema) and answers
    # in the tools' JSON error format.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        # Tools block (processes, files, a whole inference test): keep the event loop free. A client that
        # cancels the request gets its answer at once, and the tool is told to end what it started.
        cancel = threading.Event()

        def work() -> str:
            token = CANCEL.set(cancel)
            try:
                return call_tool_json(name, arguments or {})
            finally:
                CANCEL.reset(token)

        try:
            text = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise
        try:
            is_error = "error" in json.loads(text)
        except ValueError:
            is_error = True
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=is_error)

    return server


def _protocol_stdout() -> TextIOWrapper:
    """Keep the real stdout for the protocol only; anything else written to fd 1 goes to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return TextIOWrapper(os.fdopen(protocol_fd, "wb", buffering=0), encoding="utf-8", write_through=True)


async def serve_stdio() -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server()
    protocol_out = anyio.wrap_file(_protocol_stdout())
    async with stdio_server(stdout=protocol_out) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("HERMES_RL_LOG_LEVEL", "WARNING"),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        import mcp  # noqa: F401
    except ImportError:
        sys.stderr.write("hermes-rl mcp needs the `mcp` package: pip install 'hermes-rl[mcp]'\n")
        raise SystemExit(2) from None
    import anyio

    from .toolset import keep_warm

    keep_warm()  # an agent session probes environment after environment, and may start run after run
    try:
        anyio.run(serve_stdio)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
