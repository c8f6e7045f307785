"""Find Atropos environments by reading source files (AST), never by importing them.

Importing an environment runs its module code and pulls in atroposlib/torch (seconds, and
whatever side effects the author wrote); parsing is milliseconds and safe on broken files.
A class is an environment when it inherits `BaseEnv` (any spelling: `BaseEnv`, an alias,
`atroposlib.envs.base.BaseEnv`, `base.BaseEnv`) directly or through other scanned classes,
in the same file or another scanned file.
"""

from __future__ import annotations

import ast
import io
import os
import threading
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_rl.core.base.errors import BadInput, NotFound
from hermes_rl.core.base.paths import PROJECT_ROOT, user_environments_dir
from hermes_rl.core.base.records import EnvironmentEntry

BASE_ENV = "BaseEnv"
MAX_FILE_BYTES = 2 * 1024 * 1024  # an environment bigger than this is data, not code
ENV_PATH_VAR = "HERMES_RL_ENV_PATH"
TINKER_ATROPOS_VAR = "HERMES_RL_TINKER_ATROPOS"


@dataclass(frozen=True)
class EnvInfo:
    name: str  # class attribute `name` (string literal), else the file stem
    class_name: str  # "" for a file that failed to parse
    file: str  # absolute path
    description: str  # first docstring line (class, else module), "" if none
    config_class: str | None  # from config_init's return annotation or `env_config_cls`
    source: str  # "project" | "user" | "tinker-atropos" | "extra"
    error: str | None = None  # why the file could not be read
    duplicate_of: str | None = None  # file of the earlier environment with the same name (that one wins)
    base_files: tuple[str, ...] = ()  # other scanned files this class inherits through (config cache keys)

    def to_dict(self) -> EnvironmentEntry:
        return {
            "name": self.name,
            "class_name": self.class_name,
            "file": self.file,
            "description": self.description,
            "config_class": self.config_class,
            "source": self.source,
            "error": self.error,
            "duplicate_of": self.duplicate_of,
        }


# --- directories -----------------------------------------------------------------------------


def _tinker_atropos_dirs() -> list[Path]:
    """tinker_atropos/environments of a checkout: $HERMES_RL_TINKER_ATROPOS, else beside the project."""
    candidates: list[Path] = []
    configured = os.environ.get(TINKER_ATROPOS_VAR)
    if configured:
        root = Path(configured).expanduser()
        # Accept the checkout root, its package folder, or the environments folder itself.
        candidates += [root / "tinker_atropos" / "environments", root / "environments", root]
    for sibling in ("tinker-atropos", "tinker_atropos"):
        candidates.append(PROJECT_ROOT.parent / sibling / "tinker_atropos" / "environments")
    for candidate in candidates:
        if candidate.is_dir() and candidate.name == "environments":
            return [candidate]
    return []


def environment_dirs() -> list[tuple[str, Path]]:
    """(source, dir) in scan order: project, user, tinker-atropos (when found), extra. Earlier wins on names."""
    dirs: list[tuple[str, Path]] = [
        ("project", PROJECT_ROOT / "environments"),
        ("user", user_environments_dir()),
    ]
    dirs += [("tinker-atropos", d) for d in _tinker_atropos_dirs()]
    for part in os.environ.get(ENV_PATH_VAR, "").split(os.pathsep):
        if part.strip():
            dirs.append(("extra", Path(part.strip()).expanduser()))
    seen: set[str] = set()
    unique = []
    for source, directory in dirs:
        key = os.path.realpath(directory)
        if key not in seen:
            seen.add(key)
            unique.append((source, directory.absolute()))
    return unique


# --- parsing one file ------------------------------------------------------------------------


@dataclass
class _ClassDecl:
    name: str
    bases: list[str]  # dotted spellings as written, e.g. "BaseEnv", "base.BaseEnv", "MathBase"
    env_name: str | None  # `name = "..."` class attribute
    description: str
    config_class: str | None


@dataclass
class _FileScan:
    classes: list[_ClassDecl] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted origin
    module_doc: str = ""
    error: str | None = None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):  # Generic[...] style bases: keep the outer name
        return _dotted(node.value)
    return None


