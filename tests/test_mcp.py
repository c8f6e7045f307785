"""The MCP server: an in-memory session calling tools, and the real `hermes-rl mcp` over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.memory import create_connected_server_and_client_session

from hermes_rl.core.clients.mcp_server import build_server
from hermes_rl.core.clients.toolset import TOOL_SCHEMAS, skill_text
from tests.fixtures_core import processes_with_env, wait_until
from tests.fixtures_toolset import completing_spec, launch_run, wait_status

ROOT = Path(__file__).resolve().parent.parent


def _json(result: types.CallToolResult) -> dict:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return json.loads(result.content[0].text)


@pytest.mark.timeout(60)
def test_in_memory_session_lists_the_table_and_calls_tools(hermes_home, run_cleanup):
    run_id = launch_run([completing_spec(steps=2)], total_steps=2)
    run_cleanup.append(run_id)
    wait_status(run_id, ("completed",))

    async def session_calls():
        async with create_connected_server_and_client_session(build_server()) as client:
            listed = await client.list_tools()
            runs = await client.call_tool("rl_list_runs", {})
            status = await client.call_tool("rl_check_status", {"run_id": run_id})
            results = await client.call_tool("rl_get_results", {"run_id": run_id})
            bad = await client.call_tool("rl_check_status", {"run_id": "../../etc"})
            wrong_type = await client.call_tool("rl_test_inference", {"num_steps": "many"})
            unknown = await client.call_tool("rl_unknown", {})
            return listed, runs, status, results, bad, wrong_type, unknown

    listed, runs, status, results, bad, wrong_type, unknown = anyio.run(session_calls)
    served = [{"name": t.name, "description": t.description, "parameters": t.inputSchema} for t in listed.tools]
    assert served == [s["function"] for s in TOOL_SCHEMAS]

    assert runs.isError is False and _json(runs)["runs"][0]["run_id"] == run_id
    assert _json(status)["status"] == "completed" and _json(status)["metrics"]["step"] == 2
    assert _json(results)["tinker_path"] == "tinker://local/2"
    assert bad.isError is True and "invalid run id" in _json(bad)["error"]
    # the same error text as the Hermes plugin gives: our checks, not the SDK's schema validator
    assert wrong_type.isError is True and "num_steps must be integer" in _json(wrong_type)["error"]
    assert unknown.isError is True and "unknown tool" in _json(unknown)["error"]


STRAY_PRINT_SERVER = textwrap.dedent("""
    import sys
    import hermes_rl.core.clients.toolset as toolset
    original = toolset.TOOLS_BY_NAME["rl_list_runs"]
    def noisy():
        print("a stray print inside a tool")
        import subprocess
        subprocess.run([sys.executable, "-c", "print('a child writing to stdout')"])
        return original.func()
    import dataclasses
    toolset.TOOLS_BY_NAME["rl_list_runs"] = dataclasses.replace(original, func=noisy)
    from hermes_rl.core.clients.mcp_server import main
    main()
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["hermes-rl mcp", "stray prints"])
def test_stdio_server_answers_a_client_and_stdout_is_only_protocol(how, hermes_home):
    env = {**os.environ, "HERMES_HOME": str(hermes_home), "PYTHONPATH": str(ROOT)}
    if how == "hermes-rl mcp":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "hermes_rl.core.clients.cli", "mcp"], env=env, cwd=str(ROOT)
        )
    else:
        params = StdioServerParameters(command=sys.executable, args=["-c", STRAY_PRINT_SERVER], env=env, cwd=str(ROOT))

    async def client_calls():
        with open(hermes_home / "server_stderr.txt", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    tools = await session.list_tools()
                    runs = await session.call_tool("rl_list_runs", {})
                    envs = await session.call_tool("rl_list_environments", {})
                    return init, tools, runs, envs

    init, tools, runs, envs = anyio.run(client_calls)
    assert init.serverInfo.name == "hermes-rl"
    assert init.instructions == skill_text()  # the workflow guide Hermes gets as the skill rl:training
    assert [t.name for t in tools.tools] == [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert _json(runs) == {"runs": [], "count": 0, "total": 0}
    assert "environments" in _json(envs)
    if how == "stray prints":
        stderr = (hermes_home / "server_stderr.txt").read_text()
        assert "a stray print inside a tool" in stderr and "a child writing to stdout" in stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv",
    [["-m", "hermes_rl.core.clients.cli", "mcp"], ["-c", STRAY_PRINT_SERVER]],
    ids=["hermes-rl mcp", "stray prints"],
)
def test_raw_stdout_lines_are_all_json_rpc(argv, hermes_home):
    """Read the server's stdout byte for byte: every line must be a JSON-RPC message."""
    env = {**os.environ, "HERMES_HOME": str(hermes_home), "PYTHONPATH": str(ROOT)}
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "rl_list_runs", "arguments": {}}},
    ]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    answers = {}
    try:
        for request in requests:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            if "id" in request:
                line = proc.stdout.readline()
                message = json.loads(line)
                assert message["jsonrpc"] == "2.0"
                answers[message["id"]] = message
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.stderr.close()
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines() if line.strip())
    assert len(answers[2]["result"]["tools"]) == 10
    assert json.loads(answers[3]["result"]["content"][0]["text"]) == {"runs": [], "count": 0, "total": 0}


