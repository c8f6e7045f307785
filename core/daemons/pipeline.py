"""A run's processes as data (DESIGN §5): specs the supervisor executes without knowing what they are.

`training_pipeline()` (the real run's specs) lives in core/runs/training.py; this module holds the
process model, its JSON form, validation, placeholder substitution and free-port picking.

Placeholders usable in argv, env values, cwd, completion_file and the readiness url:
`{port:NAME}` (a port picked free per run on 127.0.0.1), `{run_dir}`, `{run_id}`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from ..base.errors import BadInput
from ..base.fsutil import atomic_write_json, atomic_write_text, file_lock, open_regular, read_json, read_regular_text
from ..base.names import is_name
from ..base.paths import PROCESS_NAME_RE, PROJECT_ROOT, ensure_private_dir, rl_dir
from ..base.secrets import RUN_KEYS, SECRET_NAMES, redact
from ..base.states import ProcState
from . import launchers

READINESS_KINDS = ("http", "log", "none")
RESTART_MODES = ("no", "on_failure")
DEPENDENCY_CONDITIONS = ("started", "ready", "completed")
PORT_NAME_RE = re.compile(r"^[a-z0-9_]{1,32}$")
MODULE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PORT_PLACEHOLDER_RE = re.compile(r"\{port:([^{}]*)\}")


@dataclass
class Readiness:
    kind: str = "none"  # "http" (GET url -> 200) | "log" (regex on the process log) | "none"
    url: str | None = None
    pattern: str | None = None
    timeout_s: float = 60.0
    source: str | None = None  # `log`: the process whose log is read (default its own), from its size at the start


@dataclass
class RestartPolicy:
    mode: str = "no"  # "no" | "on_failure"
    max_restarts: int = 0
    backoff_s: float = 1.0  # delay before restart n is backoff_s * 2**(n-1), capped at MAX_BACKOFF_S


MAX_BACKOFF_S = 60.0


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[str] = field(default_factory=list)  # names; values come from the supervisor's env
    cwd: str | None = None  # default: the run folder
    depends_on: list[tuple[str, str]] = field(default_factory=list)
    readiness: Readiness = field(default_factory=Readiness)
    required: bool = True  # its exit ends the run (as failed, unless it completes the run)
    completes_run: bool = False  # its clean exit (with completion_file present) completes the run
    completion_file: str | None = None
    # Once ready, a clean exit means its share of the run's work is done (an Atropos environment returns
    # when run-api has handed out total_steps while the trainer still has batches queued): the run goes on.
    done_on_clean_exit: bool = False
    # The process this one sends work to (an environment worker feeds the trainer). When that process says it
    # waits for input (`waiting_for_batch_s` in its status_url answer) and every process feeding it has ended,
    # the run cannot go on: one that ended cleanly is restarted once by its policy, then the run fails.
    feeds: str | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    stop_timeout: float = 10.0  # SIGTERM to the group, SIGKILL after this many seconds
    port: str | None = None  # which key of the run's ports this process serves
    status_url: str | None = None  # a JSON endpoint the supervisor records in health.json while it runs
    launcher: str = "local"  # a launcher's name (daemons.launchers.registry): "local", "slurm", a plug-in's
    settings: dict = field(default_factory=dict)  # that launcher's settings (slurm: launchers.slurm.SlurmSettings)
    # Modules its start-up imports: a local `python -m` process naming some starts as a fork of one warm
    # server per run that imported them all once (daemons.warm.client.WarmStarts), where it can.
    warm: list[str] = field(default_factory=list)


def restart_delay(policy: RestartPolicy, attempt: int) -> float:
    """Seconds to wait before restart number `attempt` (1-based): exponential backoff."""
    return min(MAX_BACKOFF_S, max(0.0, policy.backoff_s) * (2 ** max(0, attempt - 1)))


# ---------------------------------------------------------------- JSON


def spec_to_json(spec: ProcessSpec) -> dict:
    data = asdict(spec)
    data["depends_on"] = [list(dep) for dep in spec.depends_on]
    return data


def specs_to_json(specs: list[ProcessSpec]) -> list[dict]:
    return [spec_to_json(spec) for spec in specs]


def _bad(message: str) -> BadInput:
    return BadInput(message, hint="see DESIGN.md §5 for the process spec fields")


def _number(value, what: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < minimum:
        raise _bad(f"{what} must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def spec_from_json(data: dict) -> ProcessSpec:
    if not isinstance(data, dict):
        raise _bad(f"a process spec must be an object, got {type(data).__name__}")
    known = {f for f in ProcessSpec.__dataclass_fields__} | {"slurm"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise _bad(f"unknown process spec field(s): {', '.join(unknown)}")
    if "name" not in data or "argv" not in data:
        raise _bad("a process spec needs `name` and `argv`")
    values = dict(data)
    if "slurm" in values:  # a pipeline.json written before launchers were plug-ins
        legacy = values.pop("slurm")
        values.setdefault("settings", legacy if values.get("launcher") == "slurm" else {})
    readiness = values.get("readiness") or {}
    if isinstance(readiness, Readiness):
        readiness = asdict(readiness)
    if not isinstance(readiness, dict):
        raise _bad(f"readiness must be an object, got {readiness!r}")
    restart = values.get("restart") or {}
    if isinstance(restart, RestartPolicy):
        restart = asdict(restart)
    if not isinstance(restart, dict):
        raise _bad(f"restart must be an object, got {restart!r}")
    try:
        values["readiness"] = Readiness(**readiness)
        values["restart"] = RestartPolicy(**restart)
    except TypeError as exc:
        raise _bad(f"process {data.get('name')!r}: {exc}") from None
    values["depends_on"] = [tuple(dep) for dep in values.get("depends_on") or []]
    values["argv"] = list(values["argv"]) if isinstance(values["argv"], (list, tuple)) else values["argv"]
    spec = ProcessSpec(**values)
    validate_spec(spec)
    return spec


def specs_from_json(data: list) -> list[ProcessSpec]:
    if not isinstance(data, list):
        raise _bad("a pipeline is a list of process specs")
    specs = [spec_from_json(item) for item in data]
    validate_specs(specs)
    return specs


def load_pipeline(path: str | os.PathLike) -> list[ProcessSpec]:
    return [current_names(spec) for spec in specs_from_json(json.loads(read_regular_text(path)))]


# Before hermes-rl installed as one namespace, pipeline.json started `-m dataplane.…` with the project
# root injected as PYTHONPATH and as the working folder. Such a run's specs are read with today's names,
# and the injected root is dropped, so the user's own PYTHONPATH reaches the process unchanged.
_PACKAGE_FOLDERS = ("core", "tui", "dataplane", "environments")


def current_names(spec: ProcessSpec) -> ProcessSpec:
    root = os.path.realpath(PROJECT_ROOT)
    argv = list(spec.argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1].split(".")[0] in _PACKAGE_FOLDERS:
            argv[i + 1] = "hermes_rl." + argv[i + 1]
    env = dict(spec.env)
    if "PYTHONPATH" in env and all(os.path.realpath(p) == root for p in env["PYTHONPATH"].split(os.pathsep) if p):
        del env["PYTHONPATH"]
    cwd = None if spec.cwd and os.path.realpath(spec.cwd) == root else spec.cwd
    return replace(spec, argv=argv, env=env, cwd=cwd)


# ---------------------------------------------------------------- validation


def validate_spec(spec: ProcessSpec) -> None:
    name = spec.name
    if not is_name(PROCESS_NAME_RE, name):
        raise _bad(f"invalid process name {name!r}: use 1-32 of a-z 0-9 _ -")
    if not isinstance(spec.argv, list) or not spec.argv or not all(isinstance(a, str) for a in spec.argv):
        raise _bad(f"process {name!r}: argv must be a non-empty list of strings")
    if not isinstance(spec.env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items()
    ):
        raise _bad(f"process {name!r}: env must map strings to strings")
    if not isinstance(spec.secret_env, list) or not all(isinstance(s, str) for s in spec.secret_env):
        raise _bad(f"process {name!r}: secret_env must be a list of variable names")
    leaked = sorted(k for k in spec.env if k in (*SECRET_NAMES, *RUN_KEYS))
    if leaked:
        raise _bad(f"process {name!r}: secret {leaked[0]} must be named in secret_env, not given in env")
    for dep in spec.depends_on:
        if len(dep) != 2 or dep[1] not in DEPENDENCY_CONDITIONS:
            raise _bad(
                f"process {name!r}: depends_on entries are (name, condition) with condition one of "
                f"{', '.join(DEPENDENCY_CONDITIONS)}; got {list(dep)!r}"
            )
    if not isinstance(spec.warm, list) or not all(is_name(MODULE_NAME_RE, m) for m in spec.warm):
        raise _bad(f"process {name!r}: warm must be a list of module names, got {spec.warm!r}")
    r = spec.readiness
    if r.kind not in READINESS_KINDS:
        raise _bad(f"process {name!r}: readiness kind must be one of {', '.join(READINESS_KINDS)}, got {r.kind!r}")
    if r.kind == "http" and not (isinstance(r.url, str) and r.url.startswith("http://")):
        raise _bad(f"process {name!r}: http readiness needs an http:// url")
    if r.kind == "log":
        if not isinstance(r.pattern, str) or not r.pattern:
            raise _bad(f"process {name!r}: log readiness needs a regex pattern")
        try:
            re.compile(r.pattern)
        except re.error as exc:
            raise _bad(f"process {name!r}: bad readiness pattern {r.pattern!r}: {exc}") from None
    if r.source is not None and (r.kind != "log" or not isinstance(r.source, str)):
        raise _bad(f"process {name!r}: readiness source names a process whose log a `log` readiness check reads")
    if spec.status_url is not None and not (isinstance(spec.status_url, str) and spec.status_url.startswith("http://")):
        raise _bad(f"process {name!r}: status_url must be an http:// url")
    _number(r.timeout_s, f"process {name!r}: readiness timeout_s", 0.001)
    p = spec.restart
    if p.mode not in RESTART_MODES:
        raise _bad(f"process {name!r}: restart mode must be one of {', '.join(RESTART_MODES)}, got {p.mode!r}")
    if isinstance(p.max_restarts, bool) or not isinstance(p.max_restarts, int) or p.max_restarts < 0:
        raise _bad(f"process {name!r}: max_restarts must be an integer >= 0")
    _number(p.backoff_s, f"process {name!r}: backoff_s")
    _number(spec.stop_timeout, f"process {name!r}: stop_timeout")
    if spec.port is not None and not is_name(PORT_NAME_RE, spec.port):
        raise _bad(f"process {name!r}: port must name a key of the run's ports, got {spec.port!r}")
    launcher = launchers.find(spec.launcher) if isinstance(spec.launcher, str) else None
    if launcher is None:
        raise _bad(f"process {name!r}: launcher must be one of {', '.join(launchers.names())}, got {spec.launcher!r}")
    if not isinstance(spec.settings, dict):
        raise _bad(f"process {name!r}: settings must be an object of {spec.launcher} settings")
    try:
        launcher.settings(spec.settings)
    except BadInput as exc:
        raise _bad(f"process {name!r}: {exc}") from None


def validate_specs(specs: list[ProcessSpec]) -> None:
    """Each spec valid, names unique, dependencies known and acyclic."""
    if not specs:
        raise _bad("a pipeline needs at least one process")
    names = set()
    for spec in specs:
        validate_spec(spec)
        if spec.name in names:
            raise _bad(f"duplicate process name {spec.name!r}")
        names.add(spec.name)
    for spec in specs:
        for dep, _ in spec.depends_on:
            if dep not in names:
                raise _bad(f"process {spec.name!r} depends on unknown process {dep!r}")
            if dep == spec.name:
                raise _bad(f"process {spec.name!r} depends on itself")
        if spec.readiness.source is not None and spec.readiness.source not in names:
            raise _bad(f"process {spec.name!r}: readiness reads the log of unknown process {spec.readiness.source!r}")
        if spec.feeds is not None:
            fed = next((s for s in specs if s.name == spec.feeds), None)
            if fed is None or fed is spec:
                raise _bad(f"process {spec.name!r} feeds {spec.feeds!r}, which is not another process of the run")
            if fed.status_url is None:
                raise _bad(f"process {spec.name!r} feeds {spec.feeds!r}, which has no status_url to say it waits")
    start_order(specs)  # raises on a cycle


def start_order(specs: list[ProcessSpec]) -> list[str]:
    """Names in dependency order, stable with respect to the list order. Stop order is its reverse."""
    remaining = {s.name: {d for d, _ in s.depends_on} for s in specs}
    order: list[str] = []
    while remaining:
        ready = [s.name for s in specs if s.name in remaining and not remaining[s.name] - set(order)]
        if not ready:
            raise _bad(f"dependency cycle among: {', '.join(sorted(remaining))}")
        for name in ready:
            order.append(name)
            del remaining[name]
    return order


# ---------------------------------------------------------------- placeholders and ports


def _strings(spec: ProcessSpec) -> Iterator[str]:
    yield from spec.argv
    yield from spec.env.values()
    for value in (spec.cwd, spec.completion_file, spec.readiness.url, spec.status_url):
        if value:
            yield value


def port_names(specs: list[ProcessSpec]) -> list[str]:
    """Every port name the specs use, by `{port:NAME}` or a spec's `port` key, in first-seen order."""
    names: list[str] = []
    for spec in specs:
        found = [m.group(1) for text in _strings(spec) for m in _PORT_PLACEHOLDER_RE.finditer(text)]
        if spec.port:
            found.append(spec.port)
        for name in found:
            if not is_name(PORT_NAME_RE, name):
                raise _bad(f"process {spec.name!r}: bad port placeholder name {name!r}")
            if name not in names:
                names.append(name)
    return names


