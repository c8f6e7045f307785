"""verifiers v1 tasksets served to Atropos' run-api, under the environment's own interpreter.

Run by path, never imported by hermes-rl: `ENV_PYTHON dataplane/verifiers_bridge.py list` prints the
interpreter's installed tasksets (one JSON line); `... serve --config CONFIG_YAML --taskset ID` serves one
as an Atropos environment does: registers with run-api, samples each task's group from the run's inference
server (plain chat, `n` completions in one request; a multi-turn taskset's own `Env.run` drives the turns
through a direct chat agent), scores with the taskset's reward functions and posts scored groups with token
ids, masks and sampling logprobs. verifiers 0.4 needs openai>=2.54 and mcp 2, which hermes-rl's venv cannot
hold beside Hermes Agent, so this file imports only the stdlib, verifiers and what verifiers brings (yaml,
aiohttp): it runs in a venv that has no hermes-rl and no atroposlib.

Why not verifiers' own harness: it starts a chat program per episode (~7 s each on a 2-core machine) and
streams through an interception proxy; a training step would be dominated by that start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
import types
from pathlib import Path

PROMPT_MASK = -100


def _regular_fd(path: str | os.PathLike, flags: int) -> int:
    """core.base.fsutil.regular_fd, repeated here (this file runs without hermes-rl): a descriptor on a
    regular file, opened without blocking, so a FIFO in a state file's place fails instead of hanging."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _append_row(path: str | os.PathLike, row: dict) -> None:
    """One JSON line appended in one write (O_APPEND: concurrent writers never interleave)."""
    fd = _regular_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def _read_text(path: str | os.PathLike) -> str:
    with os.fdopen(_regular_fd(path, os.O_RDONLY), encoding="utf-8") as handle:
        return handle.read()


BRIDGE_FIELDS = {  # the bridge's own settings, beside the taskset's: (type, default, bounds, description)
    "temperature": ("float", 1.0, (0.0, 2.0), "Sampling temperature of training rollouts"),
    "max_tokens": ("int", 128, (1, 65536), "Tokens the policy may generate per turn (at most max_token_length - 32)"),
    "max_turns": ("int", 8, (1, 256), "Most model turns in one episode of a multi-turn taskset"),
}
SHARED_FIELDS = {"id", "task", "system_prompt"}  # SharedTasksetConfig's knobs: not per-run settings here
BUILTIN_TASKSETS = {  # verifiers' own tasksets: what each needs beyond this machine
    "textarena": None,
    "harbor": "needs a container runtime per task (Docker/Prime sandboxes)",
    "nemo_gym": "needs NeMo Gym resource servers (an external service)",
    "openenv": "needs OpenEnv environment servers (containers)",
}
OLD_API = (
    "uses the old verifiers API (load_environment, verifiers <= 0.3); hermes-rl trains verifiers >= 0.4.0 "
    "tasksets (verifiers.v1): port it with `vf-init` or install a v1 release of it"
)
MAX_FAILED_GROUPS = 8  # groups in a row that could not be scored: the taskset is broken, stop saying why


# --- listing -----------------------------------------------------------------------------------------


