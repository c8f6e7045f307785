"""Find Atropos environments by reading source files (AST), never by importing them.

Importing an environment runs its module code and pulls in atroposlib/torch (seconds, and
whatever side effects the author wrote); parsing is milliseconds and safe on broken files.
A class is an environment when it inherits `BaseEnv` (any spelling: `BaseEnv`, an alias,
`atroposlib.envs.base.BaseEnv`, `base.BaseEnv`) directly or through other scanned classes,
in the same file or another scanned file. Every folder is scanned recursively; each file's parse is
cached on disk by (path, mtime, size), so a new process re-parses only what changed.
"""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import io
import json
import os
import re
import sys
import threading
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..base.errors import BadInput, NotFound
from ..base.formatting import shown_value
from ..base.fsutil import atomic_write_text, read_regular_bytes, read_regular_text
from ..base.paths import PROJECT_ROOT, rl_dir, user_environments_dir
from . import envsettings, verifiers_envs
from .envinfo import EnvInfo

BASE_ENV = "BaseEnv"
MAX_FILE_BYTES = 2 * 1024 * 1024  # an environment bigger than this is data, not code
MAX_DEPTH = 8  # folder levels below a root; deeper folders are skipped and reported
MAX_FILES = 20_000  # Python files per root; the rest are skipped and reported
# atroposlib's BaseEnv abstract methods: a class that implements neither, along its scanned chain, is a base.
BASE_ENV_ABSTRACT = ("get_next_item", "evaluate")
SKIPPED_DIRS = frozenset({"__pycache__", "site-packages", "node_modules", "venv"})
CACHE_VERSION = 1
ENV_PATH_VAR = "HERMES_RL_ENV_PATH"
TINKER_ATROPOS_VAR = "HERMES_RL_TINKER_ATROPOS"


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
    for part in envsettings.entries("folders")[0]:  # $HERMES_RL_ENV_PATH, else rl/envs.yaml
        dirs.append(("extra", Path(part).expanduser()))
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
    methods: list[str] = field(default_factory=list)  # names defined in the class body
    abstract_methods: list[str] = field(default_factory=list)  # those marked @abstractmethod


@dataclass
class _FileScan:
    classes: list[_ClassDecl] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted origin
    module_doc: str = ""
    error: str | None = None
    top_imports: list[str] = field(default_factory=list)  # top-level modules of absolute imports, anywhere

    def to_json(self) -> dict:
        return {
            "classes": [vars(c) for c in self.classes],
            "imports": self.imports,
            "module_doc": self.module_doc,
            "error": self.error,
            "top_imports": self.top_imports,
        }

    @classmethod
    def from_json(cls, data: dict) -> _FileScan:
        return cls(
            classes=[_ClassDecl(**c) for c in data["classes"]],
            imports=dict(data["imports"]),
            module_doc=data["module_doc"],
            error=data["error"],
            top_imports=list(data["top_imports"]),
        )


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
    methods: list[str] = []
    abstract: list[str] = []
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods.append(stmt.name)
            if any((_dotted(d) or "").split(".")[-1] == "abstractmethod" for d in stmt.decorator_list):
                abstract.append(stmt.name)
        targets: list[ast.expr] = []
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
        methods=methods,
        abstract_methods=abstract,
    )


def _read_source(path: Path, size: int) -> str:
    """Text of a Python file, or ValueError saying why it is not one."""
    if size > MAX_FILE_BYTES:
        raise ValueError(f"file too large ({size} bytes, limit {MAX_FILE_BYTES})")
    data = read_regular_bytes(path)
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
    tops: dict[str, None] = {}
    for inner in ast.walk(tree):  # imports inside functions and try blocks name import roots too
        if isinstance(inner, ast.Import):
            for alias in inner.names:
                tops[alias.name.split(".")[0]] = None
        elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
            tops[inner.module.split(".")[0]] = None
    scan.top_imports = list(tops)
    return scan


# --- resolving inheritance across files -----------------------------------------------------


