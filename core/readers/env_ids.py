"""Which environment each run-api env_id is: the run folder's env_ids.jsonl, appended by every
environment worker once it has registered (dataplane.env_launch). run-api's batches, and so the
trainer's rollouts.jsonl, name an environment only by that id; a restarted worker registers again
under a new id."""

from __future__ import annotations

import os
from pathlib import Path

from ..base.fsutil import iter_jsonl

ENV_IDS_FILE = "env_ids.jsonl"


def env_names(folder: str | os.PathLike) -> dict[int, str]:
    """{env_id: environment name} of a run folder ({} before any worker registered)."""
    path = Path(folder) / ENV_IDS_FILE
    names: dict[int, str] = {}
    if not path.exists():
        return names
    try:
        for _end, row in iter_jsonl(path):
            env_id, name = row.get("env_id"), row.get("environment")
            if isinstance(env_id, int) and not isinstance(env_id, bool) and isinstance(name, str):
                names[env_id] = name
    except OSError:
        pass
    return names