def _first_line(doc: str | None) -> str:
    if not doc:
        return ""
    for line in doc.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _annotation_config(node: ast.AST | None) -> str | None:
    """Config class from `-> Tuple[MyConfig, ...]`, `-> tuple[MyConfig, ...]` or a string annotation."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.Subscript):
        inner = node.slice
        if isinstance(inner, ast.Tuple) and inner.elts:
            return _dotted(inner.elts[0])
        return None
    return None


def _class_decl(node: ast.ClassDef) -> _ClassDecl:
    env_name = None
    config_class = None
    annotated_config = None
    for stmt in node.body:
        targets: list[ast.AST] = []
        value = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            if target.id == "name" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                env_name = value.value
            elif target.id == "env_config_cls":
                config_class = _dotted(value) if value is not None else None
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "config_init":
            annotated_config = _annotation_config(stmt.returns)
    bases = [b for b in (_dotted(base) for base in node.bases) if b]
    return _ClassDecl(
        name=node.name,
        bases=bases,
        env_name=env_name,
        description=_first_line(ast.get_docstring(node)),
        config_class=annotated_config or config_class,
    )


def _read_source(path: Path, size: int) -> str:
    """Text of a Python file, or ValueError saying why it is not one."""
    if size > MAX_FILE_BYTES:
        raise ValueError(f"file too large ({size} bytes, limit {MAX_FILE_BYTES})")
    data = path.read_bytes()
    if b"\0" in data:
        raise ValueError("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except SyntaxError:  # undecodable bytes in the first two lines
        raise ValueError("not valid UTF-8 text, and no `# coding:` line says otherwise") from None
    except LookupError as exc:
        raise ValueError(f"unknown source encoding: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid {exc.encoding} text (byte {exc.start})") from None


def _scan_file(path: Path, size: int) -> _FileScan:
    try:
        text = _read_source(path, size)
        tree = ast.parse(text, filename=str(path))
    except ValueError as exc:
        return _FileScan(error=str(exc))
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        return _FileScan(error=f"syntax error{where}: {exc.msg}")
    except RecursionError:
        return _FileScan(error="source nested too deeply to parse")
    except OSError as exc:
        return _FileScan(error=f"cannot read file: {exc.strerror or exc}")
    scan = _FileScan(module_doc=_first_line(ast.get_docstring(tree)))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            scan.classes.append(_class_decl(node))
        elif isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            for alias in node.names:
                scan.imports[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:  # import a.b.c as x  ->  x means a.b.c
                    scan.imports[alias.asname] = alias.name
                else:  # import a.b.c  ->  binds only a
                    top = alias.name.split(".")[0]
                    scan.imports[top] = top
    return scan


# --- resolving inheritance across files -----------------------------------------------------


class _Resolver:
    """Decides which scanned classes inherit BaseEnv, following bases through scanned files."""

    def __init__(self, scans: list[tuple[str, Path, _FileScan]]):
        self.scans = scans
        self.by_file: dict[str, tuple[_FileScan, dict[str, _ClassDecl]]] = {}
        self.by_stem: dict[str, list[str]] = {}
        self.by_class: dict[str, list[str]] = {}
        for _, path, scan in scans:
            key = str(path)
            self.by_file[key] = (scan, {c.name: c for c in scan.classes})
            self.by_stem.setdefault(path.stem, []).append(key)
            for decl in scan.classes:
                self.by_class.setdefault(decl.name, []).append(key)
        self.memo: dict[tuple[str, str], tuple[bool, tuple[str, ...], str | None]] = {}

    def _locate(self, file: str, spelling: str) -> tuple[str, str] | None:
        """The scanned (file, class) a base spelling refers to, or None if it is not a scanned class."""
        scan, classes = self.by_file[file]
        parts = spelling.split(".")
        if len(parts) == 1 and spelling in classes:
            return file, spelling
        origin = scan.imports.get(parts[0])
        if origin:
            full = origin.split(".") + parts[1:]
            cls, module_tail = full[-1], [p for p in full[:-1] if p]
            if module_tail:
                stem = module_tail[-1].lstrip(".")
                here = os.path.dirname(file)  # a sibling module first, as Python's import would
                candidates = sorted(self.by_stem.get(stem, []), key=lambda f: os.path.dirname(f) != here)
                for candidate in candidates:
                    if cls in self.by_file[candidate][1]:
                        return candidate, cls
            return None  # imported from a module that is not scanned (e.g. a library class)
        # Not imported by name (star import, same-name module...): a unique scanned class of that name.
        owners = self.by_class.get(parts[-1], [])
        if len(owners) == 1:
            return owners[0], parts[-1]
        return None

    def _is_base_env(self, file: str, spelling: str) -> bool:
        scan, _ = self.by_file[file]
        parts = spelling.split(".")
        if parts[-1] == BASE_ENV:
            return True  # BaseEnv, base.BaseEnv, atroposlib.envs.base.BaseEnv
        origin = scan.imports.get(parts[0])
        return len(parts) == 1 and bool(origin) and origin.split(".")[-1] == BASE_ENV  # `import ... as Alias`

    def resolve(self, file: str, class_name: str, visiting: frozenset = frozenset()):
        """(is_env, files inherited through, config class inherited) for one class; cycles count as not env."""
        key = (file, class_name)
        if key in self.memo:
            return self.memo[key]
        if key in visiting:
            return False, (), None
        visiting = visiting | {key}
        decl = self.by_file[file][1][class_name]
        result: tuple[bool, tuple[str, ...], str | None] = (False, (), None)
        for base in decl.bases:
            if self._is_base_env(file, base):
                result = (True, (), decl.config_class)
                break
            target = self._locate(file, base)
            if target is None or target == key:
                continue
            is_env, via, inherited_config = self.resolve(target[0], target[1], visiting)
            if is_env:
                files = via if target[0] == file else (target[0],) + via
                result = (True, tuple(dict.fromkeys(files)), decl.config_class or inherited_config)
                break
        self.memo[key] = result
        return result

    def environments(self) -> list[EnvInfo]:
        found: list[EnvInfo] = []
        for source, path, scan in self.scans:
            if scan.error:
                found.append(
                    EnvInfo(
                        name=path.stem,
                        class_name="",
                        file=str(path),
                        description="",
                        config_class=None,
                        source=source,
                        error=scan.error,
                    )
                )
                continue
            for decl in scan.classes:
                is_env, via, config_class = self.resolve(str(path), decl.name)
                if not is_env:
                    continue
                found.append(
                    EnvInfo(
                        name=decl.env_name or path.stem,
                        class_name=decl.name,
                        file=str(path),
                        description=decl.description or scan.module_doc,
                        config_class=config_class,
                        source=source,
                        base_files=tuple(f for f in via if f != str(path)),
                    )
                )
        return found


# --- the cached scan ------------------------------------------------------------------------

_lock = threading.Lock()
_file_cache: dict[str, tuple[tuple[int, int], _FileScan]] = {}
_result_cache: tuple[tuple, list[EnvInfo]] | None = None


def _list_python_files(directory: Path) -> list[tuple[str, int, int]]:
    """(path, mtime_ns, size) of the top-level *.py files of a folder; unreadable entries are skipped.

    Plain strings, not Path objects: this runs on every call, and a warm scan is only these stats.
    """
    out = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return out
    for entry in entries:
        name = entry.name
        if not name.endswith(".py") or name.startswith(".") or name == "__init__.py":
            continue
        try:
            st = entry.stat()  # follows symlinks
        except OSError:
            continue
        if not entry.is_file():
            continue
        out.append((entry.path, st.st_mtime_ns, st.st_size))
    out.sort()
    return out


def _mark_duplicates(envs: list[EnvInfo]) -> list[EnvInfo]:
    first: dict[str, EnvInfo] = {}
    out = []
    for env in envs:
        winner = first.get(env.name) if env.error is None else None
        if winner is None:
            if env.error is None:
                first[env.name] = env
            out.append(env)
        else:
            out.append(replace(env, duplicate_of=winner.file))
    return out


def discover_environments() -> list[EnvInfo]:
    """Every environment in the scanned folders, in scan order. Never raises; re-parses only changed files."""
    global _result_cache
    try:
        signature = tuple(
            (source, path, mtime, size)
            for source, directory in environment_dirs()
            for path, mtime, size in _list_python_files(directory)
        )
    except Exception:  # the scan itself never fails (e.g. an odd HERMES_HOME)
        return []
    with _lock:
        if _result_cache is not None and _result_cache[0] == signature:
            return list(_result_cache[1])
        scans = []
        live = set()
        for source, key, mtime, size in signature:
            live.add(key)
            cached = _file_cache.get(key)
            if cached is None or cached[0] != (mtime, size):
                cached = ((mtime, size), _scan_file(Path(key), size))
                _file_cache[key] = cached
            scans.append((source, Path(key), cached[1]))
        for stale in set(_file_cache) - live:
            del _file_cache[stale]
        try:
            envs = _mark_duplicates(_Resolver(scans).environments())
        except Exception as exc:  # a resolver bug must not take the scan down
            envs = [
                EnvInfo(
                    name=path.stem,
                    class_name="",
                    file=str(path),
                    description="",
                    config_class=None,
                    source=source,
                    error=f"discovery failed: {exc!r}",
                )
                for source, path, _ in scans
            ]
        _result_cache = (signature, envs)
        return list(envs)


def clear_cache() -> None:
    """Forget every parsed file (benchmarks use this for a cold scan)."""
    global _result_cache
    with _lock:
        _file_cache.clear()
        _result_cache = None


def find_environment(name: str) -> EnvInfo:
    """The first usable environment with this name. NotFound lists the names; a broken file gives BadInput."""
    if not isinstance(name, str) or not name:
        raise BadInput("environment name must be a non-empty string", hint="see `hermes-rl envs`")
    envs = discover_environments()
    broken = None
    for env in envs:
        if env.name == name:
            if env.error is None:
                return env
            broken = broken or env
    if broken is not None:
        raise BadInput(
            f"environment {name!r} cannot be used: {broken.file}: {broken.error}",
            hint="fix the file; `hermes-rl envs` shows every problem",
        )
    names = sorted({env.name for env in envs if env.error is None})
    raise NotFound(
        f"no environment named {name!r}",
        hint=("available: " + ", ".join(names))
        if names
        else f"no environments found; put one in {user_environments_dir()}",
    )