def _warm_bases(home: Path) -> dict[int, tuple[str, str]]:
    """The warm bases of the clients with this $HERMES_HOME: pid -> (its parent's command line, its socket)."""
    found = {}
    for pid in processes_with_env("HERMES_HOME", str(home)):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1]
            found_in = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if b"hermes_rl.core.daemons.warm.base" in cmdline:
            found[pid] = (found_in, cmdline.split(b"\0")[3].decode())
    return found


@pytest.mark.timeout(180)
def test_an_agent_session_keeps_a_warm_base_its_runs_fork_from_and_takes_it_along(hermes_home, tiny_model_dir):
    """`hermes-rl mcp` lives as long as the agent's session, as the dashboard does: from its first training
    run it keeps a warm base (its child), the run's processes fork from it instead of importing torch and
    atroposlib again, and when the session ends the base ends with it."""
    from hermes_rl.core import runs
    from tests.fixtures_model import use_tiny_model

    use_tiny_model(tiny_model_dir, total_steps=100000)
    env = {k: v for k, v in os.environ.items() if k not in ("HERMES_RL_WARM_BASE", "TINKER_API_KEY")}
    env.update(HERMES_HOME=str(hermes_home), PYTHONPATH=str(ROOT))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "hermes_rl.core.clients.cli", "mcp"], env=env, cwd=str(ROOT)
    )

    async def session():
        with open(hermes_home / "server_stderr.txt", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    chosen = _json(await client.call_tool("rl_select_environment", {"name": "toy_addition"}))
                    assert "error" not in chosen, chosen
                    assert not _warm_bases(hermes_home)  # none before a run: an agent may never train
                    run_id = _json(await client.call_tool("rl_start_training", {}))["run_id"]
                    for _ in range(900):
                        status = _json(await client.call_tool("rl_check_status", {"run_id": run_id}))
                        if status["status"] != "starting":
                            break
                        await anyio.sleep(0.1)
                    bases = _warm_bases(hermes_home)
                    stopped = _json(await client.call_tool("rl_stop_training", {"run_id": run_id}))
                    return run_id, status, bases, stopped

    run_id, status, bases, stopped = anyio.run(session)
    assert status["status"] == "running", status
    warm = [e["message"] for e in runs.run_events(run_id) if e.get("event") == "warm"]
    assert any("forked from the warm base" in m for m in warm), warm
    assert len(bases) == 1 and "hermes_rl.core.clients.cli mcp" in next(iter(bases.values()))[0], bases
    socket = next(iter(bases.values()))[1]
    assert "error" not in stopped, stopped
    wait_status(run_id, ("stopped",))
    wait_until(lambda: not _warm_bases(hermes_home), 15, what="the session's warm base to end with it")
    assert os.path.isabs(socket) and not os.path.exists(os.path.dirname(socket))  # and its folder with it
