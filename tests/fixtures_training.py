"""Fixtures for the trainer / environment / end-to-end tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def toy_model_dir(request) -> Path:
    """The built tiny model: the model fixture of tests/fixtures_model.py when present, else one built
    once per machine (dataplane.tiny_model.ensure_model) in $HERMES_RL_TEST_MODEL or ~/.cache/hermes-rl."""
    try:
        return Path(request.getfixturevalue("tiny_model_dir"))
    except pytest.FixtureLookupError:
        from dataplane.tiny_model import ensure_model

        folder = Path(os.environ.get("HERMES_RL_TEST_MODEL") or Path.home() / ".cache" / "hermes-rl" / "test-tiny-toy")
        return Path(ensure_model(folder))
