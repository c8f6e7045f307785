#!/usr/bin/env bash
# The main job: the dashboard over a live local run on the embedded default (no keys needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh local,mcp
exec .venv/bin/hermes-rl demo "$@"
