"""The CLI's commands for many runs: derived profiles (`hermes-rl profile new/list/show`) and sweeps
(`hermes-rl sweep`, `sweep list`, `sweep show ID`). Thin wrappers over core.envs.profile_derive,
core.runs.profile_of_run and core.runs.sweeps, printed with the CLI's own helpers."""

from __future__ import annotations

import argparse
from typing import Any

from ..base.errors import BadInput
from ..base.formatting import human_age, human_number, value_text
from ..base.names import ascii_int
from .cli import _console, _parse_assignments, _safe


def _assignments(items: list[str] | None) -> dict[str, str]:
    """`--set a=1 b=2` and `--set a=1 --set b=2` alike."""
    return _parse_assignments([item for group in items or [] for item in group])


def _profile_table(profile: dict) -> None:
    from rich.table import Table

    console = _console()
    console.print(
        f"profile [bold]{_safe(profile['name'])}[/] ({_safe(profile['backend'])}): {_safe(profile['description'])}"
    )
    if profile.get("overrides_file"):
        console.print(f"  file: {_safe(profile['overrides_file'])}")
    table = Table("field", "value", "why locked", box=None, header_style="bold")
    for field in profile["locked"]:
        table.add_row(_safe(field["name"]), _safe(value_text(field["value"])), _safe(field["reason"]))
    for name, value in profile["editable_defaults"].items():
        table.add_row(_safe(name), _safe(value_text(value)), "editable: the default of new drafts")
    console.print(table)


def cmd_profile(args) -> Any:
    from ..envs import profile_derive
    from ..envs.profiles import get_profile

    if args.profile_action == "list":
        rows = profile_derive.profile_rows()
        if args.json:
            return rows
        from rich.table import Table

        table = Table("profile", "backend", "extends", "changes", "description", box=None, header_style="bold")
        for row in rows:
            if row.get("error"):
                table.add_row(_safe(row["name"]), "", "", "", f"[red]{_safe(row['error'])}[/]")
                continue
            changes = " ".join(f"{k}={value_text(v)}" for k, v in row["changes"].items())
            table.add_row(
                _safe(row["name"]),
                _safe(row["backend"]),
                _safe(row["extends"] or ("built-in" if row["builtin"] else "")),
                _safe(changes),
                _safe(row["description"]),
            )
        _console().print(table)
        return None
    if args.profile_action == "show":
        profile = get_profile(args.name).to_dict()
        if args.json:
            return profile
        _profile_table(profile)
        return None
    # new
    if args.from_run:
        from ..runs.profile_of_run import profile_from_run

        if args.set:
            raise BadInput("--from-run takes the run's values as they were; change them afterwards with a new profile")
        profile = profile_from_run(args.from_run, args.name, description=args.description)
    else:
        assignments = _assignments(args.set)
        if not assignments:
            raise BadInput("a derived profile changes at least one value", hint="e.g. --set learning_rate=3e-4")
        profile = profile_derive.create_profile(
            args.name, args.source or "local", assignments, description=args.description
        )
    view = profile.to_dict()
    if args.json:
        return view
    _console().print(f"created profile [bold]{_safe(profile.name)}[/] in {_safe(profile.overrides_file)}")
    _profile_table(view)
    _console().print(f"[dim]use it: hermes-rl start --profile {_safe(profile.name)}[/]")
    return None


def _spread_text(spread: dict | None) -> str:
    if not spread:
        return "-"
    if spread["n"] > 1:
        return f"{human_number(spread['mean'])} ± {human_number(spread['std'])}"
    return human_number(spread["mean"])


def print_sweep(sweep: dict) -> None:
    """The sweep's configurations with their runs and results (mean ± std over seeds)."""
    from rich.table import Table

    console = _console()
    seeds = sweep.get("seeds")
    console.print(
        f"sweep [bold]{_safe(sweep['sweep_id'])}[/]  {_safe(sweep['environment'])}  profile {_safe(sweep['profile'])}"
        f"  {len(sweep['members'])} runs" + (f" ({len(seeds)} seeds each)" if seeds else "")
    )
    window = sweep.get("reward_window")
    table = Table(
        "configuration", "runs", "eval first", "eval best", "eval last", "reward", box=None, header_style="bold"
    )
    # On a narrow terminal the configuration and the run ids stay whole (one run per line); numbers wrap.
    rows = sweep.get("summary") or []
    configs = [" ".join(f"{k}={v}" for k, v in row["config"].items()) or "(no change)" for row in rows]
    table.columns[0].no_wrap, table.columns[0].min_width = True, max((len(c) for c in configs), default=13)
    table.columns[1].no_wrap, table.columns[1].min_width = True, 20
    for config, row in zip(configs, rows, strict=True):
        runs = "\n".join(_safe(f"{r} {s}" if r else "(queued)") for r, s in zip(row["runs"], row["states"]))
        table.add_row(
            _safe(config),
            runs,
            _spread_text(row["eval_first"]),
            _spread_text(row["eval_best"]),
            _spread_text(row["eval_last"]),
            _spread_text(row["final_reward"]),
        )
    console.print(table)
    for member in sweep["members"]:
        if member.get("error"):
            console.print(f"[red]run {member['index']} could not start:[/] {_safe(member['error'])}")
    spread = "; ± is the standard deviation over seeds" if seeds and len(seeds) > 1 else ""
    console.print(f"[dim]reward: the mean of each run's last {window} steps{spread}[/]")


