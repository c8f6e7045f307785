"""API keys: read from the environment or $HERMES_HOME/.env (env wins); never written anywhere else.

Children get keys through their environment only, never argv.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import secrets
from contextvars import ContextVar
from pathlib import Path

from .errors import BadInput
from .fsutil import atomic_write_text, open_regular, read_regular_text
from .paths import hermes_home

SECRET_NAMES = ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY")
# The local Tinker server's credential: made by the supervisor for each run (never read from .env,
# never inherited), given to the server and the trainer through their environment only.
LOCAL_TINKER_KEY_ENV = "TINKER_LOCAL_API_KEY"
# The run's OpenAI-compatible endpoint (the trainer's inference server) requires this key as a bearer token
# of every client but /health. The supervisor makes it for each run and gives it to the trainer and the
# environment workers through their environment; clients outside the run (test-inference, vf-eval, any
# OpenAI client) read it from the run folder's ENDPOINT_KEY_FILE, private to the user like .env.
ENDPOINT_KEY_ENV = "HERMES_RL_ENDPOINT_KEY"
ENDPOINT_KEY_FILE = "endpoint.key"
# What config.yaml holds where the key goes: an Atropos environment's worker (dataplane/env_launch) puts the
# key from its environment in its place, so no file holds the key but ENDPOINT_KEY_FILE.
ENDPOINT_KEY_PLACEHOLDER = "$" + ENDPOINT_KEY_ENV
# The credentials a supervisor makes for its run (variable names): children get only those their spec names.
RUN_KEYS = (LOCAL_TINKER_KEY_ENV, ENDPOINT_KEY_ENV)


def new_run_keys() -> dict[str, str]:
    """A run's credentials, made by its supervisor: the local Tinker server's, only in memory and in the
    environment of the processes that name it in secret_env (no argv, log or state file); the endpoint's,
    also in the run folder's private key file for its clients outside the run (removed when it ends)."""
    return {
        LOCAL_TINKER_KEY_ENV: "tml-local-" + secrets.token_urlsafe(24),
        ENDPOINT_KEY_ENV: "hrl-" + secrets.token_urlsafe(24),
    }


def write_endpoint_key(run_folder: os.PathLike | str, key: str) -> None:
    """The run's endpoint key in its folder's ENDPOINT_KEY_FILE, readable by the user only."""
    atomic_write_text(Path(run_folder) / ENDPOINT_KEY_FILE, key + "\n", mode=0o600)


def forget_endpoint_key(run_folder: os.PathLike | str) -> None:
    """Remove the key file of an endpoint that has ended."""
    with contextlib.suppress(OSError):
        (Path(run_folder) / ENDPOINT_KEY_FILE).unlink()


def read_endpoint_key(run_folder: os.PathLike | str) -> str | None:
    """The key of a live run's endpoint (its run folder's ENDPOINT_KEY_FILE), or None: the run has ended, or
    predates keys."""
    try:
        text = read_regular_text(os.path.join(run_folder, ENDPOINT_KEY_FILE), limit=4096, follow=False)
    except (OSError, UnicodeDecodeError):
        return None
    return text.strip() or None


_reading_ours: ContextVar[bool] = ContextVar("hermes_rl_reading_env_file", default=False)


@functools.cache
def _dotenv_values():
    """python-dotenv's dotenv_values, imported on first use, with its warnings about lines it cannot parse
    silenced for our reads only: .env is re-read for every redaction, so one bad line would repeat in every
    log. A host process's own .env reads still warn."""
    from dotenv import dotenv_values  # noqa: PLC0415 - python-dotenv only when a .env is read

    logging.getLogger("dotenv.main").addFilter(lambda record: not _reading_ours.get())
    return dotenv_values


def read_env_file() -> dict[str, str]:
    """KEY=value lines of $HERMES_HOME/.env (python-dotenv's syntax: comments, `export`, quotes; no
    ${VAR} expansion); blanks, malformed lines and keys without a value are skipped."""
    path = hermes_home() / ".env"
    try:
        with open_regular(path) as handle:
            _warn_if_shared(path, os.fstat(handle.fileno()).st_mode)
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return {}
    token = _reading_ours.set(True)
    try:
        values = _dotenv_values()(stream=io.StringIO(text), interpolate=False)
    finally:
        _reading_ours.reset(token)
    return {key: value for key, value in values.items() if value is not None}


_warned: set[tuple[str, int]] = set()


def _warn_if_shared(path, mode: int) -> None:
    """One warning per process when .env can be read by other users (it holds API keys)."""
    if mode & 0o077 and (str(path), mode) not in _warned:
        _warned.add((str(path), mode))
        logging.getLogger("hermes_rl").warning(
            "%s holds API keys but other users can read it (mode %o): run chmod 600 %s", path, mode & 0o777, path
        )


def get_key(name: str) -> str | None:
    value = os.environ.get(name)
    if value:
        return value
    return read_env_file().get(name) or None


def keys_present() -> dict[str, bool]:
    """Which known secrets are set (never their values)."""
    file_values = read_env_file()
    return {name: bool(os.environ.get(name) or file_values.get(name)) for name in SECRET_NAMES}


def secret_values() -> list[str]:
    """The current values of every known secret, for redaction."""
    file_values = read_env_file()
    values = []
    for name in SECRET_NAMES:
        for value in (os.environ.get(name), file_values.get(name)):
            if value and len(value) >= 4:
                values.append(value)
    return values


def redact(text: str, values: list[str] | None = None) -> str:
    for value in values if values is not None else secret_values():
        text = text.replace(value, "***")
    return text


def secret_env(names: list[str] | tuple[str, ...] = SECRET_NAMES) -> dict[str, str]:
    """The secrets (by name) that are set, for passing to a child process's environment."""
    out = {}
    for name in names:
        value = get_key(name)
        if value:
            out[name] = value
    return out


def refuse_secret_values(texts: dict[str, object], hint: str) -> None:
    """BadInput naming the first of `texts` ({what: value}) that holds a secret's value.

    Values are compared as their JSON text, so a key hidden in a list or mapping is found too."""
    values = secret_values()
    if not values:
        return
    for what, value in texts.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if any(secret in text for secret in values):
            raise BadInput(f"{what} contains the value of a secret key", hint=hint)