class _Resolver:
    """Decides which scanned classes inherit BaseEnv, following bases through scanned files."""

    def __init__(self, scans: list[tuple[str, str, Path, _FileScan]]):
        self.scans = scans
        self.by_file: dict[str, tuple[_FileScan, dict[str, _ClassDecl]]] = {}
        self.by_stem: dict[str, list[str]] = {}
        self.by_class: dict[str, list[str]] = {}
        for _, _, path, scan in scans:
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
        return len(parts) == 1 and origin is not None and origin.split(".")[-1] == BASE_ENV  # `import ... as Alias`

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

    def pending_abstract(self, file: str, class_name: str, visiting: frozenset = frozenset()) -> frozenset[str]:
        """Abstract methods no class along this scanned chain implements. A base outside the scan
        (a mixin, a library class) may implement BaseEnv's, so only explicit @abstractmethods count then."""
        key = (file, class_name)
        if key in visiting:
            return frozenset()
        decl = self.by_file[file][1][class_name]
        pending: set[str] = set()
        outside = False
        for base in decl.bases:
            if self._is_base_env(file, base):
                pending |= set(BASE_ENV_ABSTRACT)
                continue
            target = self._locate(file, base)
            if target is None:
                outside = True
            elif target != key:
                pending |= self.pending_abstract(target[0], target[1], visiting | {key})
        if outside:
            pending -= set(BASE_ENV_ABSTRACT)
        pending -= set(decl.methods) - set(decl.abstract_methods)
        return frozenset(pending | set(decl.abstract_methods))

    def environments(self) -> list[EnvInfo]:
        found: list[EnvInfo] = []
        inherited: dict[tuple[str, str], list[str]] = {}  # (file, class) -> classes deriving from it
        unnamed: set[tuple[str, str]] = set()  # classes without their own `name`
        for source, root, path, scan in self.scans:
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
                        root=root,
                    )
                )
                continue
            for decl in scan.classes:
                is_env, via, config_class = self.resolve(str(path), decl.name)
                if not is_env:
                    continue
                for base in decl.bases:
                    target = self._locate(str(path), base)
                    if target is not None and target != (str(path), decl.name):
                        inherited.setdefault(target, []).append(decl.name)
                missing = self.pending_abstract(str(path), decl.name)
                if decl.env_name is None:
                    unnamed.add((str(path), decl.name))
                found.append(
                    EnvInfo(
                        name=decl.env_name or path.stem,
                        class_name=decl.name,
                        file=str(path),
                        description=decl.description or scan.module_doc,
                        config_class=config_class,
                        source=source,
                        base_files=tuple(f for f in via if f != str(path)),
                        abstract=f"abstract: {', '.join(sorted(missing))} not implemented" if missing else None,
                        root=root,
                        imports=tuple(scan.top_imports),
                    )
                )
        # A class others derive from is a base when it has no `name` of its own either; a named,
        # complete environment that another one extends (gsm8k and a distillation variant) still runs.
        out = []
        for env in found:
            children = inherited.get((env.file, env.class_name))
            if children and env.abstract is None and (env.file, env.class_name) in unnamed:
                env = replace(env, abstract=f"a base class: {', '.join(sorted(set(children)))} inherit from it")
            out.append(env)
        return out


# --- walking the folders ----------------------------------------------------------------------


def _skipped_dir(entry: os.DirEntry) -> bool:
    name = entry.name
    if name.startswith(".") or name in SKIPPED_DIRS or name.endswith(".egg-info"):
        return True
    return os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))  # a virtualenv under any name


