"""`hermes-rl` commands that open another front end: mcp (the rl_* tools over stdio), dashboard and
demo (the dashboard, handed in by the launcher so core never imports Textual)."""

from __future__ import annotations

import sys
from typing import Any

from ...base.errors import HermesError
from .output import rich_console, safe
from .watch import watch


def cmd_mcp(args) -> Any:
    from ..mcp_server import main as mcp_main

    mcp_main()
    return None


def _open_dashboard(args, run_id: str | None) -> None:
    if args.open_dashboard is None:
        raise HermesError(
            "the dashboard is not part of this entry point", hint="run `hermes-rl` (or python -m hermes_rl.tui)"
        )
    args.open_dashboard(run_id)


def cmd_dashboard(args) -> Any:
    _open_dashboard(args, getattr(args, "run_id", None))
    return None


def cmd_demo(args) -> Any:
    """The main job: a local run of the documented default (the local profile's default environment with
    its default values, whatever is selected or drafted) and the dashboard over it."""
    from ... import runs
    from ...base.paths import drafts_dir
    from ...envs.drafts import current_selection

    run = runs.start_run(None, profile="local", documented_default=True)
    selected, env = current_selection().get("environment"), str(run.get("environment"))
    if (selected and selected != env) or (drafts_dir() / f"{env}.yaml").is_file():
        rich_console(stderr=True).print(
            f"[dim]this runs the default {safe(env)} with its default values; `hermes-rl start` runs your "
            f"selection {safe(selected or env)} with its draft[/]"
        )
    for notice in run.get("notices") or []:
        rich_console(stderr=True).print(f"[yellow]{safe(notice)}[/]")
    if not sys.stdout.isatty():
        return watch(run["run_id"], json_output=args.json)
    _open_dashboard(args, run["run_id"])
    return None
