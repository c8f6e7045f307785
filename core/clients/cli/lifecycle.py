"""`hermes-rl` commands for a run's life: start, resume, stop, runs, status, logs. Thin wrappers over
core.runs; `start --watch` and `resume --watch` follow the run with cli.watch."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from ...base.audit_rule import audit_lines
from ...base.errors import BadInput, HermesError
from ...base.formatting import (
    exit_text,
    human_duration,
    human_number,
    human_size,
    process_id_text,
    process_place_text,
)
from ...base.paths import cli_command
from ...base.states import FINAL, PROC_ALIVE
from ...readers.logs import sanitize_terminal
from ...runs.cost import cloud_text
from .cost import cmd_estimate, cost_line
from .output import Exit, next_steps, parse_assignments, rich_console, safe, styled
from .watch import watch


def _workers(args) -> dict | None:
    """The start command's worker options as core.runs.workers takes them (None: one local worker)."""
    import shlex

    slurm = {
        "partition": args.slurm_partition,
        "time": args.slurm_time,
        "cpus_per_worker": args.slurm_cpus,
        "mem_per_worker": args.slurm_mem,
        "sbatch_args": shlex.split(args.sbatch_args) if args.sbatch_args else None,
    }
    slurm = {k: v for k, v in slurm.items() if v is not None}
    if slurm and args.env_launcher != "slurm":
        raise BadInput("--slurm-* and --sbatch-args need --env-launcher slurm")
    from ...runs.workers import parse_mix

    chosen = {
        "launcher": args.env_launcher,
        "replicas": args.replicas,
        "address": args.address,
        "slurm": slurm or None,
        "weight": args.weight,
        "min_batch_allocation": args.min_batch_allocation,
        "environments": [parse_mix(text) for text in args.mix] if args.mix else None,
    }
    return {k: v for k, v in chosen.items() if v is not None} or None


def cmd_start(args) -> Any:
    from ... import runs

    overrides = parse_assignments(args.set) or {}
    if args.budget_usd is not None:
        overrides["budget_usd"] = args.budget_usd
    if args.estimate:
        return cmd_estimate(args, overrides or None)
    # Ctrl-C inside start_run stops and removes the run; once it returned, the run is announced whatever
    # happens next, so an interrupted start never leaves a run training unseen.
    run = runs.start_run(args.env, profile=args.profile, overrides=overrides or None, workers=_workers(args))
    run_id = run["run_id"]
    try:
        if args.json and not args.watch:
            return run
        console = rich_console()
        for notice in run.get("notices") or []:
            console.print(f"[yellow]{safe(notice)}[/]")
        console.print(
            f"started run [bold]{run_id}[/] ({safe(run.get('environment'))}, profile {safe(run.get('profile'))})"
        )
        cli = cli_command()
        console.print(
            f"  watch: {cli} status {run_id}   logs: {cli} logs {run_id} --follow   stop: {cli} stop {run_id}"
        )
    except KeyboardInterrupt:
        print(f"interrupted: run {run_id} was started and keeps going ({cli_command()} stop {run_id})", file=sys.stderr)
        return Exit(130)
    if args.watch:
        return watch(run_id, json_output=args.json)
    return None


def cmd_resume(args) -> Any:
    from ... import runs

    run = runs.resume_run(args.run_id)
    if args.json and not args.watch:
        return run
    console = rich_console()
    for notice in run.get("notices") or []:
        console.print(f"[yellow]{safe(notice)}[/]")
    run_id = run["run_id"]
    console.print(f"started run [bold]{run_id}[/], resuming {args.run_id} ({safe(run.get('environment'))})")
    console.print(f"  watch: {cli_command()} status {run_id}   stop: {cli_command()} stop {run_id}")
    if args.watch:
        return watch(run_id, json_output=args.json)
    return None