def _load_by_path(name: str, path: Path) -> types.ModuleType:
    """A module by its file (this file runs by path, outside hermes-rl's package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# How a field's annotation and default read as JSON: core/base/field_shapes.py, the config probe's too (stdlib only).
_shapes = _load_by_path("field_shapes", Path(__file__).resolve().parent.parent / "core" / "base" / "field_shapes.py")
_jsonable, _describe = _shapes.jsonable, _shapes.describe_annotation


def _bounds(info: object) -> dict:
    out: dict = {"minimum": None, "maximum": None, "exclusive_minimum": False, "exclusive_maximum": False}
    for item in getattr(info, "metadata", []) or []:
        for attr, key, exclusive in (
            ("ge", "minimum", False),
            ("gt", "minimum", True),
            ("le", "maximum", False),
            ("lt", "maximum", True),
        ):
            bound = getattr(item, attr, None)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                out[key], out[f"exclusive_{key}"] = bound, exclusive
    return out


def _fields(config_type: type, env_type: type | None = None) -> list[dict]:
    """The taskset config's own fields, the environment's own settings (its EnvConfig's fields beyond
    verifiers' and its seats), then the bridge's; a required field has no default (None)."""
    rows = []
    own = [(name, info) for name, info in config_type.model_fields.items() if name not in SHARED_FIELDS]
    if env_type is not None:
        taken = {name for name, _ in own}
        own += [(n, env_type.model_fields[n]) for n in env_settings_fields(env_type) if n not in taken]
    for name, info in own:
        described = _describe(info.annotation)
        default = None if info.is_required() else _jsonable(info.get_default(call_default_factory=True))
        # required: no default, or a default of None its type does not take (textarena's `game`)
        required = info.is_required() or (default is None and not described["nullable"])
        rows.append(
            {
                "name": name,
                **described,
                **_bounds(info),
                "default": default,
                "description": " ".join((info.description or "").split()) + (" (required)" if required else ""),
                "in_base": False,
                "required": required,
            }
        )
    taken = {row["name"] for row in rows}
    for name, (kind, default, (low, high), text) in BRIDGE_FIELDS.items():
        if name in taken:  # the taskset's own field of that name wins (alphabet-sort's max_turns)
            continue
        rows.append(
            {
                "name": name,
                "type": kind,
                "choices": None,
                "nullable": False,
                "minimum": low,
                "maximum": high,
                "exclusive_minimum": False,
                "exclusive_maximum": False,
                "default": default,
                "description": text,
                "in_base": False,
            }
        )
    for name, default, text in (
        ("max_batches_offpolicy", 3, "How many batches ahead of the trainer the taskset may sample"),
        ("ensure_scores_are_not_same", True, "Drop groups whose completions all scored the same (no signal)"),
    ):
        kind = "bool" if isinstance(default, bool) else "int"
        rows.append(
            {
                "name": name,
                "type": kind,
                "choices": None,
                "nullable": False,
                "minimum": 1 if kind == "int" else None,
                "maximum": 10_000 if kind == "int" else None,
                "exclusive_minimum": False,
                "exclusive_maximum": False,
                "default": default,
                "description": text,
                "in_base": True,
            }
        )
    return rows


def _one_line(exc: BaseException) -> str:
    """`Type: message` on one line, banners and blank lines dropped (nltk's LookupError opens with stars)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip().strip("*").strip()]
    return f"{type(exc).__name__}: {' '.join(lines)}"[:400]


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").strip().splitlines() if line.strip()), "")


def refusal(taskset_cls: type, module: types.ModuleType) -> str | None:
    """Why this taskset cannot train here (it needs a sandbox, a tool server or a harness program), or None."""
    import verifiers.v1 as vf

    for builtin, needs in BUILTIN_TASKSETS.items():
        base = _builtin_class(builtin) if needs else None
        if base is not None and issubclass(taskset_cls, base):
            return f"it is a {builtin} taskset ({base.__name__}), which {needs}"
    task_type = taskset_cls.task_type()
    if getattr(task_type, "NEEDS_CONTAINER", False):
        return f"its tasks need a container ({task_type.__name__}.NEEDS_CONTAINER)"
    for owner, base in ((taskset_cls, vf.Taskset), (task_type, vf.Task)):
        if getattr(owner.toolsets, "__func__", None) is not getattr(base.toolsets, "__func__", None):
            return f"{owner.__name__} declares tool servers (toolsets): MCP servers hermes-rl does not run"
    for name in getattr(module, "__all__", []) or []:
        obj = getattr(module, name, None)
        if isinstance(obj, type) and issubclass(obj, vf.Harness) and obj is not vf.Harness:
            return f"it brings its own harness ({obj.__name__}), a program that needs a runtime sandbox"
    return None


def _builtin_class(name: str) -> type | None:
    """A refused built-in taskset's class, when its module imports (its extras may be missing)."""
    try:
        from verifiers.v1.utils import loaders

        return loaders.taskset_class(name)
    except BaseException:  # noqa: BLE001 - not installed here: nothing can subclass it either
        return None


# Signs of the old verifiers API (<= 0.3) in a package's source: its entry point, or its env classes.
_OLD_API = re.compile(
    r"^\s*def load_environment\b|\bverifiers\.envs\b|\bvf\.(SingleTurnEnv|MultiTurnEnv|ToolEnv)\b", re.M
)
_USES_VERIFIERS = re.compile(r"^\s*(import verifiers|from verifiers)\b", re.M)
SOURCE_SCAN_FILES = 40  # a package's top-level .py files read for these signs (a taskset is small)
SOURCE_SCAN_BYTES = 256 * 1024


def _package_source(module_name: str) -> str:
    """The text of a top-level module's own files (its __init__ and the .py files beside it), bounded,
    found without importing it."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return ""
    origin = getattr(spec, "origin", None) if spec else None
    if not origin or not origin.endswith(".py"):
        return ""
    files = [Path(origin)]
    if Path(origin).name == "__init__.py":
        files += sorted(p for p in Path(origin).parent.glob("*.py") if p.name != "__init__.py")
    texts = []
    for path in files[:SOURCE_SCAN_FILES]:
        try:
            with open(path, "rb") as handle:
                texts.append(handle.read(SOURCE_SCAN_BYTES).decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(texts)


def _top_level_modules(dist: importlib.metadata.Distribution) -> list[str]:
    """The modules a distribution installs, from its own record of files (top_level.txt, else its files);
    an editable install records none of its modules, so its name, as pip normalises it, is the guess."""
    names: list[str] = []
    top = dist.read_text("top_level.txt")
    if top:
        names = [line.strip() for line in top.splitlines() if line.strip() and not line.startswith("_")]
    for file in dist.files or []:
        parts = file.parts
        if len(parts) == 2 and parts[1] == "__init__.py" and not parts[0].endswith((".dist-info", ".egg-info")):
            names.append(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py") and not parts[0].startswith("_"):
            names.append(parts[0][:-3])
    guess = (dist.metadata["Name"] or "").replace("-", "_").replace(".", "_").lower()
    return list(dict.fromkeys(names or [guess]))


def describe_taskset(taskset_id: str, module_name: str, dist: str | None, version: str | None) -> dict:
    """One listing row: id, class, description, config fields, or why it cannot be used."""
    row: dict = {
        "id": taskset_id,
        "module": module_name,
        "distribution": dist,
        "version": version,
        "class_name": "",
        "file": "",
        "description": "",
        "config_class": None,
        "fields": [],
        "error": None,
        "refused": None,
        "multi_turn": False,
        "seats": [],
    }
    if dist != "verifiers" and _OLD_API.search(_package_source(module_name)):
        row["error"] = OLD_API  # even when it cannot import under verifiers 0.4 (verifiers.envs is gone)
        return row
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a broken package: listed with its reason, never a traceback
        row["error"] = f"cannot import {module_name}: {type(exc).__name__}: {_first_line(str(exc))}"[:500]
        return row
    row["file"] = str(getattr(module, "__file__", "") or "")
    row["description"] = _first_line(module.__doc__)[:500]
    try:
        import verifiers.v1 as vf
        from verifiers.v1.envs.single_agent import SingleAgentEnv
        from verifiers.v1.utils import loaders

        cls = loaders._plugin_class(module, vf.Taskset, "taskset")
    except BaseException as exc:
        harness = _exported(module, vf.Harness) if "vf" in locals() else None
        if harness is not None:
            row["error"] = (
                f"a verifiers harness ({harness.__name__}), not a taskset: it plays tasksets, and has no tasks "
                "to train on"
            )
        elif hasattr(module, "load_environment"):
            row["error"] = OLD_API
        else:
            row["error"] = f"{type(exc).__name__}: {_first_line(str(exc))}"[:500]
        return row
    vf_id = taskset_id if dist == "verifiers" else module_name  # verifiers finds a taskset by its module
    try:
        config_type = loaders.concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        env_type = loaders.env_config_type(vf_id)
        row.update(class_name=cls.__name__, config_class=config_type.__name__)
        row["fields"] = _fields(config_type, env_type)
        row["description"] = (_first_line(cls.__doc__) or row["description"])[:500]
        row["refused"] = refusal(cls, module)
        row["multi_turn"] = loaders.environment_class(vf_id) is not SingleAgentEnv
        row["seats"] = list(_agent_fields(env_type))
    except BaseException as exc:
        row["error"] = f"{type(exc).__name__}: {_first_line(str(exc))}"[:500]
        return row
    if not row["refused"] and not any(f.get("required") for f in row["fields"]):
        problem = _first_task_problem(vf_id, env_type)
        if problem:
            row["refused"] = f"its tasks cannot be made here with its default settings: {problem}"[:500]
    return row


def _first_task_problem(vf_id: str, env_type: type) -> str | None:
    """Why the taskset's first task cannot be made with its defaults, as a worker would make it (a hub dataset
    offline, a missing corpus), or None: refused at `start`, not by a worker a minute later."""
    from verifiers.v1.utils import loaders

    data: dict = {"taskset": {"id": vf_id}}
    for seat, default in _agent_fields(env_type).items():
        data[seat] = {"runtime": {"type": "subprocess"}} | ({} if default.harness else {"harness": {"id": "null"}})
    try:
        env = loaders.environment_class(vf_id)(env_type.model_validate(data))
        next(iter(env.taskset))
    except TimeoutError:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever stops its tasks is the reason, in one line
        return _one_line(exc)
    return None


def _exported(module: types.ModuleType, base: type) -> type | None:
    for obj in vars(module).values():
        if (
            isinstance(obj, type)
            and issubclass(obj, base)
            and obj is not base
            and obj.__module__.startswith(module.__name__)
        ):
            return obj
    return None


DESCRIBE_S = 60  # one package's import and description: past this, its row says so and the others still list


def _bounded(describe, taskset_id: str, module: str, dist: str | None, version: str | None) -> dict:
    """describe(...) within DESCRIBE_S (a package whose import hangs names itself, hiding no other), its
    texts capped."""

    def late(_signum, _frame):
        raise TimeoutError(f"importing {module} took over {DESCRIBE_S} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(DESCRIBE_S)
    try:
        row = describe(taskset_id, module, dist, version)
    except TimeoutError as exc:
        row = {"id": taskset_id, "module": module, "distribution": dist, "version": version, "error": str(exc)}
        row |= {"class_name": "", "file": "", "description": "", "config_class": None, "fields": [], "seats": []}
        row |= {"refused": None, "multi_turn": False}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for field in row.get("fields") or []:
        field["description"] = str(field.get("description") or "")[:500]
    return row


def verifiers_id(taskset_id: str) -> str:
    """The id verifiers' loaders find a listed taskset by: its module (found from its distribution's files)."""
    if taskset_id in BUILTIN_TASKSETS:
        return taskset_id
    try:
        dist = importlib.metadata.distribution(taskset_id)
    except importlib.metadata.PackageNotFoundError:
        return taskset_id
    return next((m for m in _top_level_modules(dist) if importlib.util.find_spec(m)), taskset_id)


def _depends_on_verifiers(dist: importlib.metadata.Distribution) -> bool:
    return any(re.match(r"verifiers(?![A-Za-z0-9_.-])", req.strip(), re.I) for req in dist.requires or [])


SMALL_DISTRIBUTION = 400  # files: a package this small that imports verifiers is read for a taskset


def _candidates() -> list[tuple[importlib.metadata.Distribution, str]]:
    """(distribution, module) of every installed package that may hold a taskset: those that depend on
    verifiers, and small ones whose own source imports it without declaring it (gsm8k, reverse-text)."""
    out = []
    seen: set[str] = set()
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        name = dist.metadata["Name"] or ""
        key = name.lower().replace("_", "-")
        if not name or key in seen or key == "verifiers":
            continue
        seen.add(key)
        declared = _depends_on_verifiers(dist)
        if not declared and len(dist.files or []) > SMALL_DISTRIBUTION:
            continue
        for module in _top_level_modules(dist):
            if declared or _USES_VERIFIERS.search(_package_source(module)):
                out.append((dist, module))
                break
    return out


def list_tasksets() -> dict:
    """Every installed package that holds a taskset (or says why it cannot), and verifiers' built-ins."""
    try:
        version = importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return {"ok": True, "verifiers": None, "tasksets": []}
    rows: list[dict] = []
    try:
        import verifiers.v1  # noqa: F401
    except ImportError:
        v1_error = f"needs verifiers >= 0.4.0 (verifiers.v1); this interpreter has verifiers {version}"
    else:
        v1_error = None
    for dist, module in _candidates():
        name = dist.metadata["Name"]
        key = name.lower().replace("_", "-")
        if v1_error:
            rows.append(
                {
                    "id": key,
                    "module": module,
                    "distribution": name,
                    "version": dist.version,
                    "error": v1_error,
                    "class_name": "",
                    "file": "",
                    "description": "",
                    "config_class": None,
                    "fields": [],
                    "refused": None,
                    "multi_turn": False,
                    "seats": [],
                }
            )
            continue
        rows.append(_bounded(describe_taskset, key, module, name, dist.version))
    if not v1_error:
        for builtin, needs in BUILTIN_TASKSETS.items():
            row = _bounded(describe_taskset, builtin, f"verifiers.v1.tasksets.{builtin}", "verifiers", version)
            row["refused"] = needs or row["refused"]
            rows.append(row)
    return {"ok": True, "verifiers": version, "tasksets": rows}


