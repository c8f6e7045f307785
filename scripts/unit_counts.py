"""The house's sizes, counted from the code (issue #56's figures): imports inside functions (all, and the
project's own), functions over --function-lines and classes over --class-lines, in the product packages.

    .venv/bin/python scripts/unit_counts.py [--function-lines 120] [--class-lines 450] [PACKAGE ...]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["core", "tui", "dataplane"]


def _is_project(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").startswith("hermes_rl")
    return any(alias.name.startswith("hermes_rl") for alias in node.names)


def count(package: str, function_lines: int, class_lines: int) -> tuple[int, int, list[tuple[int, str]]]:
    """(imports inside functions, of which the project's, [(lines, "file:unit")] of the units over size)."""
    inner = project = 0
    large: list[tuple[int, str]] = []

    def walk(node: ast.AST, path: Path, in_function: bool) -> None:
        nonlocal inner, project
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                inner += 1
                project += _is_project(child)
            is_function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_function or isinstance(child, ast.ClassDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > (function_lines if is_function else class_lines):
                    kind = "function" if is_function else "class"
                    large.append((lines, f"{kind} {path.relative_to(ROOT)}:{child.name}"))
            walk(child, path, in_function or is_function)

    for path in sorted((ROOT / package).rglob("*.py")):
        walk(ast.parse(path.read_text(encoding="utf-8")), path, False)
    return inner, project, large


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", default=PRODUCT)
    parser.add_argument("--function-lines", type=int, default=120)
    parser.add_argument("--class-lines", type=int, default=450)
    args = parser.parse_args()
    total = total_project = 0
    large: list[tuple[int, str]] = []
    for package in args.packages:
        inner, project, units = count(package, args.function_lines, args.class_lines)
        print(f"{package}: {inner} imports inside functions ({project} of the project's)")
        total, total_project = total + inner, total_project + project
        large += units
    print(f"all: {total} imports inside functions ({total_project} of the project's)")
    for lines, unit in sorted(large, reverse=True):
        print(f"{lines:5d} lines  {unit}")


if __name__ == "__main__":
    main()