def cmd_launchers(args) -> Any:
    """Every launcher with its site settings and what its preflight says of them."""
    from ...runs.launcher_list import list_launchers

    rows = list_launchers(preflight=not args.no_preflight)
    if args.json:
        return rows
    console = rich_console()
    for row in rows:
        verdict = row["preflight"]
        mark = "[green]ok[/]" if verdict == "ok" else ("[dim]not asked[/]" if verdict is None else "[red]refused[/]")
        where = "other machines" if row["remote"] else "this machine"
        console.print(f"[bold]{safe(row['name'])}[/]  {where}  from {safe(row['from'])}  preflight {mark}")
        if verdict not in (None, "ok"):
            console.print(f"  {safe(verdict)}")
        if row["site_file"]:
            state = "" if row["site_file_exists"] else " [dim](none yet)[/]"
            console.print(f"  site file: {safe(row['site_file'])}{state}")
        for key, value in (row["site_settings"] or {}).items():
            console.print(f"    {safe(key)}: {safe(value)}")
        if row["settings"]:
            names = [k["name"] + ("*" if k["command"] else "") for k in row["settings"]]
            console.print(f"  settings: {safe(', '.join(names))}  [dim](* a command: from the site file only)[/]")
    return None


def cmd_status(args) -> Any:
    from ...runs import report

    if getattr(args, "cloud", False):
        from ...runs.cost import refresh_cloud_usage

        refresh_cloud_usage(args.run_id)  # a HermesError (no key, no billing role, unreachable) is one line
    status = report.status_report(args.run_id, steps=next_steps())
    if args.json:
        return status
    from rich.table import Table

    console = rich_console()
    console.print(
        f"run [bold]{safe(status['run_id'])}[/]  {styled(status['status'])}  {safe(status.get('environment'))}  "
        f"profile {safe(status.get('profile'))}  "
        f"{'ran' if status['status'] in FINAL else 'running'} {human_duration(status['running_time_s'])}"
        + (f"\n  reason: {safe(status['reason'])}" if status.get("reason") else "")
    )
    metrics = status["metrics"]
    if metrics["step"] is not None:
        reward = status.get("reward")
        reward_text = f"{human_number(reward['value'])} (mean of last {reward['steps']} steps)" if reward else "-"
        console.print(
            f"  step {safe(metrics['step'])}/{safe(metrics['total_steps'] or '-')}  "
            f"reward {reward_text}  loss {human_number(metrics['loss'], 4)}"
        )
    if cost := cost_line(status.get("cost")):
        console.print(f"  {safe(cost)}")
    if cloud := cloud_text((status.get("cost") or {}).get("cloud")):
        console.print(f"  {safe(cloud)}")
    if step_time := status.get("step_time"):
        console.print(f"  {safe(step_time['text'])} (mean of the last {step_time['steps']})")
    if plateau := status.get("plateau"):
        console.print(f"  [yellow]{safe(plateau['text'])}[/]")
    for line in audit_lines(status.get("audit")):  # is it learning, and if not why (docs/audit.md)
        console.print(f"  {safe(line)}")
    if status["stalled"]:
        console.print(f"  [yellow]stalled for {human_duration(status['stalled_for_s'])}[/]")
    if status.get("wandb_url"):
        console.print(f"  W&B: {safe(status['wandb_url'])}")
    if status.get("endpoint"):
        console.print(f"  endpoint: {safe(status['endpoint'])} (OpenAI-compatible, the live policy)")
        if status.get("endpoint_key_file"):
            console.print(f"  endpoint key: send the key in {safe(status['endpoint_key_file'])} as a bearer token")
    # where each runs, in its launcher's words, once any runs elsewhere than here
    elsewhere = any((proc.get("launcher") or "local") != "local" for proc in status["processes"])
    table = Table(
        "process",
        "pid",
        *(("where",) if elsewhere else ()),
        "state",
        "health",
        "uptime",
        "cpu%",
        "rss",
        "restarts",
        "exit",
        "log",
        box=None,
        header_style="bold",
    )
    # On a narrow terminal the log path gives way, never which process it is and where it runs.
    widths = [(table.columns[0], 7), (table.columns[1], 9 if elsewhere else 7)]
    if elsewhere:  # its launcher's line whole ("10.0.0.7 RUNNING", "aws/us-east-1 LAUNCHING")
        longest = max(len(process_place_text(proc, "-")) for proc in status["processes"])
        widths.append((table.columns[2], min(longest, 28)))
    for column, width in widths:
        column.no_wrap, column.min_width = True, width
    for proc in status["processes"]:
        table.add_row(
            safe(proc["name"]),
            safe(process_id_text(proc, "-")),
            *((safe(process_place_text(proc, "-")),) if elsewhere else ()),
            safe(proc.get("state") or ""),
            safe(proc.get("health") or ""),
            human_duration(proc.get("uptime_s")),
            human_number(proc.get("cpu_percent"), 1),
            human_size(proc.get("rss")),
            safe(proc.get("restarts") or 0),
            safe(exit_text(proc.get("exit_code"))),
            safe(status["log_paths"].get(proc["name"], "")),
        )
    console.print(table)
    environments = status.get("environments") or []
    if len(environments) > 1 or any(len(e["processes"]) > 1 for e in environments):
        for env in environments:
            share = f", at least {env['min_batch_allocation']:g} of a batch" if env.get("min_batch_allocation") else ""
            shown = "  ".join(
                f"{safe(k)} {human_number(v)}" for k, v in sorted(env["metrics"].items()) if isinstance(v, (int, float))
            )
            console.print(
                f"  environment [bold]{safe(env['environment'])}[/]  weight {env['weight']:g}{share}  "
                f"workers {env['ready']}/{len(env['processes'])} ready" + (f"  {shown}" if shown else "")
            )
    for proc in status["processes"]:
        if proc.get("cwd") or proc.get("import_path"):
            where = f"runs in {proc.get('cwd') or 'the run folder'}"
            import_path = proc.get("import_path")
            imports = f", imports from {':'.join(map(str, import_path))}" if import_path else ""
            console.print(f"  {safe(proc['name'])}: {safe(where + imports)}")
    for tip in status["tips"]:
        console.print(f"[dim]- {safe(tip)}[/]")
    return None


