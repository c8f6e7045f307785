"""core must run headless and light: importing it (what the dashboard and agent tools load) never
pulls in Textual or the heavy ML stack. The dashboard never pulls in the ML stack either."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import core

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
    names = [f"core.{m.name}" for m in pkgutil.iter_modules(core.__path__) if m.name not in ("supervisor",)]
    loaded = _top(_modules_loaded_by("\n".join(f"import {name}" for name in names)))
    assert "textual" not in loaded
    assert "tui" not in loaded
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_dashboard_imports_without_ml_stack():
    if not (ROOT / "tui" / "app.py").exists():
        return
    loaded = _top(_modules_loaded_by("import tui.app"))
    assert not loaded & set(HEAVY), loaded & set(HEAVY)
