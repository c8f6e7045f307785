"""Check the plugin inside a real Hermes Agent: its start-up registers the ten tools, check_fn decides
whether they are offered, and (with `start`) a keyless rl_start_training goes through Hermes' own
handle_function_call. Run it with the Python of a venv holding hermes-agent and hermes-rl:

    python -m venv /tmp/hvenv && /tmp/hvenv/bin/pip install hermes-agent==0.19.0 -e '.[local]'
    HERMES_HOME=/tmp/hh /tmp/hvenv/bin/hermes plugins enable rl
    HERMES_HOME=/tmp/hh HF_HUB_OFFLINE=1 /tmp/hvenv/bin/python scripts/hermes_agent_check.py start
    HERMES_HOME=/tmp/hh /tmp/hvenv/bin/hermes-rl runs        # the run, until it completes
"""

from __future__ import annotations

import json
import logging
import sys

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

import model_tools  # noqa: E402 - hermes-agent's module; importing it runs Hermes' plugin discovery

names = sorted(n for n in model_tools.registry.get_tool_to_toolset_map() if n.startswith("rl_"))
print(f"registered: {len(names)} rl_* tools")
offered = model_tools.get_tool_definitions(enabled_toolsets=["rl"], quiet_mode=True)
print(f"offered to the model: {len(offered)}")
print("rl_list_environments:", model_tools.handle_function_call("rl_list_environments", {})[:160])
if sys.argv[1:] == ["start"]:
    started = json.loads(model_tools.handle_function_call("rl_start_training", {}))
    print("rl_start_training:", {k: started.get(k) for k in ("run_id", "status", "error", "hint")})
