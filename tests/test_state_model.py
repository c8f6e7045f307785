"""Run and process states are defined once, in hermes_rl.core.base.states: no other module keeps its
own list of state names, and what the supervisor records, what readers derive and what the front
ends colour are the same values."""

from __future__ import annotations

import ast
from pathlib import Path

from hermes_rl.core.base import states
from hermes_rl.core.base.states import FINAL, RECORDED_FINAL, ProcState, RunStatus

ROOT = Path(__file__).resolve().parent.parent
STATES_FILE = ROOT / "core" / "base" / "states.py"
STATE_NAMES = {s.value for s in RunStatus} | {s.value for s in ProcState}
SHIPPED = ("core", "tui", "dataplane", "environments")


def _collections_of_state_names(path: Path) -> list[tuple[int, list[str]]]:
    """Tuples, lists, sets and dict keys made of two or more string constants, all of them state names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        texts = [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]
        if len(texts) >= 2 and len(texts) == len(items) and set(texts) <= STATE_NAMES:
            found.append((node.lineno, texts))
    return found


def test_no_module_but_states_lists_state_names():
    offenders = []
    for folder in SHIPPED:
        for path in (ROOT / folder).rglob("*.py"):
            if path == STATES_FILE:
                continue
            for line, texts in _collections_of_state_names(path):
                offenders.append(f"{path.relative_to(ROOT)}:{line} {texts}")
    assert not offenders, "state names listed outside core/base/states.py:\n" + "\n".join(offenders)


def test_the_scan_finds_a_list_of_state_names(tmp_path):
    """The rule above can fail: a module that keeps its own final statuses is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text('FINAL_STATUSES = ("completed", "failed", "stopped")\nOTHER = ("completed", "nope")\n')
    assert _collections_of_state_names(sample) == [(1, ["completed", "failed", "stopped"])]


def test_final_and_active_sets_and_styles_cover_every_state():
    assert RECORDED_FINAL < FINAL and {RunStatus.LOST, RunStatus.UNREADABLE} == FINAL - RECORDED_FINAL
    assert not states.ACTIVE & FINAL
    assert set(RunStatus) == states.ACTIVE | FINAL
    assert set(states.RUN_STYLE) == set(RunStatus) and set(states.PROC_STYLE) == set(ProcState)
    assert states.run_style("no-such-state") == states.UNKNOWN_STYLE
    # Records hold plain strings (JSON): the enums compare equal to them.
    assert "lost" in FINAL and RunStatus("failed") is RunStatus.FAILED