def cmd_sweep(args) -> Any:
    from ..runs import sweeps

    if args.sweep_action == "list":
        rows = sweeps.list_sweeps()
        if args.json:
            return rows
        if not rows:
            _console().print("no sweeps yet: hermes-rl sweep --set learning_rate=1e-4,3e-4")
            return None
        for sweep in reversed(rows):
            states = [m.get("state") for m in sweep["members"]]
            grid = " ".join(f"{k}={','.join(v)}" for k, v in sweep["grid"].items())
            _console().print(
                f"{_safe(sweep['sweep_id'])}  {human_age(sweep.get('created_at'))}  {_safe(sweep['environment'])}  "
                f"{_safe(grid)}  {states.count('started')} started, {states.count('queued')} queued"
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
        _console().print(
            f"sweep {_safe(args.sweep_id)}: {states.count('cancelled')} run(s) will not start"
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
    grid = sweeps.parse_grid(args.set)
    sweep = sweeps.create_sweep(grid, seeds=args.seeds, env_name=args.env, profile=args.profile)
    if args.json:
        return sweep
    console = _console()
    for notice in sweep.get("notices") or []:
        console.print(f"[yellow]{_safe(notice)}[/]")
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
        state = f"run {member['run_id']}" if member["state"] == "started" else f"[{colour}]{_safe(member['state'])}[/]"
        console.print(f"  {_safe(config + seed)}: {state}" + (f" {_safe(member['error'])}" if member["error"] else ""))
    sweep_id = sweep["sweep_id"]
    console.print(f"  results: hermes-rl sweep show {sweep_id}   compare: hermes-rl compare --sweep {sweep_id}")
    return None


def add_commands(add) -> None:
    """The parser entries of these commands (`add` is build_parser's)."""
    cmd = add("profile", cmd_profile, "derived profiles: new (from another profile or a run), list, show")
    actions = cmd.add_subparsers(dest="profile_action", metavar="ACTION", required=True)
    new = actions.add_parser(
        "new", help="a new profile: another one with some values changed", description="a new profile"
    )
    new.add_argument("name")
    new.add_argument("--from", dest="source", metavar="PROFILE", help="the profile it starts from (default: local)")
    new.add_argument("--from-run", metavar="RUN", help="the values a run trained with")
    new.add_argument("--set", action="append", nargs="+", metavar="FIELD=VALUE")
    new.add_argument("--description")
    new.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    actions.add_parser("list", help="every profile").add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS
    )
    show = actions.add_parser("show", help="one profile's values and why each is locked")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS)

    cmd = add(
        "sweep",
        cmd_sweep,
        "a grid of runs as one sweep, queued under the local-run limit (sweep list, sweep show ID, sweep cancel ID)",
        epilog="e.g. hermes-rl sweep --set learning_rate=1e-4,3e-4 --seeds 2\n"
        "A locked field (learning_rate, total_steps, lora_rank, ...) gives each configuration a derived\n"
        "profile; an editable one (group_size, batch_size, environment fields) a run value.",
    )
    cmd.add_argument(
        "sweep_action", nargs="?", choices=("list", "show", "cancel"), help="list sweeps, show one, or cancel one"
    )
    cmd.add_argument("sweep_id", nargs="?", help="the sweep `show` reports on or `cancel` cancels")
    cmd.add_argument("--stop", action="store_true", help="cancel: also stop the sweep's active runs")
    cmd.add_argument("--set", action="append", metavar="FIELD=V1,V2")
    cmd.add_argument("--seeds", type=ascii_int, metavar="K", help="K runs (seeds 0..K-1) per configuration")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
