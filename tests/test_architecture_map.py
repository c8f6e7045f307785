"""CONTRIBUTING.md's "Architecture by file" is generated from the module docstrings and kept current."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "architecture_map.py"


def _script():
    spec = importlib.util.spec_from_file_location("architecture_map", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_map_in_contributing_is_current():
    """A module added, removed or re-described without `python scripts/architecture_map.py` fails here."""
    script = _script()
    text = script.CONTRIBUTING.read_text(encoding="utf-8")
    assert script.replace_section(text, script.build_map()) == text, (
        "CONTRIBUTING.md's Architecture by file is stale: run `python scripts/architecture_map.py`"
    )


def test_the_map_lists_every_module_once():
    script = _script()
    body = script.build_map()
    modules = [p for top in script.PACKAGES for p in (script.ROOT / top).rglob("*.py") if "__pycache__" not in p.parts]
    packaged = [p for p in modules if (p.parent / "__init__.py").exists()]
    assert body.count("\n- `") == len(packaged)


def test_the_gist_is_the_first_sentence_or_clause():
    gist = _script().first_sentence
    assert gist("API keys: read from the environment.") == "API keys: read from the environment"
    assert gist("Stall detection, one rule for every client: a run with no progress.") == (
        "Stall detection, one rule for every client"
    )
    assert gist("Compare (space marks runs; c opens). More.") == "Compare (space marks runs; c opens)"
    assert gist("One line.\n\nA second paragraph.") == "One line"
    assert gist("word " * 60).endswith("…")
