"""The same prompt across training: every recorded group whose prompt holds a text, step by step, from
the run's rollouts.jsonl (`hermes-rl rollouts RUN --prompt TEXT`, rl_get_rollouts' prompt).

One pass over the file, line by line: a line is parsed only when its raw bytes hold the text (as the
recorder wrote it, JSON-escaped), and only the page asked for is kept, so memory stays bounded on a run
with 100,000 rollouts whatever it matched.
"""

from __future__ import annotations

import json
from typing import Any

from ..base.errors import BadInput, NotFound
from ..base.fsutil import open_regular, parse_jsonl_line
from ..base.paths import run_dir
from .rollouts import ROLLOUTS_FILE, _group

MAX_PAGE = 200  # groups in one page


def _needle(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")


def prompt_history(
    run_id: str,
    prompt: str,
    *,
    offset: int = 0,
    limit: int = 20,
    zero_variance: bool = False,
    chars: int | None = None,
) -> dict[str, Any]:
    """Groups (oldest step first) whose prompt contains `prompt`: `offset` groups skipped, at most
    `limit` kept; with `zero_variance`, only groups whose completions all scored the same. Each row:
    step, group, prompt, completion, reward, advantage, tokens, finish. `matches` counts them all."""
    if not prompt or not prompt.strip():
        raise BadInput("--prompt needs some text of the prompt to look for")
    if offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"offset must be at least 0 and limit 1..{MAX_PAGE}, got offset {offset}, limit {limit}")
    path = run_dir(run_id) / ROLLOUTS_FILE
    if not path.exists():
        raise NotFound(f"run {run_id} has no rollouts.jsonl", hint="rollouts are recorded from the first step")
    needle = _needle(prompt)
    matches, steps, page = 0, set(), []
    with open_regular(path) as handle:
        for raw in handle:
            if needle not in raw:
                continue
            row = parse_jsonl_line(raw)
            group = _group(row) if row else None
            if group is None or prompt not in group["prompt"]:
                continue
            rewards = [c["reward"] for c in group["completions"] if c["reward"] is not None]
            alike = len(rewards) > 1 and max(rewards) - min(rewards) < 1e-12
            if zero_variance and not alike:
                continue
            matches += 1
            steps.add(group["step"])
            if offset < matches <= offset + limit:
                page.append(_rows(group, alike, chars))
    return {
        "run_id": run_id,
        "prompt": prompt,
        "matches": matches,
        "steps": len(steps),
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if matches > offset + limit else None,
        "groups": [{k: v for k, v in group.items() if k != "rows"} for group in page],
        "rows": [row for group in page for row in group["rows"]],
    }


def _cut(text: str, chars: int | None) -> str:
    return text if chars is None or len(text) <= chars else text[:chars] + "…"


def _rows(group: dict, alike: bool, chars: int | None) -> dict:
    rewards = [c["reward"] for c in group["completions"] if c["reward"] is not None]
    prompt = _cut(group["prompt"], chars)
    return {
        "step": group["step"],
        "group": group["group"],
        "prompt": prompt,
        "zero_variance": alike,
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
        "rows": [
            {
                "step": group["step"],
                "group": group["group"],
                "prompt": prompt,
                "completion": _cut(item["text"], chars),
                "reward": item["reward"],
                "advantage": item["advantage"],
                "tokens": item["tokens"],
                "finish": item["finish"],
            }
            for item in group["completions"]
        ],
    }