def substitute(specs: list[ProcessSpec], *, ports: dict[str, int], run_dir: str, run_id: str) -> list[ProcessSpec]:
    """Copies of specs with `{port:NAME}`, `{run_dir}` and `{run_id}` replaced. Unknown ports are BadInput."""

    @overload
    def fill(text: str, owner: str) -> str: ...
    @overload
    def fill(text: str | None, owner: str) -> str | None: ...
    def fill(text: str | None, owner: str) -> str | None:
        if text is None:
            return None

        def port(match: re.Match) -> str:
            name = match.group(1)
            if name not in ports:
                raise _bad(f"process {owner!r} uses port {name!r}, which the run has not allocated")
            return str(int(ports[name]))

        text = _PORT_PLACEHOLDER_RE.sub(port, text)
        return text.replace("{run_dir}", str(run_dir)).replace("{run_id}", run_id)

    out = []
    for spec in specs:
        out.append(
            replace(
                spec,
                argv=[fill(a, spec.name) for a in spec.argv],
                env={k: fill(v, spec.name) for k, v in spec.env.items()},
                cwd=fill(spec.cwd, spec.name),
                completion_file=fill(spec.completion_file, spec.name),
                readiness=replace(spec.readiness, url=fill(spec.readiness.url, spec.name)),
                status_url=fill(spec.status_url, spec.name),
                depends_on=list(spec.depends_on),
                secret_env=list(spec.secret_env),
            )
        )
    return out