# --- serving ---------------------------------------------------------------------------------------

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
REPORT_S = 30.0  # while no step comes, what was not trained is counted in the env log this often
ENDPOINT_KEY_VAR = "HERMES_RL_ENDPOINT_KEY"  # the run's endpoint credential, read by verifiers' model client
# the trainer's endpoint reads it (dataplane/trainer/inference.py's GROUP_HEADER, repeated: this file runs
# under an environment's interpreter, without hermes-rl)
GROUP_HEADER = "X-Hermes-Group-Size"


class TokenSequence:
    """One seat's trained sequence, built from the turns the endpoint sampled for its trace, in order."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.masks: list[int] = []
        self.logprobs: list[float] = []
        self.turns = 0

    def add_turn(self, prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]) -> None:
        """A turn's prompt continues the sequence so far when the chat template re-renders it unchanged:
        then only the new prompt tokens are added and every earlier completion stays trainable; otherwise
        this turn's prompt (with the earlier turns as context) starts the sequence afresh."""
        seen = len(self.tokens)
        if seen and prompt_ids[:seen] == self.tokens:
            new = prompt_ids[seen:]
        else:
            self.tokens, self.masks, self.logprobs, new = [], [], [], list(prompt_ids)
        self.tokens += new + completion_ids
        self.masks += [PROMPT_MASK] * len(new) + completion_ids
        lps = (list(logprobs) + [0.0] * len(completion_ids))[: len(completion_ids)]
        self.logprobs += [1.0] * len(new) + lps
        self.turns += 1

    @classmethod
    def of_turns(cls, turns: list[dict]) -> TokenSequence:
        sequence = cls()
        for turn in turns:
            sequence.add_turn(turn["prompt_ids"], turn["completion_ids"], turn.get("logprobs") or [])
        return sequence

    @property
    def trained_tokens(self) -> int:
        return sum(1 for m in self.masks if m != PROMPT_MASK)