# The supervisor's line at each start of a process (core.daemons.supervisor): the one time a log holds.
START_MARKER = re.compile(r"^==== hermes-rl (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC: starting ")


# A log line's own time (Python logging's asctime, ISO 8601), in the local time it was written in.
LINE_TIME = re.compile(r"^\[?(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?")


def _marker_local(utc_text: str) -> str:
    """The supervisor's start marker (UTC) in local time, comparable with the processes' own timestamps."""
    import calendar

    seconds = calendar.timegm(time.strptime(utc_text, "%Y-%m-%d %H:%M:%S"))
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + ".000000"


def _in_start_order(tails: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(process, line) of several logs as one stream ordered by time: a line with a timestamp of its own
    (logging's asctime) takes it; a line without takes that of the line before it, or of the process start
    it follows (the supervisor's `==== hermes-rl … starting` line), so a restart comes after what the others
    logged before it. Lines of the same time keep their log's order, and processes the pipeline's order."""
    keyed = []
    for order, (name, lines) in enumerate(tails.items()):
        when = ""
        for seq, line in enumerate(lines):
            marker = START_MARKER.match(line)
            stamp = LINE_TIME.match(line)
            if marker:
                when = _marker_local(marker.group(1))
            elif stamp:
                when = max(when, f"{stamp.group(1)} {stamp.group(2)}.{(stamp.group(3) or '').ljust(6, '0')}")
            keyed.append(((when, order, seq), name, line))
    keyed.sort(key=lambda item: item[0])
    return [(name, line) for _, name, line in keyed]


def cmd_logs(args) -> Any:
    """The last --lines of each process's log (prefixed with its name when there are several, as one
    stream in start order, HTTP access lines hidden unless --access); --follow keeps printing what
    is appended, as it arrives. --json: {run_id, log_paths, lines: [{process, line}]}, or with
    --follow one {process, line} object per output line."""

    from ... import runs
    from ...readers.logs import LogReader, is_access_line
    from ...runs import report

    run = runs.get_run(args.run_id, sample=False)
    paths = report.log_paths(run)
    names = [p.get("name") for p in run.get("processes") or []]
    if args.process and args.process not in names:
        raise HermesError(
            f"run {args.run_id} has no process {args.process!r}",
            hint=f"processes: {', '.join(map(str, names)) or 'none'}",
        )
    readers = {
        name: LogReader(Path(paths[name])) for name in ([args.process] if args.process else names) if name in paths
    }
    merged = len(readers) > 1
    hide_access = merged and not args.access
    hidden = 0

    def kept(lines: list[str]) -> list[str]:
        nonlocal hidden
        if not hide_access:
            return lines
        shown = [line for line in lines if not is_access_line(line)]
        hidden += len(lines) - len(shown)
        return shown

    tails = {}
    for name, reader in readers.items():
        reader.refresh()
        tails[name] = kept(reader.tail(args.lines))
    stream = _in_start_order(tails)
    if args.json and not args.follow:
        return {
            "run_id": run["run_id"],
            "log_paths": {name: paths[name] for name in readers},
            "lines": [{"process": name, "line": line} for name, line in stream],
            "access_lines_hidden": hidden,
        }
    width = max((len(n) for n in readers), default=0)
    out = sys.stdout

    def emit(pairs) -> None:
        for name, line in pairs:
            if args.json:
                out.write(json.dumps({"process": name, "line": line}, ensure_ascii=False) + "\n")
            else:
                # The line is clean_line's (sanitized); the name comes from run.json.
                out.write((f"{sanitize_terminal(name):<{width}} | " if merged else "") + line + "\n")
        out.flush()

    emit(stream)
    if hidden and not args.json:
        print(f"({hidden} HTTP access line{'s' if hidden != 1 else ''} hidden: --access shows them)", file=sys.stderr)
    if not args.follow:
        return None
    try:
        while True:
            for name, reader in readers.items():
                before = reader.line_count
                if reader.refresh():
                    emit((name, line) for line in kept(reader.lines(before, reader.line_count)))
            time.sleep(0.25)
    except KeyboardInterrupt:
        return None


def _stop_progress(run_id: str, wait: float, quiet: bool):
    """A line on stderr whenever what is stopping changes (and every 5 s): each process's state, the time."""
    began = time.monotonic()
    last: list = ["", 0.0]

    def show(run: dict) -> None:
        if quiet:
            return
        states = " · ".join(
            f"{p.get('name')} {'still running' if p.get('state') in PROC_ALIVE else p.get('state')}"
            for p in run.get("processes") or []
        )
        now = time.monotonic()
        if states == last[0] and now - last[1] < 5:
            return
        last[:] = [states, now]
        text = f"stopping run {run_id} ({now - began:.0f} s of up to {wait:.0f} s): {states or run.get('status')}"
        rich_console(stderr=True).print(f"[dim]{safe(text)}[/]")

    return show


def cmd_stop(args) -> Any:
    from ... import runs
    from ...runs.control import stop_wait_s

    wait = stop_wait_s(args.run_id)  # as long as its processes' stop timeouts, one after another, can take
    run = runs.stop_run(args.run_id, wait=wait, on_wait=_stop_progress(args.run_id, wait, args.json))
    problem = runs.stop_not_done(run, wait)
    if problem is not None:
        raise problem  # exit 1: a stop that did not stop is never reported as done
    if args.json:
        return run
    rich_console().print(
        f"run {safe(run['run_id'])} {styled(run.get('status'))}"
        + (f": {safe(run['reason'])}" if run.get("reason") else "")
    )
    return None