# Ports handed out recently, so two runs launched at the same moment never pick the same port
# between "the kernel said it is free" and "the child bound it".
_RESERVE_SECONDS = 120.0


@contextmanager
def _locked_reservations() -> Iterator[dict]:
    """{port: when it was handed out} of the last _RESERVE_SECONDS, held under the file's lock; what the
    block leaves in the dict is written back."""
    path = ensure_private_dir(rl_dir()) / ".ports.json"
    with file_lock(path):
        try:
            data = read_json(path)
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        now = time.time()
        data = {k: v for k, v in data.items() if isinstance(v, (int, float)) and now - v < _RESERVE_SECONDS}
        yield data
        atomic_write_json(path, data)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind host:port now (SO_REUSEADDR, as servers do: TIME_WAIT is not "in use")."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        sock.close()


def free_ports(names: list[str] | tuple[str, ...]) -> dict[str, int]:
    """One free TCP port on 127.0.0.1 per name, distinct, not handed out to another run in the last 2 min."""
    names = list(dict.fromkeys(names))
    ports: dict[str, int] = {}
    with _locked_reservations() as reserved:
        held: list[socket.socket] = []
        try:
            for name in names:
                for _ in range(64):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.bind(("127.0.0.1", 0))
                    held.append(sock)  # keep it bound so the next pick differs
                    port = sock.getsockname()[1]
                    if str(port) not in reserved:
                        break
                ports[name] = port
        finally:
            for sock in held:
                sock.close()
        now = time.time()
        for port in ports.values():
            reserved[str(port)] = now
    return ports