def _agent_fields(config_type: type) -> dict[str, object]:
    """The env config's seats: its AgentConfig fields, by name, with their declared defaults."""
    import verifiers.v1 as vf

    return {
        name: info.default
        for name, info in config_type.model_fields.items()
        if isinstance(info.default, vf.AgentConfig)
    }


def env_settings_fields(env_config_type: type) -> list[str]:
    """The environment's own settings (code-golf's `attempts`, kuhn-poker's `invalid_retries`): its
    EnvConfig fields beyond verifiers' own and its seats."""
    import verifiers.v1 as vf

    base = set(vf.EnvConfig.model_fields)
    seats = set(_agent_fields(env_config_type))
    return [name for name in env_config_type.model_fields if name not in base and name not in seats]


def seat_refusal(harness) -> str | None:
    """Why a seat's harness cannot play here, or None: hermes-rl runs seats in verifiers' subprocess
    runtime, on this machine, so a harness that needs a container, or runs the model's code, is refused."""
    if getattr(harness, "NEEDS_CONTAINER", False):
        return f"its harness {harness.config.id!r} needs a container runtime"
    if getattr(harness, "EXECUTES_CODE", False):
        return (
            f"its harness {harness.config.id!r} runs the model's commands, which the subprocess runtime would "
            "do on this machine unsandboxed"
        )
    return None


