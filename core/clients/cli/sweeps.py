"""`hermes-rl sweep` (and sweep list, show, cancel): a grid of runs as one sweep, over core.runs.sweeps.
`print_sweep` is also `compare --sweep`'s summary."""

from __future__ import annotations

from typing import Any

from ...base.errors import BadInput
from ...base.formatting import human_age, human_number
from ...base.prices import tokens_text
from .output import rich_console, safe


def _spread_text(spread: dict | None) -> str:
    if not spread:
        return "-"
    if spread["n"] > 1:
        return f"{human_number(spread['mean'])} ± {human_number(spread['std'])}"
    return human_number(spread["mean"])


def print_sweep(sweep: dict) -> None:
    """The sweep's configurations with their runs and results (mean ± std over seeds)."""
    from rich.table import Table

    console = rich_console()
    seeds = sweep.get("seeds")
    console.print(
        f"sweep [bold]{safe(sweep['sweep_id'])}[/]  {safe(sweep['environment'])}  profile {safe(sweep['profile'])}"
        f"  {len(sweep['members'])} runs" + (f" ({len(seeds)} seeds each)" if seeds else "")
    )
    window = sweep.get("reward_window")
    table = Table(
        "configuration", "runs", "eval first", "eval best", "eval last", "reward", "cost", box=None, header_style="bold"
    )
    # On a narrow terminal the configuration and the run ids stay whole (one run per line); numbers wrap.
    rows = sweep.get("summary") or []
    configs = [" ".join(f"{k}={v}" for k, v in row["config"].items()) or "(no change)" for row in rows]
    table.columns[0].no_wrap, table.columns[0].min_width = True, max((len(c) for c in configs), default=13)
    table.columns[1].no_wrap, table.columns[1].min_width = True, 20
    for config, row in zip(configs, rows, strict=True):
        runs = "\n".join(safe(f"{r} {s}" if r else "(queued)") for r, s in zip(row["runs"], row["states"]))
        table.add_row(
            safe(config),
            runs,
            _spread_text(row["eval_first"]),
            _spread_text(row["eval_best"]),
            _spread_text(row["eval_last"]),
            _spread_text(row["final_reward"]),
            safe((row.get("cost") or {}).get("text") or "-"),
        )
    console.print(table)
    total = sweep.get("cost")
    if total:
        budget = f" of a {sweep['budget_usd']:g} USD budget" if sweep.get("budget_usd") else ""
        console.print(f"cost: {safe(total['text'])}{budget} ({tokens_text(total['tokens'])})")
    for member in sweep["members"]:
        if member.get("error"):
            console.print(f"[red]run {member['index']} could not start:[/] {safe(member['error'])}")
    spread = "; ± is the standard deviation over seeds" if seeds and len(seeds) > 1 else ""
    console.print(f"[dim]reward: the mean of each run's last {window} steps{spread}[/]")


def cmd_sweep(args) -> Any:
    from ...runs import sweeps

    if args.sweep_action == "list":
        rows = sweeps.list_sweeps()
        if args.json:
            return rows
        if not rows:
            rich_console().print("no sweeps yet: hermes-rl sweep --set learning_rate=1e-4,3e-4")
            return None
        for sweep in reversed(rows):
            states = [m.get("state") for m in sweep["members"]]
            grid = " ".join(f"{k}={','.join(v)}" for k, v in sweep["grid"].items())
            rich_console().print(
                f"{safe(sweep['sweep_id'])}  {human_age(sweep.get('created_at'))}  {safe(sweep['environment'])}  "
                f"{safe(grid)}  {states.count('started')} started, {states.count('queued')} queued"
                + (f", {states.count('failed')} failed" if "failed" in states else "")
                + (f", {states.count('cancelled')} cancelled" if "cancelled" in states else "")
            )
        return None
    if args.sweep_action in ("show", "cancel") and not args.sweep_id:
        raise BadInput(f"sweep {args.sweep_action} needs a sweep id", hint="the ids are in `hermes-rl sweep list`")
    if args.sweep_action == "cancel":
        sweep = sweeps.cancel_sweep(args.sweep_id, stop_runs=args.stop)
        if args.json:
            return sweep
        states = [m.get("state") for m in sweep["members"]]
        rich_console().print(
            f"sweep {safe(args.sweep_id)}: {states.count('cancelled')} run(s) will not start"
            + ("; its active runs were stopped" if args.stop else " (its started runs go on; --stop stops them)")
        )
        return None
    if args.sweep_action == "show":
        sweeps.start_queued()  # a place may be free (a run ended while no supervisor could start the next)
        sweep = sweeps.sweep_status(args.sweep_id)
        if args.json:
            return sweep
        print_sweep(sweep)
        return None
    if args.sweep_id:
        raise BadInput(
            f"unexpected {args.sweep_id!r}", hint="hermes-rl sweep --set FIELD=V1,V2, sweep list or sweep show ID"
        )
    values = sweeps.parse_grid(args.set)
    sweep = sweeps.create_sweep(
        values, seeds=args.seeds, env_name=args.env, profile=args.profile, budget_usd=args.budget_usd
    )
    if args.json:
        return sweep
    console = rich_console()
    for notice in sweep.get("notices") or []:
        console.print(f"[yellow]{safe(notice)}[/]")
    started = [m for m in sweep["members"] if m["state"] == "started"]
    queued = [m for m in sweep["members"] if m["state"] == "queued"]
    console.print(
        f"sweep [bold]{sweep['sweep_id']}[/]: {len(sweep['members'])} runs, {len(started)} started"
        + (f", {len(queued)} queued (they start as places under the local-run limit free)" if queued else "")
    )
    for member in sweep["members"]:
        config = " ".join(f"{k}={v}" for k, v in member["config"].items())
        seed = f" seed={member['seed']}" if member.get("seed") is not None else ""
        # A member's state (queued, failed, cancelled) is not a run status: no run glyph for it.
        colour = {"failed": "red", "cancelled": "yellow"}.get(member["state"], "dim")
        state = f"run {member['run_id']}" if member["state"] == "started" else f"[{colour}]{safe(member['state'])}[/]"
        console.print(f"  {safe(config + seed)}: {state}" + (f" {safe(member['error'])}" if member["error"] else ""))
    sweep_id = sweep["sweep_id"]
    console.print(f"  results: hermes-rl sweep show {sweep_id}   compare: hermes-rl compare --sweep {sweep_id}")
    return None