def _port_pattern(port: int) -> re.Pattern:
    # Loopback with or without a scheme, or any host of a URL (a run bound to its workers' address).
    return re.compile(rf"(127\.0\.0\.1|localhost|://[A-Za-z0-9.-]+):{int(port)}(?!\d)")


def rebind_text(text: str, old: int, new: int) -> str:
    """`text` with every 127.0.0.1:OLD / localhost:OLD address, and every URL's HOST:OLD, moved to port NEW."""
    return _port_pattern(old).sub(lambda m: f"{m.group(1)}:{int(new)}", text)


def rebind_port(spec: ProcessSpec, old: int, new: int, *, own: bool) -> ProcessSpec:
    """A spec whose addresses at port `old` now use `new`; `own`: the process serving it, whose bare
    `--port OLD` argument moves too."""

    @overload
    def move(text: str) -> str: ...
    @overload
    def move(text: str | None) -> str | None: ...
    def move(text: str | None) -> str | None:
        if text is None:
            return None
        return str(int(new)) if own and text == str(int(old)) else rebind_text(text, old, new)

    return replace(
        spec,
        argv=[move(a) for a in spec.argv],
        env={k: move(v) for k, v in spec.env.items()},
        readiness=replace(spec.readiness, url=move(spec.readiness.url)),
        status_url=move(spec.status_url),
    )