def _image_prompt(task) -> bool:
    """Whether a task's prompt holds an image (a text-only policy cannot read it)."""
    prompt = task.data.prompt
    if isinstance(prompt, str) or not prompt:
        return False
    for message in prompt:
        content = getattr(message, "content", None)
        if content is None and isinstance(message, dict):
            content = message.get("content")
        for part in content if isinstance(content, list) else []:
            kind = getattr(part, "type", None) or (part.get("type") if isinstance(part, dict) else None)
            if kind in ("image_url", "image", "input_image"):
                return True
    return False


class Bridge:
    """A taskset's episodes run by verifiers itself — its Env, the seats' harness (null: verifiers' chat
    program), its subprocess runtime and interception server — against the run's OpenAI-compatible
    endpoint; each seat's trace trains on exactly the tokens the endpoint sampled for it."""

    def __init__(self, config: dict, taskset_id: str, key_var: str = ENDPOINT_KEY_VAR) -> None:
        """`key_var`: where verifiers' model client reads its key: the run's endpoint credential, or (in
        test-inference's `process` mode) OPENAI_API_KEY, which the trial gives its child."""
        import verifiers.v1 as vf
        from verifiers.v1.clients import EvalClientConfig, ModelContext
        from verifiers.v1.types import SamplingConfig
        from verifiers.v1.utils import loaders

        self.env = config["env"]
        server = config["openai"][0]
        self.base_url = server["base_url"].rstrip("/")
        self.model = server["model_name"]
        self.taskset_id = taskset_id
        self.name = taskset_id
        self.api = str(self.env.get("rollout_server_url") or "").rstrip("/")  # none in `process` mode
        self.group_size = int(self.env["group_size"])
        self.batch_size = int(self.env["batch_size"])
        self.total_steps = int(self.env["total_steps"])
        self.offpolicy = int(self.env.get("max_batches_offpolicy") or 3)
        # groups sampled at once: the profile's max_num_workers, as Atropos' workers (the backlog check paces them)
        self.workers = max(1, int(self.env.get("max_num_workers") or 4))
        self.metrics_path = self.env.get("env_metrics_path") or os.environ.get("HERMES_ENV_METRICS")

        vf_id = verifiers_id(taskset_id)
        module = loaders.import_taskset(vf_id)
        cls = loaders.taskset_class(vf_id)
        reason = refusal(cls, module)
        if reason:
            raise SystemExit(f"VerifiersRefusedError: taskset {taskset_id!r} cannot train here: {reason}")
        taskset_type = loaders.concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        env_type = loaders.env_config_type(vf_id)

        def own(name: str):  # the bridge's setting, unless the taskset has a field of that name
            clash = name in taskset_type.model_fields or name in env_settings_fields(env_type)
            return BRIDGE_FIELDS[name][1] if clash else self.env.get(name, BRIDGE_FIELDS[name][1])

        self.temperature = float(own("temperature"))
        # the prompt needs room too: a sequence longer than max_token_length is dropped
        self.max_tokens = max(1, min(int(own("max_tokens")), int(self.env["max_token_length"]) - 32))
        self.max_turns = int(own("max_turns"))
        taskset = {k: v for k, v in self.env.items() if k in taskset_type.model_fields and k not in SHARED_FIELDS}
        data: dict = {k: self.env[k] for k in env_settings_fields(env_type) if k in self.env}
        data["taskset"] = {**taskset, "id": vf_id}
        for seat, default in _agent_fields(env_type).items():
            # Every seat plays in verifiers' subprocess runtime; an unpinned seat gets the null harness (a
            # plain chat program; verifiers' own default, bash, would run the model's commands here).
            pinned = default.harness is not None
            data[seat] = {"runtime": {"type": "subprocess"}, "max_turns": self.max_turns}
            if not pinned:
                data[seat]["harness"] = {"id": "null"}
        self.vf_env = loaders.environment_class(vf_id)(env_type.model_validate(data))
        for seat, harness in self.vf_env._harnesses.items():
            why = seat_refusal(harness)
            if why:
                raise SystemExit(f"VerifiersRefusedError: taskset {taskset_id!r} cannot train here: seat {seat}: {why}")
        self.seats = list(self.vf_env._harnesses)
        os.environ.setdefault(key_var, "EMPTY")
        self.ctx = ModelContext(
            model=self.model,
            # the endpoint holds a group's first turns until they are all there, to sample them as one call
            client=EvalClientConfig(
                base_url=self.base_url, api_key_var=key_var, headers={GROUP_HEADER: str(self.group_size)}
            ),
            sampling=SamplingConfig(temperature=self.temperature, max_tokens=self.max_tokens),
        )
        self._tasks = iter(self.vf_env.taskset)
        first = self.next_task()
        if _image_prompt(first):
            raise SystemExit(
                f"VerifiersRefusedError: taskset {taskset_id!r} cannot train here: its prompts hold images and the "
                f"policy ({self.model}) reads text only"
            )
        self._first = first
        # episodes in flight at once: each is a chat program (a Python process) per turn
        self.episodes = asyncio.Semaphore(max(self.group_size, 2 * (os.cpu_count() or 1)))
        self.env_id: int | None = None
        self.session = None
        self.pending: list[dict] = []
        self.reasons: dict[str, int] = {}  # why episodes or traces were dropped, counted since the last report
        self.unreported = 0  # dropped since the last step, in reports already written
        self.reported_at = time.monotonic()
        self.failures = 0
        self.step = 0
        self.pools: dict[str, list[tuple[TokenSequence, object]]] = {}  # per seat: hands of short deals (post)
        self.pooled: set[str] = set()
        self.posted: dict[str, int] = {}  # per seat: groups sent to training since the last metrics row

    def next_task(self):
        first, self._first = getattr(self, "_first", None), None
        if first is not None:
            return first
        try:
            return next(self._tasks)
        except StopIteration:  # a finite taskset: go round again
            self._tasks = iter(self.vf_env.taskset)
            return next(self._tasks)

    # --- HTTP ---

    async def _json(self, method: str, url: str, **kwargs) -> dict:
        async with self.session.request(method, url, **kwargs) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise RuntimeError(f"{method} {url} answered {resp.status}: {text[:300]}")
            return json.loads(text)

    async def register(self) -> None:
        body = {
            "max_token_length": int(self.env["max_token_length"]),
            "desired_name": self.env.get("wandb_name") or self.name,
            "weight": float(self.env.get("inference_weight") or 1.0),
            "min_batch_allocation": self.env.get("min_batch_allocation"),
            "group_size": self.group_size,
        }
        while True:  # run-api holds environments back until the trainer has registered
            data = await self._json("POST", f"{self.api}/register-env", json=body)
            if data.get("status") == "success":
                break
            await asyncio.sleep(1.0)
        self.env_id = data["env_id"]
        folder = os.environ.get("HERMES_RL_RUN_DIR")
        if folder:  # run-api's batches name environments only by this id (core.readers.env_ids)
            row = {
                "time": time.time(),
                "env_id": self.env_id,
                "process": os.environ.get("HERMES_RL_PROCESS"),
                "environment": self.name,
            }
            _append_row(Path(folder) / "env_ids.jsonl", row)

    async def wait_for_policy(self) -> None:
        """Until the endpoint answers: the trainer registers with run-api before it serves its policy, and an
        episode started before then would fail on a refused connection."""
        health = self.base_url.rsplit("/v1", 1)[0] + "/health"
        while True:
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                async with self.session.get(health, timeout=5) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.5)

    async def sampled_turns(self, trace_ids: list[str]) -> dict[str, list[dict]]:
        headers = {"Authorization": f"Bearer {os.environ.get(ENDPOINT_KEY_VAR, '')}"}
        data = await self._json(
            "POST", f"{self.base_url}/hermes/sampled", json={"sessions": trace_ids}, headers=headers
        )
        return data["sessions"]

    # --- episodes ---

    def drop(self, reason: str) -> None:
        """Count why an episode or a seat's trace was not trained; the first of each reason is logged."""
        # quoted text (a model's reply inside an error) differs every time: one reason, counted
        reason = _QUOTED.sub("'…'", _first_line(reason))[:300] or "no reason given"
        if reason not in self.reasons:
            sys.stderr.write(f"hermes-rl: {self.name}: not trained: {reason}\n")
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    async def run_episode(self, slot):
        return await self.vf_env.run_slot(slot, self.ctx, self.episodes)

    async def group(self) -> None:
        task = self.next_task()
        episodes = await asyncio.gather(*(self.run_episode(s) for s in self.vf_env.slots(task, self.group_size)))
        traces = [t for e in episodes for t in e.traces]
        turns = await self.sampled_turns([t.id for t in traces])  # collected for every trace: none is kept
        by_seat: dict[str, list[tuple[TokenSequence, object]]] = {}
        failed = 0
        for episode in episodes:
            if not episode.ok:
                failed += 1
                error = episode.last_error or next((e for t in episode.traces for e in t.errors), None)
                self.drop(f"episode failed: {error.type}: {error.message}" if error else "episode failed")
                continue
            for trace in episode.traces:
                if not trace.agent.trainable:
                    continue
                if trace.errors:  # a model call or hook that failed (a judge that needs a key): this trace only
                    error = trace.errors[-1]
                    self.drop(f"seat {trace.agent.name or 'agent'}: {error.type}: {error.message}")
                    continue
                sequence = TokenSequence.of_turns(turns.get(trace.id) or [])
                if sequence.trained_tokens == 0:
                    self.drop(f"seat {trace.agent.name or 'agent'}: an episode with no sampled tokens")
                    continue
                reward = trace.reward
                if not isinstance(reward, (int, float)) or not math.isfinite(reward):
                    self.drop(f"seat {trace.agent.name or 'agent'}: reward {reward!r} is not a finite number")
                    continue
                by_seat.setdefault(trace.agent.name or "agent", []).append((sequence, trace))
        if failed == len(episodes):
            self.failures += 1
            if self.failures >= MAX_FAILED_GROUPS:
                raise SystemExit(
                    f"VerifiersTasksetError: {self.name}: {MAX_FAILED_GROUPS} groups in a row had no episode "
                    f"that finished; last: {next(iter(reversed(self.reasons)), 'unknown')}"
                )
            return
        self.failures = 0
        for seat, members in by_seat.items():
            await self.post(seat, members)

    async def post(self, seat: str, members: list[tuple[TokenSequence, object]]) -> None:
        limit = int(self.env["max_token_length"])
        kept = [(s, t) for s, t in members if len(s.tokens) <= limit]
        if len(kept) < len(members):
            self.drop(f"seat {seat}: a sequence longer than max_token_length ({limit})")
        scores = [float(t.reward) for _, t in kept]
        for sequence, trace in kept:
            row: dict = {"reward": float(trace.reward), "turns": sequence.turns}
            row.update({f"reward/{k}": r.score for k, r in trace.rewards.items() if r is not None})
            row.update({f"metric/{k}": v for k, v in trace.metrics.items() if isinstance(v, (int, float))})
            if len(self.seats) > 1:
                row[f"seat/{seat}/reward"] = float(trace.reward)
            self.pending.append(row)
        if len(self.seats) > 1 and len(kept) < self.group_size:
            # A seat that played only some hands of a deal (kuhn-poker's second player acts only after a legal
            # first move) rarely makes a group of its own: its hands wait for the seat's other short deals, and
            # a full pool trains as one group, its baseline the seat's mean over those hands (a baseline per
            # seat, as self-play trainers keep one per role).
            pool = self.pools.setdefault(seat, [])
            pool.extend(kept)
            if len(pool) < self.group_size:
                return
            kept, self.pools[seat] = pool, []
            scores = [float(t.reward) for _, t in kept]
            if seat not in self.pooled:
                self.pooled.add(seat)
                sys.stderr.write(
                    f"hermes-rl: {self.name}: seat {seat} played only some hands of a deal: its hands are pooled "
                    f"across deals into groups of {self.group_size}\n"
                )
        if len(kept) < 2:
            return
        if self.env.get("ensure_scores_are_not_same", True) and len(set(scores)) == 1:
            self.drop(f"seat {seat}: every episode of a group scored {scores[0]:g} (nothing to learn from)")
            return
        group = {
            "tokens": [s.tokens for s, _ in kept],
            "masks": [s.masks for s, _ in kept],
            "scores": scores,
            "inference_logprobs": [s.logprobs for s, _ in kept],
            "env_id": self.env_id,
            "messages": [
                [{k: v for k, v in m.items() if k in ("role", "content")} for m in _dump_messages(t)] for _, t in kept
            ],
        }
        await self._json("POST", f"{self.api}/scored_data", json=group)
        if len(self.seats) > 1:
            self.posted[seat] = self.posted.get(seat, 0) + 1

    def say_dropped(self, step: int) -> int:
        """One line counting what was not trained since the last (at a step, or every REPORT_S while no step
        comes): the env log says why a run waits, in numbers."""
        self.reported_at = time.monotonic()
        dropped = sum(self.reasons.values())
        if self.reasons:
            counted = "; ".join(f"{n} x {reason}" for reason, n in self.reasons.items())
            sys.stderr.write(f"hermes-rl: {self.name}: step {step}: not trained: {counted}\n")
        self.reasons = {}
        return dropped

    def flush_metrics(self, step: int) -> None:
        dropped = self.say_dropped(step) + self.unreported
        self.unreported = 0
        if not self.metrics_path or (not self.pending and not dropped):
            self.pending = []
            return
        keys = sorted({k for row in self.pending for k in row})
        row: dict = {"step": step, "time": time.time(), "environment": self.name}
        for key in keys:
            values = [r[key] for r in self.pending if key in r and r[key] is not None]
            if not values:
                continue
            name = "train/reward_mean" if key == "reward" else "verifiers/turns" if key == "turns" else key
            row[name] = sum(values) / len(values)
        # which seats trained: a seat whose every hand scores alike is scored but sends no group
        row.update({f"seat/{seat}/groups": n for seat, n in self.posted.items()})
        self.posted = {}
        row["verifiers/dropped"] = dropped
        _append_row(self.metrics_path, row)
        self.pending = []

    def backlogged(self, status: dict) -> bool:
        """Enough is queued: as BaseEnv.env_manager decides, so a share of each batch this taskset is owed
        (min_batch_allocation) is still sampled while other environments fill the queue."""
        queued = int(status.get("queue_size", 0))
        if queued * self.group_size < self.offpolicy * self.batch_size:
            return False
        share = self.env.get("min_batch_allocation")
        if share is None:
            return True
        largest = max(1, int(status.get("max_group_size") or self.group_size))
        owed = math.ceil(share * self.batch_size * self.offpolicy / largest) * (largest // self.group_size)
        return owed - int(status.get("self_queue_size", 0)) <= 0

    async def process(self) -> None:
        """test-inference: `total_steps` groups against any OpenAI-compatible server, scored by verifiers and
        written as Atropos' `process` mode writes them (one JSON line per group: scores and messages), for
        each seat; no run-api, no training."""
        path = self.env["data_path_to_save_groups"]
        async with self.vf_env.serving(), _warm_folder() as folder:
            if any(h.config.id == "null" for h in self.vf_env._harnesses.values()):
                await _sibling("verifiers_warm").warm_chat_program(folder)
            for index in range(int(self.env["total_steps"])):
                task = self.next_task()
                episodes = await asyncio.gather(
                    *(self.run_episode(s) for s in self.vf_env.slots(task, self.group_size))
                )
                by_seat: dict[str, list] = {}
                for episode in episodes:
                    if not episode.ok:
                        error = episode.last_error or next((e for t in episode.traces for e in t.errors), None)
                        self.drop(f"episode failed: {error.type}: {error.message}" if error else "episode failed")
                    for trace in episode.traces if episode.ok else []:
                        if trace.agent.trainable and trace.num_turns:
                            by_seat.setdefault(trace.agent.name or "agent", []).append(trace)
                for seat, traces in by_seat.items():
                    row = {
                        "seat": seat,
                        "scores": [float(t.reward) for t in traces],
                        "messages": [
                            [{k: v for k, v in m.items() if k in ("role", "content")} for m in _dump_messages(t)]
                            for t in traces
                        ],
                    }
                    _append_row(path, row)
                sys.stderr.write(f"hermes-rl: {self.name}: group {index + 1} of {self.env['total_steps']} scored\n")
            self.say_dropped(int(self.env["total_steps"]))

    async def serve(self) -> None:
        import aiohttp

        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as self.session,
            self.vf_env.serving(),
            _warm_folder() as folder,
        ):
            # registered first: in a mixed run, run-api counts this taskset's share only once it is there
            await self.register()
            if any(h.config.id == "null" for h in self.vf_env._harnesses.values()):
                await _sibling("verifiers_warm").warm_chat_program(folder)
            await self.wait_for_policy()
            running: set[asyncio.Task] = set()
            while True:
                status = await self._json("GET", f"{self.api}/status-env", json={"env_id": self.env_id})
                step = int(status.get("current_step", 0))
                if step != self.step:
                    self.flush_metrics(self.step)
                    self.step = step
                # Done when the trainer is: Atropos' own rule (step + queued groups past total_steps) counts
                # every environment's groups, so in a mixed run another environment's backlog would end this
                # one while the trainer still waits for its share (backlogged() bounds what it queues).
                if step >= self.total_steps:
                    break
                if time.monotonic() - self.reported_at > REPORT_S:
                    self.unreported += self.say_dropped(step)
                backlog = self.backlogged(status)
                if not backlog and len(running) < self.workers:
                    running.add(asyncio.create_task(self.group()))
                    continue
                if running:  # until a group is posted (then there is room for another), or a moment has passed
                    done, running = await asyncio.wait(running, timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
                    for finished in done:
                        finished.result()  # a SystemExit from a broken taskset ends the process, with its line
                else:
                    await asyncio.sleep(0.1)
            for task in running:
                task.cancel()
            self.flush_metrics(self.step)
            with contextlib.suppress(Exception):
                await self._json("POST", f"{self.api}/disconnect-env", json={"env_id": self.env_id})


@contextlib.asynccontextmanager
async def _warm_folder():
    folder = Path(tempfile.mkdtemp(prefix="hermes-vf-warm-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sibling(name: str) -> types.ModuleType:
    """A module beside this file."""
    return _load_by_path(name, Path(__file__).with_name(f"{name}.py"))


def _dump_messages(trace) -> list[dict]:
    return [m.model_dump(mode="json") for m in trace.messages]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="verifiers_bridge")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    for mode in ("serve", "process"):
        command = sub.add_parser(mode)
        command.add_argument("--config", required=True)
        command.add_argument("--taskset", required=True)
    args = parser.parse_args(argv)
    if args.command == "list":
        out_fd = os.dup(1)
        os.dup2(2, 1)  # whatever the packages print goes to stderr; stdout carries one JSON line
        os.write(out_fd, (json.dumps(list_tasksets(), default=str) + "\n").encode())
        return 0

    import yaml

    # verifiers' own warnings (a failed rollout, a harness note) reach the env log
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # verifiers' subprocess runtime finds uv on PATH to prepare its chat program: the taskset venv's own first
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    config = yaml.safe_load(_read_text(args.config))
    try:
        bridge = Bridge(config, args.taskset, ENDPOINT_KEY_VAR if args.command == "serve" else "OPENAI_API_KEY")
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # its tasks cannot be made (a hub dataset offline, a missing corpus): once, in one line
        raise SystemExit(f"VerifiersTasksetError: {args.taskset}: cannot load its tasks: {_one_line(exc)}") from None
    try:
        asyncio.run(bridge.serve() if args.command == "serve" else bridge.process())
    except SystemExit as stop:  # raised in a group's task: its verdict is the last line, as the supervisor reads it
        if not isinstance(stop.code, str):
            raise
        sys.stderr.write(f"{stop.code}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
