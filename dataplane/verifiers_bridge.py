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
import enum
import errno
import importlib
import importlib.metadata
import json
import math
import os
import re
import stat
import sys
import time
import types
import typing
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


def _jsonable(value: object) -> object:
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "model_dump"):
        return _jsonable(value.model_dump(mode="json"))
    return str(value)


def _describe(annotation: object) -> dict:
    """{"type", "choices", "nullable"} of a pydantic annotation (as core.envs.probe_child does)."""
    nullable = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        nullable = len(rest) < len(args)
        if len(rest) != 1:
            return {"type": "str", "choices": None, "nullable": nullable}
        annotation = rest[0]
        origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"type": "enum", "choices": [_jsonable(a) for a in typing.get_args(annotation)], "nullable": nullable}
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return {"type": "enum", "choices": [_jsonable(m.value) for m in annotation], "nullable": nullable}
        for kind, klass in (("bool", bool), ("int", int), ("float", float), ("str", (str, Path))):
            if issubclass(annotation, klass):
                return {"type": kind, "choices": None, "nullable": nullable}
        if issubclass(annotation, (list, tuple, set, frozenset)):
            return {"type": "list", "choices": None, "nullable": nullable}
    if origin in (list, tuple, set, frozenset):
        return {"type": "list", "choices": None, "nullable": nullable}
    return {
        "type": "dict" if origin is dict or hasattr(annotation, "model_fields") else "str",
        "choices": None,
        "nullable": nullable,
    }


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


def _fields(config_type: type) -> list[dict]:
    """The taskset config's own fields, then the bridge's; a required field has no default (None)."""
    rows = []
    for name, info in config_type.model_fields.items():
        if name in SHARED_FIELDS:
            continue
        required = info.is_required()
        rows.append(
            {
                "name": name,
                **_describe(info.annotation),
                **_bounds(info),
                "default": None if required else _jsonable(info.get_default(call_default_factory=True)),
                "description": " ".join((info.description or "").split()) + (" (required)" if required else ""),
                "in_base": False,
            }
        )
    for name, (kind, default, (low, high), text) in BRIDGE_FIELDS.items():
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


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").strip().splitlines() if line.strip()), "")


def refusal(taskset_cls: type, module: types.ModuleType) -> str | None:
    """Why this taskset cannot train here (it needs a sandbox, a tool server or a harness program), or None."""
    import verifiers.v1 as vf

    task_type = taskset_cls.task_type()
    if getattr(task_type, "NEEDS_CONTAINER", False):
        return f"its tasks need a container ({task_type.__name__}.NEEDS_CONTAINER)"
    for owner, base in ((taskset_cls, vf.Taskset), (task_type, vf.Task)):
        if getattr(owner.toolsets, "__func__", None) is not getattr(base.toolsets, "__func__", None):
            return f"{owner.__name__} declares tool servers (toolsets): MCP servers the chat bridge does not run"
    for name in getattr(module, "__all__", []) or []:
        obj = getattr(module, name, None)
        if isinstance(obj, type) and issubclass(obj, vf.Harness) and obj is not vf.Harness:
            return f"it brings its own harness ({obj.__name__}), a program that needs a runtime sandbox"
    return None


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
    }
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a broken package: listed with its reason, never a traceback
        row["error"] = f"cannot import {module_name}: {type(exc).__name__}: {_first_line(str(exc))}"[:500]
        return row
    row["file"] = str(getattr(module, "__file__", "") or "")
    row["description"] = _first_line(module.__doc__)
    try:
        import verifiers.v1 as vf
        from verifiers.v1.envs.single_agent import SingleAgentEnv
        from verifiers.v1.utils import loaders

        cls = loaders._plugin_class(module, vf.Taskset, "taskset")
    except BaseException as exc:
        row["error"] = (
            OLD_API if hasattr(module, "load_environment") else f"{type(exc).__name__}: {_first_line(str(exc))}"[:500]
        )
        return row
    try:
        config_type = loaders.concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        row.update(class_name=cls.__name__, config_class=config_type.__name__, fields=_fields(config_type))
        row["description"] = _first_line(cls.__doc__) or row["description"]
        row["refused"] = refusal(cls, module)
        row["multi_turn"] = loaders.environment_class(taskset_id) is not SingleAgentEnv
    except BaseException as exc:
        row["error"] = f"{type(exc).__name__}: {_first_line(str(exc))}"[:500]
    return row