def rebind_files(run_dir: str | os.PathLike, argv: list[str], old: int, new: int) -> list[str]:
    """Files inside the run folder that some argv names (config.yaml): their addresses at port `old`
    moved to `new`, so a process reading its port from a file is told as well. Returns those changed."""
    root = os.path.realpath(run_dir)
    changed = []
    for arg in dict.fromkeys(argv):
        path = os.path.realpath(arg) if os.sep in arg else ""
        if not path.startswith(root + os.sep) or not os.path.isfile(path):
            continue
        with open_regular(path, "r") as handle:
            text = handle.read()
        moved = rebind_text(text, old, new)
        if moved != text:
            atomic_write_text(Path(path), moved)
            changed.append(path)
    return changed


def process_record(spec: ProcessSpec, *, log: str, port: int | None, **live) -> dict:
    """A process as run.json records it: its spec's shape plus what the supervisor observed (`live`:
    pid, create_time, start_ticks, pgid, state, started_at, ready_at, ended_at, exit_code, restarts;
    a job's record from its launcher: {"job": {launcher, id, node, state}})."""
    record: dict[str, Any] = {
        "name": spec.name,
        "pid": None,
        "create_time": None,
        "start_ticks": None,
        "pgid": None,
        "argv_redacted": [redact(a) for a in spec.argv],
        "state": ProcState.PENDING,
        "started_at": None,
        "ready_at": None,
        "ended_at": None,
        "exit_code": None,
        "restarts": 0,
    }
    if launchers.get(spec.launcher).remote:
        record["job"] = launchers.job_record(spec.launcher, None, None, None)
    record.update(live)
    record.update(
        {
            "log": log,
            "port": port,
            "required": spec.required,
            "completes_run": spec.completes_run,
            "depends_on": [list(d) for d in spec.depends_on],
            "readiness": spec.readiness.kind,
            "cwd": spec.cwd,  # None: the run folder
            "launcher": spec.launcher,
            "import_path": [p for p in spec.env.get("PYTHONPATH", "").split(os.pathsep) if p] or None,
        }
    )
    return record
