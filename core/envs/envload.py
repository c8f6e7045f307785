"""How an environment file is loaded, one way for the config probe, the inference test and the run's
`env` process: a file inside a package (`__init__.py` folders) is imported as its package's module,
so its relative imports work (or fail) the same way everywhere; any other file runs as a plain file.
Stdlib only: the data plane's env_launch and core's probe child both use it."""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
from pathlib import Path

BUNDLED = "hermes_rl.environments"


def module_target(file: str | Path) -> tuple[list[str], str | None]:
    """(folders put first on sys.path, the dotted module name or None for a plain file) of a file."""
    path = Path(file).resolve()
    own = importlib.util.find_spec(BUNDLED)
    own_dirs = [Path(p).resolve() for p in (own.submodule_search_locations or [])] if own else []
    if path.parent in own_dirs:  # our bundled environments: the installed package, no sys.path edit
        return [], f"{BUNDLED}.{path.stem}"
    directory = root = path.parent
    while (root / "__init__.py").exists() and root.parent != root:
        root = root.parent
    if root == directory:
        return [str(directory)], None
    # The package's parent first, as `python -m pkg.env` has it; the file's own folder after it, for loose
    # sibling imports. The other way round, a module named like its package (pkg/pkg.py) hides the package.
    return [str(root), str(directory)], ".".join(path.relative_to(root).with_suffix("").parts)


def _put_first(entries: list[str]) -> None:
    for entry in reversed(entries):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


def import_environment(file: str | Path):
    """The file's module, imported (the probe: its classes are read, nothing is run)."""
    entries, dotted = module_target(file)
    _put_first(entries)
    if dotted:
        return importlib.import_module(dotted)
    path = Path(file).resolve()
    unique = f"hermes_env_{path.stem}_{abs(hash(str(path))):x}"  # a batch probe loads many files in one process
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_environment(file: str | Path) -> None:
    """Run the file as `__main__` (its `cli()`), loaded as import_environment would load it."""
    entries, dotted = module_target(file)
    _put_first(entries)
    if dotted:
        runpy.run_module(dotted, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(str(Path(file).resolve()), run_name="__main__")