def _depends_on_verifiers(dist: importlib.metadata.Distribution) -> bool:
    return any(re.match(r"verifiers(?![A-Za-z0-9_.-])", req.strip(), re.I) for req in dist.requires or [])


def list_tasksets() -> dict:
    """Every installed distribution depending on verifiers, and verifiers' built-in tasksets."""
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
    seen: set[str] = set()
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        name = dist.metadata["Name"] or ""
        key = name.lower().replace("_", "-")
        if not name or key in seen or key == "verifiers" or not _depends_on_verifiers(dist):
            continue
        seen.add(key)
        module = name.replace("-", "_").replace(".", "_").lower()
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
                }
            )
            continue
        rows.append(describe_taskset(key, module, name, dist.version))
    if not v1_error:
        for builtin, needs in BUILTIN_TASKSETS.items():
            row = describe_taskset(builtin, f"verifiers.v1.tasksets.{builtin}", "verifiers", version)
            row["refused"] = needs or row["refused"]
            rows.append(row)
    return {"ok": True, "verifiers": version, "tasksets": rows}


# --- serving -----------------------------------------------------------------------------------------


class Episode:
    """One completion's tokens, masks and sampling logprobs, grown turn by turn."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.masks: list[int] = []
        self.logprobs: list[float] = []
        self.turns = 0

    def add_turn(self, prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]) -> None:
        """A turn's prompt continues the episode so far when the chat template re-renders it unchanged:
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


def _messages(task) -> list[dict]:
    data = task.data
    out = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    else:
        out += [
            m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else dict(m)
            for m in data.prompt or []
        ]
    return out


def _trace(task, messages: list[dict]):
    """A verifiers Trace holding the conversation, so the taskset's reward functions read it as usual."""
    import verifiers.v1 as vf
    from pydantic import TypeAdapter
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask
    from verifiers.v1.types import Message

    adapter = TypeAdapter(Message)
    nodes = []
    for i, message in enumerate(messages):
        nodes.append(
            MessageNode(
                parent=i - 1 if i else None,
                message=adapter.validate_python(message),
                sampled=bool(message.get("_sampled")),
            )
        )
    return vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
    )


