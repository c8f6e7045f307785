"""`hermes-rl rollouts RUN --prompt TEXT`: one prompt's groups across training, a page at a time."""

from __future__ import annotations

from typing import Any

from ...base.formatting import human_number


def prompt_rollouts(args, console, safe) -> Any:
    from ...readers.prompt_history import prompt_history

    out = prompt_history(
        args.run_id, args.prompt, offset=args.offset, limit=args.limit or 20, zero_variance=args.zero_variance
    )
    if args.json:
        return out
    console.print(
        f"run [bold]{safe(out['run_id'])}[/]  prompt containing {safe(repr(out['prompt']))}: "
        f"{out['matches']} group(s) over {out['steps']} step(s)"
        + (f"; showing {out['offset'] + 1}-{out['offset'] + len(out['groups'])}" if out["groups"] else "")
    )
    by_group: dict[tuple, list[dict]] = {}
    for row in out["rows"]:
        by_group.setdefault((row["step"], row["group"]), []).append(row)
    for group in out["groups"]:
        alike = "  [yellow]all scored alike[/]" if group["zero_variance"] else ""
        console.print(
            f"[bold]step {group['step']}[/] group {safe(group['group'])}  "
            f"mean reward {human_number(group['reward_mean'])}{alike}  prompt: {safe(_one_line(group['prompt']))}"
        )
        for row in by_group.get((group["step"], group["group"]), []):
            console.print(
                f"  reward {human_number(row['reward'])}  adv {human_number(row['advantage'])}  "
                f"{safe(row['finish'] or '-')}  {safe(_one_line(row['completion']))}"
            )
    if out["next_offset"] is not None:
        console.print(f"more: --offset {out['next_offset']}")
    return None


def _one_line(text: str, chars: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"
