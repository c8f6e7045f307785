#!/usr/bin/env bash
# The lower bounds in pyproject.toml are tested, not guessed: resolve hermes-rl[dev] with every direct
# dependency at the lowest version its range allows (uv's lowest-direct resolution), install that into a
# fresh venv and run the tests that exercise those packages (the dashboard on textual/rich, the tools,
# MCP, the plugin, the local backend on fastapi/uvicorn/torch, the trainer on openai/pydantic).
#
#   scripts/lowest_deps_check.sh [PYTEST ARGS]     (~2 min of installs with a warm cache, then the tests:
#                                                   its timeouts assume a machine not shared with other work)
#
# Needs python3.11+ and the package index (uv itself is installed into the temporary folder).
set -uo pipefail
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
work="$(mktemp -d -t hermes-rl-lowest-XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$python_bin" -m venv "$work/uv" && "$work/uv/bin/pip" install --quiet uv >/dev/null 2>&1 || {
  echo "cannot install uv" >&2
  exit 1
}
uv="$work/uv/bin/uv"
links=()
[ -d /opt/wheels ] && links=(--find-links /opt/wheels)  # a machine's local wheels (e.g. torch's CPU build)
"$uv" pip compile pyproject.toml --extra dev --resolution lowest-direct --python "$python_bin" "${links[@]}" \
  --quiet -o "$work/lowest.txt" || exit 1
echo "lowest direct versions:"
grep -E "^($("$python_bin" - <<'EOF'
import re, tomllib
data = tomllib.load(open("pyproject.toml", "rb"))
reqs = data["project"]["dependencies"] + [r for extra in data["project"]["optional-dependencies"].values() for r in extra]
names = sorted({re.split(r"[ <>=!~\[;]", r)[0].lower() for r in reqs if not r.startswith("hermes-rl")})
print("|".join(re.escape(n) for n in names))
EOF
))==" "$work/lowest.txt" | tr '\n' ' '
echo
"$uv" venv --quiet --python "$python_bin" "$work/venv" || exit 1
"$uv" pip install --quiet --python "$work/venv/bin/python" "${links[@]}" -r "$work/lowest.txt" || exit 1
"$uv" pip install --quiet --python "$work/venv/bin/python" --no-deps -e . || exit 1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
"$work/venv/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider "${@}" \
  tests/test_dataplane_compat.py tests/test_textual_compat.py tests/test_tinker_contract.py \
  tests/test_trainer_inference.py tests/test_mcp.py tests/test_hermes_plugin.py tests/test_toolset.py \
  tests/test_cli.py tests/test_tui_pilot.py tests/test_environments.py tests/test_config.py tests/test_primitives.py
