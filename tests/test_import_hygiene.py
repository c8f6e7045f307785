"""core must run headless and light: importing it (what the dashboard and agent tools load) never
pulls in Textual or the heavy ML stack. The dashboard never pulls in the ML stack either."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ["torch", "transformers", "peft", "atroposlib", "wandb", "tinker", "datasets"]


def _modules_loaded_by(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _top(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_every_core_module_imports_without_textual_or_ml_stack():
    import hermes_rl.core as core

    names = [m.name for m in pkgutil.walk_packages(core.__path__, "hermes_rl.core.")]
    assert "hermes_rl.core.clients.cli" in names and "hermes_rl.core.daemons.supervisor" in names
    loaded = _modules_loaded_by("\n".join(f"import {name}" for name in names))
    assert "textual" not in _top(loaded)
    assert not {m for m in loaded if m.startswith("hermes_rl.tui")}
    assert not _top(loaded) & set(HEAVY), _top(loaded) & set(HEAVY)


def test_dashboard_imports_without_ml_stack():
    loaded = _top(_modules_loaded_by("import hermes_rl.tui.app"))
    assert "textual" in loaded
    assert not loaded & set(HEAVY), loaded & set(HEAVY)
