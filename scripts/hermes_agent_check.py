"""Check the plugin inside a real Hermes Agent, as a user meets it: `hermes plugins enable rl` as it prompts,
`hermes plugins list` and the loaded manifest, the skill rl:training, the rl_* schemas' size as Hermes
sends them, then an interactive `hermes chat` (driven through tmux) that starts a keyless run and is
told, with no rl_check_status call and no keystroke, when the run completes.

The model provider is scripts/fake_llm.py on 127.0.0.1 (the only stand-in); everything else is real:
Hermes, the plugin, the run (the tiny local model, a few steps). Run it with the Python of a venv
holding both (made by the one-command install), from the repository root; it exits non-zero on failure:

    python -m venv /tmp/hv && /tmp/hv/bin/pip install hermes-agent==0.19.0 -e '.[local]' && /tmp/hv/bin/pip check
    HF_HUB_OFFLINE=1 /tmp/hv/bin/python scripts/hermes_agent_check.py [--steps 3] [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NOTICE = "[hermes-rl] Run "


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr)
    raise SystemExit(1)


def wait_for(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)


def requests(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def hermes(*args: str, stdin: str = "", env: dict) -> str:
    argv = [str(BIN / "hermes"), *args]
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=180)
    return out.stdout + out.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps of the run the conversation starts")
    parser.add_argument("--timeout", type=float, default=900, help="seconds the run may take to complete")
    parser.add_argument("--keep", action="store_true", help="keep the temporary HERMES_HOME")
    args = parser.parse_args()
    if not shutil.which("tmux"):
        fail("tmux is needed to drive `hermes chat` as a person would")

    home = Path(tempfile.mkdtemp(prefix="hermes-rl-check-"))
    log, port_file = home / "model_requests.jsonl", home / "model.port"
    env = {**os.environ, "HERMES_HOME": str(home), "OPENAI_API_KEY": "sk-fake-provider", "HF_HUB_OFFLINE": "1"}
    env.pop("TINKER_API_KEY", None)  # a keyless run: the local backend
    provider = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "fake_llm.py"), "--log", str(log), "--port-file", str(port_file)],
        env=env,
    )
    session = f"hermes-rl-check-{os.getpid()}"
    run_id = None
    try:
        port = wait_for("the fake model provider's port", lambda: port_file.exists() and port_file.read_text(), 20)
        (home / "config.yaml").write_text(
            f"model:\n  default: fake-agent\n  provider: custom\n  base_url: http://127.0.0.1:{port}/v1\n"
        )
        (home / "rl" / "profiles").mkdir(parents=True)
        (home / "rl" / "profiles" / "local.yaml").write_text(f"total_steps: {args.steps}\n")

        enabled = hermes("plugins", "enable", "rl", stdin="n\n", env=env)
        print("$ hermes plugins enable rl   (answered n)\n" + enabled.strip())
        if "Plugin rl enabled" not in enabled:
            fail("`hermes plugins enable rl` did not enable it")
        text = hermes("plugins", "list", "--json", env=env)
        listed = json.JSONDecoder().raw_decode(text[text.index("[") :])[0] if "[" in text else []
        row = next((p for p in listed if p.get("name") == "rl"), None)
        if not row or row["version"] != version("hermes-rl") or not row["description"] or row["status"] != "enabled":
            fail(f"`hermes plugins list --json` has no enabled rl with version and description: {row}")
        print(f"hermes plugins list: rl {row['version']} {row['status']}: {row['description']}")

        probe = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=180, cwd=home
        )
        if probe.returncode != 0:
            fail(f"loading the plugin in Hermes: {probe.stderr[-2000:]}")
        loaded = json.loads(probe.stdout.strip().splitlines()[-1])
        print(f"loaded by Hermes: {json.dumps(loaded)}")
        if loaded["tools"] != 10 or not loaded["skill"] or "RL training" not in loaded["toolset_description"]:
            fail("Hermes did not load the ten tools, the skill rl:training and the manifest's description")

        command = f"{shlex.quote(str(BIN / 'hermes'))} chat -t rl"
        tmux_env = [f"{k}={env[k]}" for k in ("HERMES_HOME", "OPENAI_API_KEY", "HF_HUB_OFFLINE")]
        window = ["-d", "-s", session, "-x", "160", "-y", "50"]
        subprocess.run(["tmux", "new-session", *window, "env", *tmux_env, "sh", "-c", command], check=True)

        def pane() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

        wait_for("the chat's prompt", lambda: "❯" in pane(), 180)
        subprocess.run(["tmux", "send-keys", "-t", session, "please train the selected environment", "Enter"])

        def started() -> str | None:
            for record in requests(log):
                for message in record["messages"]:
                    if message["role"] == "tool" and '"run_id"' in message["text"]:
                        return json.loads(message["text"])["run_id"]
            return None

        run_id = wait_for("rl_start_training's answer", started, 300)
        print(f"the conversation started run {run_id}")
        sent = [r for r in requests(log) if r["rl_tools"]]
        print(f"rl_* schemas as Hermes sent them: {sent[0]['rl_tools']} tools, {sent[0]['rl_tools_chars']} characters")

        def told() -> dict | None:
            for record in requests(log):
                users = [m for m in record["messages"] if m["role"] == "user"]
                if users and f"{NOTICE}{run_id}" in users[-1]["text"]:
                    return record
            return None

        record = wait_for("the notice of the run's end", told, args.timeout, every=1.0)
        notice = [m for m in record["messages"] if m["role"] == "user"][-1]["text"]
        print(f"the conversation was told: {notice}")
        run = json.loads((home / "rl" / "runs" / run_id / "run.json").read_text())
        if run["status"] != "completed" or f"{run_id} " not in notice or " completed" not in notice:
            fail(f"the run is {run['status']}; the notice says: {notice}")
        asked = [c["function"]["name"] for r in requests(log) for c in r["reply"].get("tool_calls") or []]
        if "rl_check_status" in asked:
            fail("the model called rl_check_status")
        print(f"told {record['time'] - run['ended_at']:.1f} s after the run ended; tools the model called: {asked}")
        wait_for("the chat showing the agent's answer to the notice", lambda: "NOTICE RECEIVED" in pane(), 60)
        print("OK: Hermes told the conversation that its run completed, without polling")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run_id:
            subprocess.run([str(BIN / "hermes-rl"), "stop", run_id], capture_output=True, env=env, timeout=120)
        provider.terminate()
        provider.wait(timeout=10)
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)


# Run in Hermes' own process set-up: its plugin discovery, registry and skill lookup.
PROBE = """
import json, model_tools
from hermes_cli.plugins import get_plugin_manager, get_plugin_toolsets
manager = get_plugin_manager()
toolsets = {key: desc for key, _label, desc in get_plugin_toolsets()}
tools = [n for n in model_tools.registry.get_tool_to_toolset_map() if n.startswith("rl_")]
print(json.dumps({"tools": len(tools), "skill": str(manager.find_plugin_skill("rl:training") or ""),
                  "toolset_description": toolsets.get("rl", "")}))
"""

if __name__ == "__main__":
    main()
