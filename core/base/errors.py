"""Errors every client turns into one clear line (CLI), a JSON error (agent tools) or a toast (TUI)."""

from __future__ import annotations

# An error may echo what it was given (a name, a value): whatever its size, the message stays readable
# and a client (an agent above all) never gets back a megabyte it sent.
MAX_MESSAGE_CHARS = 1200
MAX_HINT_CHARS = 2000


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HermesError(Exception):
    """Base for expected, user-facing failures. `hint` says what to do about it."""

    def __init__(self, message: str, hint: str | None = None):
        message = _bounded(str(message), MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.message = message
        self.hint = _bounded(str(hint), MAX_HINT_CHARS) if hint is not None else None
        self.tool_extra: dict | None = None  # keys an agent tool's error answer adds (core.clients.toolset)

    def to_dict(self) -> dict:
        out: dict = {"error": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class BadInput(HermesError):
    """A value, id or file that cannot be used as given."""


class NotFound(HermesError):
    """A run, environment or field that does not exist."""


class MissingKey(HermesError):
    """A secret the chosen profile needs is not set."""


class Conflict(HermesError):
    """The action does not fit the current state (e.g. stopping a finished run)."""
