"""Sample any saved checkpoint of any run — finished, stopped, failed or still running.

A run's trainer records every save (`save_state`: LoRA weights and optimizer state) as a line of
`<run>/checkpoints.jsonl` ({name, step, state_path: tinker://…, local_path, backend}); a run from
before that file has its newest save in trainer_state.json. `find_checkpoint(run_id, step)` picks
one; `sample_prompt` answers a prompt with it, and `InferenceTrial.prepare(checkpoint=…)` runs the
run's environment against it and scores the answers.

On the local backend the checkpoint's folder is copied into a fresh tinker-local's own checkpoint
folder (the run's files are only read, a live run is not disturbed) and served as the trainer serves
its policy; on Tinker cloud its tinker:// path is sampled there.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from .. import runs
from ..base.errors import BadInput, HermesError, NotFound
from ..base.fsutil import iter_jsonl, read_json, read_regular_text
from ..base.names import is_ascii_digits
from ..base.paths import run_dir, saved_checkpoint_folder
from .runconfig import read_run_config
from .trial import PolicyServer, child_base_env, inference_trials_root

CHECKPOINTS_FILE = "checkpoints.jsonl"  # written by the trainer (dataplane.trainer.loop)
TRAINER_STATE_FILE = "trainer_state.json"
MAX_SAMPLES = 16
MAX_PROMPT_CHARS = 20_000
DEFAULT_MAX_TOKENS = 128
SAMPLE_DEADLINE_S = 300.0


def list_checkpoints(run_id: str) -> list[dict]:
    """The run's saved checkpoints, oldest step first: {name, step, tinker_path, local_path, backend,
    saved_at}; local_path only where the folder still exists. NotFound for an unknown run."""
    runs.get_run(run_id, sample=False)
    folder = run_dir(run_id)
    found: dict[str, dict] = {}
    rows = [row for _, row in iter_jsonl(folder / CHECKPOINTS_FILE)] if (folder / CHECKPOINTS_FILE).exists() else []
    try:
        state = read_json(folder / TRAINER_STATE_FILE)
        if isinstance(state, dict):
            rows.append(state)
    except (OSError, ValueError):
        pass
    for row in rows:
        path = row.get("state_path")
        step = row.get("step")
        if not isinstance(path, str) or not path.startswith("tinker://") or isinstance(step, bool):
            continue
        # The folder is derived from the tinker:// path inside this run's folder, as resume does: the
        # local_path a state file names is only checked against it, never served or copied.
        try:
            local: str | None = str(saved_checkpoint_folder(folder, path, row.get("local_path")))
        except BadInput:
            local = None
        found[path] = {
            "name": str(row.get("name") or path.rsplit("/", 1)[-1]),
            "step": step if isinstance(step, int) else None,
            "tinker_path": path,
            "local_path": local if local and Path(local, "adapter_model.safetensors").is_file() else None,
            "backend": row.get("backend"),
            "saved_at": row.get("saved_at"),
        }
    checkpoints = list(found.values())
    checkpoints.sort(key=lambda c: (c["step"] is None, c["step"] or 0, c["saved_at"] or 0))
    return checkpoints


def parse_checkpoint_ref(text: str) -> tuple[str, int | None]:
    """ "RUN" or "RUN@STEP" as (run id, step or None); BadInput for anything else."""
    run_id, sep, step = text.strip().partition("@")
    if sep and not is_ascii_digits(step.strip()):
        raise BadInput(f"a checkpoint is RUN or RUN@STEP, got {text!r}"[:120], hint="e.g. a1b2c3d4@40")
    return run_id.strip(), int(step) if sep else None


def find_checkpoint(run_id: str, step: int | None = None) -> dict:
    """The checkpoint at `step` (default: the newest), with what serving it needs: the run's base model
    folder, profile and environment. BadInput naming the saved steps when there is none at `step`."""
    run = runs.get_run(run_id, sample=False)
    checkpoints = list_checkpoints(run_id)
    if not checkpoints:
        raise NotFound(
            f"run {run_id} has saved no checkpoint yet",
            hint="the trainer saves at its save_checkpoint_interval, when it is stopped, and at the end",
        )
    if step is None:
        chosen = checkpoints[-1]
    else:
        matching = [c for c in checkpoints if c["step"] == step]
        if not matching:
            steps = ", ".join(str(c["step"]) for c in checkpoints)
            raise BadInput(f"run {run_id} saved no checkpoint at step {step}", hint=f"its saved steps: {steps}")
        chosen = matching[-1]
    config = read_run_config(run_id)
    backend = config.get("backend")
    if not isinstance(backend, dict):
        backend = {}
    local = backend.get("kind") == "local" or chosen.get("backend") == "local"
    if local and not chosen["local_path"]:
        raise NotFound(
            f"the folder of run {run_id}'s checkpoint {chosen['name']} is gone",
            hint=f"it was under {run_dir(run_id) / 'checkpoints'}",
        )
    servers = config.get("openai")
    if not isinstance(servers, list):
        servers = []
    tokenizer = (servers[0] if servers and isinstance(servers[0], dict) else {}).get("tokenizer_name")
    model_dir = backend.get("model_dir") or tokenizer or (config.get("tinker") or {}).get("base_model")
    if not model_dir:
        raise HermesError(f"run {run_id}'s config.yaml names no base model", hint="it cannot be served without one")
    env_section = config.get("env")
    if not isinstance(env_section, dict):
        env_section = {}
    return {
        **chosen,
        "local_path": chosen["local_path"] if local else None,
        "run_id": run_id,
        "status": run.get("status"),
        "environment": run.get("environment"),
        "profile": run.get("profile"),
        "model_dir": str(model_dir),
        # the environment's own `chat` field (toy_addition's): whether it asked through the chat template
        "trained_chat": env_section.get("chat") if isinstance(env_section.get("chat"), bool) else None,
    }


def has_chat_template(model_dir: str) -> bool | None:
    """Whether a local model folder's tokenizer has a chat template (None: not a local folder, so unknown)."""
    folder = Path(model_dir)
    if not folder.is_dir():
        return None
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads(read_regular_text(folder / "tokenizer_config.json"))
    except (OSError, ValueError, HermesError):
        return False
    return bool(isinstance(config, dict) and config.get("chat_template"))


