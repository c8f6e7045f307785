#!/usr/bin/env bash
# The test suite: import contracts, lint and format, then pytest. "No tests ran" (pytest exit 5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev || exit 1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
.venv/bin/lint-imports || { echo "import contracts broken (core must stay headless)" >&2; exit 1; }
.venv/bin/ruff check . || { echo "ruff found lint errors" >&2; exit 1; }
.venv/bin/ruff format --check . || { echo "files need \`ruff format\`" >&2; exit 1; }
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$status"
