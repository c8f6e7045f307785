#!/usr/bin/env bash
# hermes-rl beside Hermes Agent 0.19, on a fresh machine: the README's one-command installs, each in a new
# venv, must resolve without breaking a pin of Hermes' (pip check clean), and the plugin must work there.
#
#   scripts/hermes_install_check.sh           resolve [mcp] and [local,mcp] beside hermes-agent[mcp] (pip
#                                             --dry-run: the resolver's answer, nothing installed), install
#                                             [local] beside hermes-agent for real, pip check, and run
#                                             scripts/hermes_agent_check.py there (a real `hermes chat` told
#                                             when its run completes); about 10 min of CPU on 2 cores with
#                                             a warm pip cache (the resolver alone: ~1 min each)
#   scripts/hermes_install_check.sh --resolve only the resolutions ([local] too)
#
# Needs python3.11+, the package index and tmux. Venvs go under a temporary folder, removed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
work="$(mktemp -d -t hermes-rl-install-XXXXXX)"
trap 'rm -rf "$work"' EXIT
hermes="hermes-agent==0.19.0"
failed=0

resolve() {  # resolve NAME HERMES_REQUIREMENT OUR_EXTRAS
  local venv="$work/$1"
  "$python_bin" -m venv "$venv"
  echo "== pip install --dry-run '$2' -e '.[$3]'"
  if ! "$venv/bin/pip" install --quiet --dry-run --report "$work/$1.json" "$2" -e ".[$3]" >"$work/$1.log" 2>&1; then
    grep -v "^WARNING: Location" "$work/$1.log" | tail -20 >&2
    echo "FAIL: '$2' and hermes-rl[$3] do not resolve together" >&2
    failed=1
    return
  fi
  "$venv/bin/python" - "$work/$1.json" <<'EOF'
import json, sys
chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
print("   resolved:", ", ".join(f"{n} {chosen[n]}" for n in ("hermes-agent", "rich", "openai", "pydantic", "mcp",
      "starlette", "fastapi", "torch") if n in chosen))
EOF
}

[ "${1:-}" = "--resolve" ] && resolve local "$hermes" local  # otherwise installed for real below
resolve mcp "hermes-agent[mcp]==0.19.0" mcp
resolve local_mcp "hermes-agent[mcp]==0.19.0" "local,mcp"

if [ "${1:-}" != "--resolve" ] && [ "$failed" -eq 0 ]; then
  venv="$work/installed"
  "$python_bin" -m venv "$venv"
  echo "== pip install '$hermes' -e '.[local]' (one command, fresh venv)"
  start=$(date +%s)
  if ! "$venv/bin/pip" install --quiet "$hermes" -e ".[local]" >"$work/installed.log" 2>&1; then
    grep -v "^WARNING: Location" "$work/installed.log" | tail -20 >&2
    echo "FAIL: the one-command install failed" >&2
    exit 1
  fi
  echo "   took $(( $(date +%s) - start )) s; venv size $(du -sh "$venv" | cut -f1)"
  echo "== pip check"
  "$venv/bin/pip" check || failed=1
  echo "== scripts/hermes_agent_check.py (real Hermes, keyless run)"
  HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/hermes_agent_check.py || failed=1
fi
[ "$failed" -eq 0 ] && echo "OK: hermes-rl installs beside $hermes" || echo "FAILED" >&2
exit "$failed"
