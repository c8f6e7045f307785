#!/usr/bin/env bash
# What README's main command installs works in a venv holding only that. The test suite runs in a venv
# with the `dev` extra, whose test tools pull in more packages (peft brings accelerate, for one), so it
# can pass while a user's install fails. This check builds a fresh venv with exactly what
# `bash scripts/main.sh` installs ([local,mcp], through scripts/bootstrap.sh) and checks that each extra
# imports and serves what it promises:
#   train  the trainer's and environments' packages (atroposlib, tinker, wandb, openai …) import
#   local  the Tinker-protocol server's packages import; a run on the smollm2 profile (the GGUF model read
#          through transformers) records its first trained step; the offline inference trial scores
#          SmolLM2's answers
#   mcp    the MCP server answers tools/list with the ten rl_* tools
#
#   scripts/extras_check.sh          ~3 min with a warm pip cache on 2 cores (the install ~1 min)
#
# Needs python3.11+ and the package index. Venv and HERMES_HOME go under a temporary folder, removed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d -t hermes-rl-extras-XXXXXX)"
venv="$work/venv"
export HERMES_HOME="$work/home" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
run_id=""
cleanup() {
  [ -n "$run_id" ] && "$venv/bin/hermes-rl" stop "$run_id" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

echo "== HERMES_RL_VENV=<fresh venv> scripts/bootstrap.sh local,mcp (what scripts/main.sh installs)"
HERMES_RL_VENV="$venv" bash scripts/bootstrap.sh local,mcp >"$work/install.log" 2>&1 || {
  grep -v "^WARNING: Location" "$work/install.log" | tail -20 >&2
  fail "the install of [local,mcp] failed"
  exit 1
}
if "$venv/bin/python" -c 'import peft' 2>/dev/null; then
  fail "the venv holds peft, a dev-only package: this check would not see what users lack"
fi

echo "== train and local: the packages each process imports"
"$venv/bin/python" - <<'EOF' || fail "an extra's package does not import"
import importlib
for name in ["atroposlib.envs.base", "atroposlib.api.server", "tinker", "wandb", "datasets", "math_verify", "openai",
             "torch", "transformers", "gguf", "accelerate", "fastapi", "uvicorn",
             "hermes_rl.dataplane.tinker_local.server", "hermes_rl.dataplane.trainer.loop", "mcp"]:
    importlib.import_module(name)
print("   all import")
EOF

echo "== mcp: tools/list over stdio"
"$venv/bin/python" - "$venv/bin/hermes-rl" <<'EOF' || fail "the MCP server does not list the ten tools"
import asyncio, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main() -> None:
    async with stdio_client(StdioServerParameters(command=sys.argv[1], args=["mcp"])) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            names = sorted(tool.name for tool in (await session.list_tools()).tools)
    assert len(names) == 10 and all(n.startswith("rl_") for n in names), names
    print("   ten tools:", ", ".join(names))

asyncio.run(main())
EOF

echo "== local: the smollm2 run of docs/usage.md reaches its first trained step"
start=$(date +%s)
out="$("$venv/bin/hermes-rl" start --env toy_addition --profile smollm2 --set chat=true --set max_operand=9 \
  --set group_size=4 --set batch_size=4 --set max_completion_tokens=8 --json 2>"$work/start.err")"
run_id="$(printf '%s' "$out" | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin).get("run_id",""))' 2>/dev/null)"
if [ -z "$run_id" ]; then
  cat "$work/start.err" >&2
  fail "the smollm2 run did not start"
else
  verdict=""
  for _ in $(seq 1 120); do  # 6 minutes at most
    verdict="$("$venv/bin/hermes-rl" status "$run_id" --json 2>/dev/null | "$venv/bin/python" -c '
import json, sys
r = json.load(sys.stdin)
step = (r.get("metrics") or {}).get("step") or 0
if step >= 1: print(f"step {step}")
elif r.get("status") in ("failed", "lost", "stopped"): print("ended " + str(r.get("status")) + ": " + str(r.get("reason")))
' 2>/dev/null)"
    [ -n "$verdict" ] && break
    sleep 3
  done
  case "$verdict" in
    step*) echo "   $verdict after $(( $(date +%s) - start )) s" ;;
    *) fail "the smollm2 run recorded no trained step: ${verdict:-no step in 6 minutes}"
       "$venv/bin/hermes-rl" logs "$run_id" 2>/dev/null | grep -iE "error|exception" | tail -5 >&2 ;;
  esac
  "$venv/bin/hermes-rl" stop "$run_id" >/dev/null 2>&1
  run_id=""
fi

echo "== local: the offline inference trial (SmolLM2 on this machine, no key)"
if "$venv/bin/hermes-rl" test-inference --env toy_addition --steps 1 --group-size 2 --json >"$work/trial.json" 2>"$work/trial.err"; then
  "$venv/bin/python" - "$work/trial.json" <<'EOF' || fail "the offline inference trial scored no completion"
import json, sys
out = json.load(open(sys.argv[1]))
model = (out.get("models") or [{}])[0]
assert out.get("environment_working") and model.get("completions", 0) >= 2 and not model.get("errors"), out.get("verdict")
print(f"   {model['model']}: {model['completions']} completions scored, mean score {model['mean_score']}")
EOF
else
  tail -5 "$work/trial.err" >&2
  fail "the offline inference trial failed"
fi

[ "$failed" -eq 0 ] && echo "OK: [local,mcp] alone serves what README promises" || echo "FAILED" >&2
exit "$failed"