def _list_python_files(directory: Path, notices: list[str]) -> list[tuple[str, int, int]]:
    """(path, mtime_ns, size) of every *.py below a folder, depth first in name order. Hidden folders,
    caches, virtualenvs, site-packages and node_modules are skipped; symlinked folders are followed once
    (a loop is not); what the depth and file limits leave out is reported in `notices`.

    Plain strings, not Path objects: this runs on every call, and a warm scan is only these stats.
    """
    out: list[tuple[str, int, int]] = []
    seen: set[tuple[int, int]] = set()
    too_deep = 0
    stack = [(str(directory), 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = os.stat(folder)
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue  # a symlink loop, or the same folder reached twice
        seen.add((st.st_dev, st.st_ino))
        subdirs = []
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir():
                    if not _skipped_dir(entry):
                        subdirs.append(entry.path)
                    continue
                if not name.endswith(".py") or name.startswith(".") or name == "__init__.py":
                    continue
                if not entry.is_file():
                    continue
                fst = entry.stat()  # follows symlinks
            except OSError:
                continue
            out.append((entry.path, fst.st_mtime_ns, fst.st_size))
        if depth >= MAX_DEPTH:
            too_deep += len(subdirs)
        else:
            stack.extend((sub, depth + 1) for sub in reversed(subdirs))
    if too_deep:
        notices.append(f"{directory}: {too_deep} folder(s) deeper than {MAX_DEPTH} levels not scanned")
    out.sort()
    if len(out) > MAX_FILES:
        notices.append(
            f"{directory}: {len(out) - MAX_FILES} of {len(out)} Python files not scanned (limit {MAX_FILES})"
        )
        out = out[:MAX_FILES]
    return out


# --- ids -------------------------------------------------------------------------------------


FIXED_SOURCES = ("project", "user")  # roots every configuration scans: their environments keep bare names


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip(".") or "_"


_GENERIC_FOLDERS = frozenset({"environments", "envs", "env", "src", "lib"})


def _root_label(source: str, root: str) -> str:
    """`project`, `user`, `tinker-atropos`; an extra root by its folder's name (its parent's when the
    name says nothing: `atropos/environments` is `atropos`)."""
    if source != "extra":
        return source
    folder = Path(root)
    return _clean(folder.parent.name if folder.name.lower() in _GENERIC_FOLDERS and folder.parent.name else folder.name)


def _legacy_qualifiers(env: EnvInfo) -> list[str]:
    """The qualifiers ids were once chosen from (shortest unique among the roots configured then): kept
    so that a saved selection or draft under such an id still finds its environment."""
    rel = Path(os.path.relpath(env.file, env.root) if env.root else env.file).with_suffix("")
    label = _root_label(env.source, env.root)
    dotted = ".".join(rel.parts)
    return [_clean(q) for q in (label, Path(env.file).stem, dotted, f"{label}.{dotted}.{env.class_name}")]


def _assign_ids(envs: list[EnvInfo]) -> list[EnvInfo]:
    """Ids that depend only on an environment's own root and path, never on which other roots are
    configured. In the project and user folders (always scanned) the first runnable environment of a
    name has the bare name; every other environment is `name@ROOT` (ROOT: `project`, `user`,
    `tinker-atropos`, or an extra root's folder name), or `name@ROOT.sub.module` when its root holds
    several of that name (`.Class` added when one file holds two). Only two extra roots of the same
    label holding the same id make the later one `…-2`."""

    first_of_name: dict[str, int] = {}
    bare: dict[str, int] = {}
    for index, env in enumerate(envs):
        first_of_name.setdefault(env.name, index)
        if env.source in FIXED_SOURCES:
            current = bare.get(env.name)
            if current is None or (not _runnable(envs[current]) and _runnable(env)):
                bare[env.name] = index
    per_root: dict[tuple[str, str], list[int]] = {}
    for index, env in enumerate(envs):
        per_root.setdefault((env.root, env.name), []).append(index)
    out = list(envs)
    taken: set[str] = set()
    for index, env in enumerate(envs):
        if bare.get(env.name) == index:
            new_id = env.name
        else:
            siblings = [i for i in per_root[(env.root, env.name)] if bare.get(env.name) != i]
            rel = Path(os.path.relpath(env.file, env.root) if env.root else env.file).with_suffix("")
            qualifier = _root_label(env.source, env.root)
            if len(siblings) > 1:
                qualifier += "." + _clean(".".join(rel.parts))
                same_file = [i for i in siblings if envs[i].file == env.file]
                if len(same_file) > 1:
                    qualifier += "." + _clean(env.class_name or "_")
            new_id = f"{env.name}@{qualifier}"
        unique, n = new_id, 1
        while unique in taken:  # one file reached twice (a symlinked root), two roots of one label
            n += 1
            unique = f"{new_id}-{n}"
        taken.add(unique)
        winner = first_of_name[env.name]
        aliases = tuple(a for a in dict.fromkeys(f"{env.name}@{q}" for q in _legacy_qualifiers(env)) if a != unique)
        out[index] = replace(
            env, id=unique, aliases=aliases, duplicate_of=envs[winner].file if winner != index else None
        )
    return out


def _runnable(env: EnvInfo) -> bool:
    return env.usable and env.abstract is None


# --- the cached scan ------------------------------------------------------------------------

_lock = threading.Lock()
_file_cache: dict[str, tuple[tuple[int, int], _FileScan]] = {}
_result_cache: tuple[tuple, list[EnvInfo], list[str]] | None = None
_disk_loaded = False


def _disk_cache_path() -> Path:
    return rl_dir() / "cache" / "discovery.json"


def _load_disk_cache() -> None:
    """Parses from an earlier process: a new CLI call re-parses only the files that changed since."""
    global _disk_loaded
    _disk_loaded = True
    try:
        data = json.loads(read_regular_text(_disk_cache_path(), follow=False))  # a cache: never through a link
        if data.get("version") != CACHE_VERSION:
            return
        for path, (mtime, size, scan) in data["files"].items():
            _file_cache.setdefault(path, ((mtime, size), _FileScan.from_json(scan)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no cache, or a damaged one: parse again


def _save_disk_cache() -> None:
    files = {path: [key[0], key[1], scan.to_json()] for path, (key, scan) in _file_cache.items()}
    try:
        atomic_write_text(_disk_cache_path(), json.dumps({"version": CACHE_VERSION, "files": files}))
    except Exception:
        pass  # the cache is an optimisation; a read-only home still discovers


def _scan_all() -> tuple[list[EnvInfo], list[str]]:
    global _result_cache
    notices: list[str] = []
    try:
        signature = tuple(
            (source, str(directory), path, mtime, size)
            for source, directory in environment_dirs()
            for path, mtime, size in _list_python_files(directory, notices)
        )
    except Exception:  # the scan itself never fails (e.g. an odd HERMES_HOME)
        return [], []
    with _lock:
        if _result_cache is not None and _result_cache[0] == signature:
            return list(_result_cache[1]), list(_result_cache[2])
        if not _disk_loaded:
            _load_disk_cache()
        scans = []
        live = set()
        changed = False
        for source, root, key, mtime, size in signature:
            live.add(key)
            cached = _file_cache.get(key)
            if cached is None or cached[0] != (mtime, size):
                cached = ((mtime, size), _scan_file(Path(key), size))
                _file_cache[key] = cached
                changed = True
            scans.append((source, root, Path(key), cached[1]))
        for stale in set(_file_cache) - live:
            del _file_cache[stale]
            changed = True
        if changed:
            _save_disk_cache()
        try:
            envs = _assign_ids(_Resolver(scans).environments())
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
                    id=str(path),
                    root=root,
                )
                for source, root, path, _ in scans
            ]
        _result_cache = (signature, envs, notices)
        return list(envs), list(notices)


def _with_tasksets() -> tuple[list[EnvInfo], list[str]]:
    envs, notices = _scan_all()
    try:
        tasksets, more = verifiers_envs.discover({env.id for env in envs})
    except Exception as exc:  # a listing bug must not take the Atropos environments down
        return envs, notices + [f"verifiers tasksets not listed: {exc!r}"]
    return envs + tasksets, notices + more


def discover_environments() -> list[EnvInfo]:
    """Every environment in the scanned folders, in scan order, then the verifiers tasksets of the
    environment interpreters (core.envs.verifiers_envs). Never raises; re-parses only changed files."""
    return _with_tasksets()[0]


def discovery_notices() -> list[str]:
    """What the scan's limits left out (folders too deep, too many files), and interpreters that could
    not list their tasksets, and a bad rl/envs.yaml, in words."""
    problem = envsettings.saved()[1]
    return _with_tasksets()[1] + ([problem] if problem else [])


def clear_cache(disk: bool = False) -> None:
    """Forget every parsed file (benchmarks use this for a cold scan); `disk` removes the file cache too."""
    global _result_cache, _disk_loaded
    with _lock:
        _file_cache.clear()
        _result_cache = None
        _disk_loaded = not disk and _disk_loaded
        if disk:
            try:
                _disk_cache_path().unlink()
            except OSError:
                pass


def _describe(env: EnvInfo) -> str:
    return f"{env.id} ({env.class_name or 'unreadable'} in {env.file})"


def find_environment(ref: str) -> EnvInfo:
    """An environment by its id, its name (the first of that name), its class name or its file path.
    NotFound lists the ids; an ambiguous class name or a broken file gives BadInput."""
    if not isinstance(ref, str) or not ref:
        raise BadInput("environment name must be a non-empty string", hint="see `hermes-rl envs`")
    envs = discover_environments()
    matches = [env for env in envs if env.id == ref]
    if not matches:
        named = [env for env in envs if env.name == ref]
        matches = [env for env in named if env.id == ref] or named[:1]
    if not matches:
        matches = [env for env in envs if env.class_name == ref]
    if not matches and (os.sep in ref or ref.endswith(".py")):
        target = os.path.realpath(os.path.expanduser(ref.split("::")[0]))
        matches = [env for env in envs if os.path.realpath(env.file) == target]
        if "::" in ref:
            matches = [env for env in matches if env.class_name == ref.split("::", 1)[1]]
    if len(matches) > 1:
        raise BadInput(
            f"{ref!r} is ambiguous: " + "; ".join(_describe(env) for env in matches),
            hint="select one by its id",
        )
    if matches:
        env = matches[0]
        if env.error is not None:
            raise BadInput(
                f"environment {ref!r} cannot be used: {env.file}: {env.error}",
                hint="fix the file; `hermes-rl envs` shows every problem",
            )
        return env
    legacy = [env for env in envs if ref in env.aliases]
    if len(legacy) == 1:  # an id saved before ids stopped depending on the other roots
        return find_environment(legacy[0].id)
    raise NotFound(f"no environment named {shown_value(ref, 100)}", hint=_did_you_mean(ref, envs))


def _did_you_mean(ref: str, envs: list[EnvInfo]) -> str:
    """The ids nearest to what was asked, by id, name, class name or file stem; never the whole list."""
    usable = [env for env in envs if env.usable]
    if not usable:
        return f"no environments found; put one in {user_environments_dir()}"
    keys: dict[str, list[str]] = {}
    for env in usable:
        for key in (env.id, env.name, env.class_name, Path(env.file).stem):
            if key:
                keys.setdefault(key.lower(), []).append(env.id)
    wanted = ref.lower().split("@")[0] if "@" in ref and ref.lower() not in keys else ref.lower()
    close = difflib.get_close_matches(wanted, list(keys), n=5, cutoff=0.6)
    close += [k for k in keys if wanted in k and k not in close]  # `gsm8k` finds every gsm8k@…
    ids = list(dict.fromkeys(i for key in close for i in keys[key]))[:5]
    every = f"`hermes-rl envs` lists all {len(usable)}"
    return f"did you mean {', '.join(ids)}? ({every})" if ids else every


# --- import roots ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportRoot:
    """How an environment file is meant to be imported: `root` first on sys.path (then the file's own
    folder, for loose sibling imports), and the working folder its relative paths (configs/...) assume.
    Empty for the project's own environments, which import as the installed hermes_rl package."""

    root: str
    cwd: str
    sys_path: tuple[str, ...]
    why: str

    def pythonpath(self, existing: str | None = None) -> str:
        """PYTHONPATH for a child: these folders first, the user's own PYTHONPATH kept after them."""
        parts = list(self.sys_path) + [p for p in (existing or "").split(os.pathsep) if p]
        return os.pathsep.join(dict.fromkeys(parts))


def _installed(module: str) -> bool:
    """Importable from the installed packages (not from the working folder, which is the caller's)."""
    if module in sys.builtin_module_names:
        return True
    # Neither the caller's folder nor the project's checkout (its folders import only as hermes_rl.*).
    here = {os.path.realpath(p) for p in ("", os.getcwd(), PROJECT_ROOT)}
    # The user's PYTHONPATH as the run's processes will get it (this process may have started without it).
    user_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [p for p in (*user_path, *sys.path) if os.path.realpath(p) not in here]
    try:
        return importlib.machinery.PathFinder.find_spec(module, path) is not None
    except (ImportError, ValueError):
        return False


def import_root(env: EnvInfo) -> ImportRoot:
    """The import root the author intended: the top of the file's `__init__.py` packages; above that,
    the nearest folder (up to two levels above the scanned root) holding a top-level module the file
    imports that its own folder does not (`environments.*` in an Atropos clone, `tinker_atropos` in a
    checkout); else the file's own folder."""
    if env.source == "project":
        return ImportRoot("", "", (), "the project's package")
    here = Path(env.file).parent
    root, why = here, "the file's own folder"
    while (root / "__init__.py").exists() and root.parent != root:
        root, why = root.parent, "the top of its package"
    scanned = Path(env.root) if env.root else here
    # A checkout's environments folder is <checkout>/tinker_atropos/environments; any other root may
    # import from the folder it sits in (an Atropos clone's environments/ imports `environments.*`).
    limit = scanned.parent.parent if env.source == "tinker-atropos" else scanned.parent
    ancestors = [p for p in [here, *here.parents] if p == limit or limit in p.parents]
    for module in env.imports:
        if (here / module).is_dir() or (here / f"{module}.py").is_file() or _installed(module):
            continue  # a sibling (its own folder is on sys.path anyway), or an installed package
        for folder in ancestors[1:]:
            if (folder / module).is_dir() or (folder / f"{module}.py").is_file():
                if folder in root.parents:
                    root, why = folder, f"it imports {module}, which lives there"
                break
    sys_path = (str(root),) + ((str(here),) if here != root else ())
    return ImportRoot(str(root), str(root), sys_path, why)