def prompt_format(checkpoint: dict, chat: bool | None = None) -> tuple[bool, str]:
    """(send through the chat template?, why): as asked, else as the run's environment asked its prompts,
    else the chat template when the model has one and raw text when it has none."""
    if chat is not None:
        return chat, "as asked"
    if checkpoint.get("trained_chat") is False:
        return False, "the run's environment asked in raw text (chat: false); --chat uses the chat template"
    if has_chat_template(checkpoint["model_dir"]) is False:
        return False, "the model has no chat template"
    return True, "the model's chat template; --raw sends the prompt as it is"


def _post_json(url: str, body: dict, deadline_s: float, key: str) -> dict:
    parsed = urllib.parse.urlparse(url)
    if not parsed.hostname:
        raise http.client.InvalidURL(f"no host in {url!r}")
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=deadline_s)
    try:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        conn.request("POST", parsed.path, body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read(16 << 20)
    except (OSError, http.client.HTTPException) as exc:
        raise HermesError(f"the checkpoint's server did not answer: {exc}"[:300]) from None
    finally:
        conn.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = {}
    if response.status >= 400:
        detail = answer.get("error") if isinstance(answer, dict) else None
        raise HermesError(f"the checkpoint's server refused the prompt: HTTP {response.status} {detail or ''}"[:300])
    return answer if isinstance(answer, dict) else {}


def sample_prompt(
    checkpoint: dict,
    prompt: str,
    *,
    n: int = 1,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float = 1.0,
    chat: bool | None = None,
    on_stage=None,
) -> dict:
    """`n` completions of `prompt` by the checkpoint (a chat message with the model's chat template, or
    raw text with chat=False; None: as `prompt_format` decides): {checkpoint, prompt, prompt_format ("chat
    template" or "raw"), prompt_format_why, completions: [{text, finish}], duration_s, log}."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadInput("the prompt is empty", hint='e.g. --prompt "What is 2+3?"')
    if len(prompt) > MAX_PROMPT_CHARS:
        raise BadInput(f"the prompt is longer than {MAX_PROMPT_CHARS:,} characters")
    if not 1 <= n <= MAX_SAMPLES:
        raise BadInput(f"n must be from 1 to {MAX_SAMPLES}, got {n}")
    if not 1 <= max_tokens <= 4096:
        raise BadInput(f"max_tokens must be from 1 to 4096, got {max_tokens}")
    chat, why = prompt_format(checkpoint, chat)
    root = inference_trials_root()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    log = root / f"sample-{checkpoint['run_id']}-{stamp}-{time.time_ns() % 10**6:06d}.log"
    server = PolicyServer(checkpoint["model_dir"], log, child_base_env(), checkpoint)
    started = time.monotonic()
    try:
        for stage in server.start(threading.Event()):
            if on_stage is not None:
                on_stage(stage)
        params = {"model": Path(checkpoint["model_dir"]).name, "n": n, "max_tokens": max_tokens}
        params["temperature"] = temperature
        if chat:
            answer = _post_json(
                server.base_url + "/chat/completions",
                params | {"messages": [{"role": "user", "content": prompt}]},
                SAMPLE_DEADLINE_S,
                server.key,
            )
            choices = answer.get("choices", [])
            texts = [((c.get("message") or {}).get("content"), c.get("finish_reason")) for c in choices]
        else:
            answer = _post_json(
                server.base_url + "/completions", params | {"prompt": prompt}, SAMPLE_DEADLINE_S, server.key
            )
            texts = [(c.get("text"), c.get("finish_reason")) for c in answer.get("choices", [])]
    finally:
        server.stop()
    return {
        "checkpoint": {k: checkpoint.get(k) for k in ("run_id", "name", "step", "tinker_path", "status")},
        "prompt": prompt,
        "prompt_format": "chat template" if chat else "raw",
        "prompt_format_why": why,
        "completions": [{"text": text or "", "finish": finish} for text, finish in texts],
        "duration_s": round(time.monotonic() - started, 2),
        "log": str(log),
    }


def scored_completions(rollouts_path: str | Path, limit: int = 8) -> list[dict]:
    """The completions an environment scored in an inference test (its scored groups), best first:
    {text, score}; the text is the last message of each scored conversation."""
    out: list[dict[str, Any]] = []
    path = Path(rollouts_path)
    if not path.exists():
        return out
    for _, group in iter_jsonl(path):
        scores = group.get("scores")
        messages = group.get("messages")
        if not isinstance(scores, list):
            scores = []
        if not isinstance(messages, list):
            messages = []
        for index, score in enumerate(scores):
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                continue
            conversation = messages[index] if index < len(messages) else None
            text = ""
            if isinstance(conversation, list) and conversation and isinstance(conversation[-1], dict):
                text = str(conversation[-1].get("content") or "")
            out.append({"text": text, "score": float(score)})
    out.sort(key=lambda c: -c["score"])
    return out[:limit]