class Bridge:
    def __init__(self, config: dict, taskset_id: str) -> None:
        import verifiers.v1 as vf
        from verifiers.v1.utils import loaders

        self.env = config["env"]
        server = config["openai"][0]
        self.base_url = server["base_url"].rstrip("/")
        self.model = server["model_name"]
        self.taskset_id = taskset_id
        self.name = taskset_id
        self.api = self.env["rollout_server_url"].rstrip("/")
        self.group_size = int(self.env["group_size"])
        self.batch_size = int(self.env["batch_size"])
        self.total_steps = int(self.env["total_steps"])
        self.offpolicy = int(self.env.get("max_batches_offpolicy") or 3)
        # groups sampled at once: the profile's max_num_workers, as Atropos' workers (the backlog check paces them)
        self.workers = max(1, int(self.env.get("max_num_workers") or 4))
        self.temperature = float(self.env.get("temperature", BRIDGE_FIELDS["temperature"][1]))
        # the prompt needs room too: a sequence longer than max_token_length is dropped
        wanted = int(self.env.get("max_tokens", BRIDGE_FIELDS["max_tokens"][1]))
        self.max_tokens = max(1, min(wanted, int(self.env["max_token_length"]) - 32))
        self.max_turns = int(self.env.get("max_turns", BRIDGE_FIELDS["max_turns"][1]))
        self.metrics_path = self.env.get("env_metrics_path") or os.environ.get("HERMES_ENV_METRICS")
        cls = loaders.taskset_class(taskset_id)
        module = loaders.import_taskset(taskset_id)
        reason = refusal(cls, module)
        if reason:
            raise SystemExit(f"VerifiersRefused: taskset {taskset_id!r} cannot train here: {reason}")
        config_type = loaders.concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        settings = {k: v for k, v in self.env.items() if k in config_type.model_fields and k not in SHARED_FIELDS}
        self.taskset = cls(config_type.model_validate({**settings, "id": taskset_id}))
        self.env_class = loaders.environment_class(taskset_id)
        from verifiers.v1.envs.single_agent import SingleAgentEnv

        self.multi_turn = self.env_class is not SingleAgentEnv
        self.vf_env = None
        if self.multi_turn:
            env_config_type = loaders.env_config_type(taskset_id)
            self.vf_env = self.env_class(env_config_type.model_validate({"taskset": {"id": taskset_id, **settings}}))
        self._tasks = iter(self.taskset)
        self.env_id: int | None = None
        self.session = None
        self.pending: list[dict] = []
        self.failures = 0
        self.step = 0

    def next_task(self):
        try:
            return next(self._tasks)
        except StopIteration:  # a finite taskset: go round again
            self._tasks = iter(self.taskset)
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

    async def chat(self, messages: list[dict], n: int) -> tuple[list[int], list[dict]]:
        body = {
            "model": self.model,
            "messages": [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages],
            "n": n,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "logprobs": True,
        }
        data = await self._json("POST", f"{self.base_url}/chat/completions", json=body)
        prompt_ids = data.get("prompt_token_ids")
        if prompt_ids is None:
            raise RuntimeError(
                "the inference server returned no prompt_token_ids (it must be the run's trainer server)"
            )
        return prompt_ids, data["choices"]

    # --- episodes ---

    async def single_turn_group(self, task) -> list[tuple[Episode, object]]:
        messages = _messages(task)
        prompt_ids, choices = await self.chat(messages, self.group_size)
        out = []
        for choice in choices:
            episode = Episode()
            episode.add_turn(
                prompt_ids,
                choice["token_ids"],
                [c["logprob"] for c in (choice.get("logprobs") or {}).get("content") or []],
            )
            reply = {"role": "assistant", "content": choice["message"]["content"], "_sampled": True}
            trace = _trace(task, messages + [reply])
            await task.score(trace)
            out.append((episode, trace))
        return out

    async def multi_turn_episode(self, task) -> tuple[Episode, object]:
        agents = _DirectAgents(self, task)
        await self.vf_env.run(task, agents)
        if agents.last is None:
            raise RuntimeError(f"{type(self.vf_env).__name__}.run() ran no agent")
        return agents.last.episode, agents.last.trace

    async def group(self) -> None:
        task = self.next_task()
        try:
            if self.multi_turn:
                results = await asyncio.gather(*(self.multi_turn_episode(task) for _ in range(self.group_size)))
            else:
                results = await self.single_turn_group(task)
        except Exception as exc:
            self.failures += 1
            sys.stderr.write(f"hermes-rl: {self.name}: group dropped: {type(exc).__name__}: {_first_line(str(exc))}\n")
            if self.failures >= MAX_FAILED_GROUPS:
                raise SystemExit(
                    f"VerifiersTasksetError: {self.name}: {MAX_FAILED_GROUPS} groups in a row failed; last: "
                    f"{type(exc).__name__}: {_first_line(str(exc))}"
                ) from None
            return
        self.failures = 0
        await self.post(results)

    async def post(self, results: list[tuple[Episode, object]]) -> None:
        limit = int(self.env["max_token_length"])
        kept = [(e, t) for e, t in results if len(e.tokens) <= limit]
        scores = [float(t.reward) for _, t in kept]
        self.pending += [
            {"reward": s, "turns": e.turns, **{f"reward/{k}": r.score for k, r in t.rewards.items() if r is not None}}
            for s, (e, t) in zip(scores, kept)
        ]
        if len(kept) < 2 or (self.env.get("ensure_scores_are_not_same", True) and len(set(scores)) == 1):
            return
        group = {
            "tokens": [e.tokens for e, _ in kept],
            "masks": [e.masks for e, _ in kept],
            "scores": scores,
            "inference_logprobs": [e.logprobs for e, _ in kept],
            "env_id": self.env_id,
            "messages": [
                [{k: v for k, v in m.items() if k in ("role", "content")} for m in _dump_messages(t)] for _, t in kept
            ],
        }
        await self._json("POST", f"{self.api}/scored_data", json=group)

    def flush_metrics(self, step: int) -> None:
        if not self.pending or not self.metrics_path:
            self.pending = []
            return
        keys = sorted({k for row in self.pending for k in row})
        row = {"step": step, "time": time.time(), "environment": self.name}
        for key in keys:
            values = [r[key] for r in self.pending if key in r]
            name = "train/reward_mean" if key == "reward" else "verifiers/turns" if key == "turns" else key
            row[name] = sum(values) / len(values)
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

    async def serve(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as self.session:
            await self.register()
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


def _dump_messages(trace) -> list[dict]:
    return [m.model_dump(mode="json") for m in trace.messages]


class _DirectInteraction:
    """What a multi-turn `Env.run` drives (`interaction.turn(message)`): each turn one chat request."""

    def __init__(self, bridge: Bridge, task) -> None:
        self.bridge, self.task = bridge, task
        self.messages = _messages(task)
        self.episode = Episode()
        self.trace = _trace(task, self.messages)
        self.done = False

    async def turn(self, message=None):
        from verifiers.v1.agent import Segment
        from verifiers.v1.utils.decorators import invoke_all

        if message is not None:
            if isinstance(message, str):
                self.messages.append({"role": "user", "content": message})
            else:
                self.messages += [
                    m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else dict(m)
                    for m in message
                ]
        if self.done or self.episode.turns >= self.bridge.max_turns:
            self.done = True
            return Segment(messages=[], terminated=True)
        prompt_ids, choices = await self.bridge.chat(self.messages, 1)
        choice = choices[0]
        self.episode.add_turn(
            prompt_ids, choice["token_ids"], [c["logprob"] for c in (choice.get("logprobs") or {}).get("content") or []]
        )
        self.messages.append({"role": "assistant", "content": choice["message"]["content"], "_sampled": True})
        self.trace = _trace(self.task, self.messages)
        stops = self.task.hooks("stop")
        if stops and any(await invoke_all(stops, {"task": self.task.data, "trace": self.trace})):
            self.done = True
        return Segment(messages=[self.trace.nodes[-1].message])


class _DirectAgent:
    def __init__(self, owner: _DirectAgents) -> None:
        self.owner = owner

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        interaction = _DirectInteraction(self.owner.bridge, task)
        self.owner.last = interaction
        yield interaction
        await task.score(interaction.trace)

    async def run(self, task):
        async with self.interaction(task) as interaction:
            await interaction.turn()
        return self.owner.last.trace


class _DirectAgents:
    """Every seat of the taskset's Env played by the policy, through direct chat requests."""

    def __init__(self, bridge: Bridge, task) -> None:
        self.bridge, self.task = bridge, task
        self.last: _DirectInteraction | None = None

    def __getattr__(self, name: str) -> _DirectAgent:
        if name.startswith("_") or name in ("bridge", "task", "last"):
            raise AttributeError(name)
        return _DirectAgent(self)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="verifiers_bridge")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    serve = sub.add_parser("serve")
    serve.add_argument("--config", required=True)
    serve.add_argument("--taskset", required=True)
    args = parser.parse_args(argv)
    if args.command == "list":
        out_fd = os.dup(1)
        os.dup2(2, 1)  # whatever the packages print goes to stderr; stdout carries one JSON line
        os.write(out_fd, (json.dumps(list_tasksets(), default=str) + "\n").encode())
        return 0
    import yaml

    config = yaml.safe_load(_read_text(args.config))
    asyncio.run(Bridge(config, args.taskset).serve())
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
