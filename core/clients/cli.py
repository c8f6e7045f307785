"""`hermes-rl`: the command-line client. No arguments opens the dashboard.

Every command is a thin wrapper over the same core calls the dashboard and the agent tools use.
Errors are one clear line on stderr and a non-zero exit (or a JSON error with --json), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from hermes_rl.core.base.errors import HermesError

EXIT_ERROR = 1
EXIT_USAGE = 2
FINAL_STATUSES = {"completed", "failed", "stopped", "lost"}
STATUS_STYLE = {
    "starting": "yellow",
    "running": "green",
    "stopping": "yellow",
    "completed": "bold green",
    "stopped": "dim",
    "failed": "bold red",
    "lost": "bold magenta",
}


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _parse_assignments(items: list[str] | None) -> dict[str, str]:
    """`--set field=value` pairs; values stay strings so core.config does the typed coercion."""
    assignments: dict[str, str] = {}
    for item in items or []:
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise HermesError(f"--set expects field=value, got {item!r}", hint="e.g. --set group_size=8")
        assignments[field.strip()] = value
    return assignments


def _short_path(path: str) -> str:
    """A path relative to the project or home when it lies inside them."""
    from pathlib import Path

    from hermes_rl.core.base.paths import PROJECT_ROOT

    for base, label in ((PROJECT_ROOT, ""), (Path.home(), "~/")):
        try:
            return label + str(Path(path).relative_to(base))
        except ValueError:
            continue
    return path


def _age(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    seconds = max(0, time.time() - float(timestamp))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _fmt_num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _fmt_bytes(value: Any) -> str:
    if not value:
        return "-"
    value = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f}{unit}" if unit in ("B", "KB") else f"{value:.1f}{unit}"
        value /= 1024
    return str(value)


# ---------------------------------------------------------------- commands


def cmd_envs(args) -> Any:
    from hermes_rl.core.envs.discovery import discover_environments

    envs = discover_environments()
    if args.json:
        from dataclasses import asdict

        return [asdict(env) for env in envs]
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    table.add_column("name", no_wrap=True)
    table.add_column("class", no_wrap=True)
    table.add_column("description", ratio=2)
    table.add_column("file", ratio=1, overflow="fold")
    for env in envs:
        if env.error:
            table.add_row(f"[red]{env.name}[/]", "-", f"[red]parse error: {env.error}[/]", _short_path(env.file))
        else:
            table.add_row(env.name, env.class_name, env.description or "", _short_path(env.file))
    _console().print(table)
    return None


def cmd_select(args) -> Any:
    from hermes_rl.core.envs.config import select_environment

    result = select_environment(args.env, profile=args.profile)
    if args.json:
        return result
    _console().print(f"selected [bold]{result.get('environment')}[/] (profile {result.get('profile') or 'auto'})")
    return None


def _config_dict(view) -> dict:
    return view if isinstance(view, dict) else dict(view.__dict__)


def cmd_config(args) -> Any:
    from hermes_rl.core.envs.config import get_config, set_fields

    assignments = _parse_assignments(args.set)
    if assignments:
        set_fields(assignments, env_name=args.env, profile=args.profile)
    view = _config_dict(get_config(args.env, profile=args.profile))
    if args.json:
        return view
    from rich.table import Table

    console = _console()
    console.print(f"environment [bold]{view['environment']}[/]  profile [bold]{view['profile']}[/]")
    editable = Table(title="editable", box=None, header_style="bold")
    for column, width in (("field", 26), ("value", 16), ("default", 16), ("type", 5)):
        editable.add_column(column, no_wrap=True, max_width=width, overflow="ellipsis")
    editable.add_column("description", ratio=1, overflow="fold")
    for field in view["editable"]:
        marker = "[yellow]*[/]" if field.get("modified") else " "
        editable.add_row(f"{marker}{field['name']}", repr(field.get("value")), repr(field.get("default")), field.get("type", ""), field.get("description") or "")
    console.print(editable)
    locked = Table("field", "value", "why locked", title="locked", box=None, header_style="dim", style="dim")
    for field in view["locked"]:
        locked.add_row(field["name"], repr(field.get("value")), field.get("reason") or "")
    console.print(locked)
    return None


def cmd_start(args) -> Any:
    from hermes_rl.core.runs import start_run

    run = start_run(args.env, profile=args.profile, overrides=_parse_assignments(args.set) or None)
    if args.json and not args.watch:
        return run
    console = _console()
    for notice in run.get("notices") or []:
        console.print(f"[yellow]{notice}[/]")
    console.print(f"started run [bold]{run['run_id']}[/] ({run.get('environment')}, profile {run.get('profile')})")
    console.print(f"  watch: hermes-rl status {run['run_id']}   logs: hermes-rl logs {run['run_id']} --follow   stop: hermes-rl stop {run['run_id']}")
    if args.watch:
        return _watch(run["run_id"], json_output=args.json)
    return None


def _watch(run_id: str, json_output: bool = False) -> Any:
    """Rich progress over a run's steps until it ends; Ctrl-C detaches and leaves the run going."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hermes_rl.core.runs import get_run

    console = _console()
    run = get_run(run_id)
    try:
        with Progress(
            TextColumn("[bold]{task.fields[status]}"),
            BarColumn(),
            TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task("run", total=run.get("total_steps") or 1, status=run["status"], reward="-", detail="")
            while True:
                run = get_run(run_id, sample=False)
                last = run.get("last_metric") or {}
                waiting = [p["name"] for p in run.get("processes", []) if p.get("state") in ("pending", "starting")]
                progress.update(
                    task,
                    total=run.get("total_steps") or 1,
                    completed=last.get("step") or 0,
                    status=run["status"],
                    reward=_fmt_num(last.get("reward/mean")),
                    detail=f"starting {', '.join(waiting)}" if waiting else "",
                )
                if run["status"] in FINAL_STATUSES:
                    break
                time.sleep(1.0)
    except KeyboardInterrupt:
        console.print(f"detached; run {run_id} keeps going (hermes-rl stop {run_id} to stop it)")
        return run if json_output else None
    if json_output:
        return run
    style = STATUS_STYLE.get(run["status"], "")
    console.print(f"run {run_id} [{style}]{run['status']}[/]" + (f": {run['reason']}" if run.get("reason") else ""))
    if run["status"] == "completed":
        from hermes_rl.core.runs import get_results

        results = get_results(run_id)
        if results.get("checkpoint"):
            console.print(f"checkpoint: {results['checkpoint']}")
    return None if run["status"] in ("completed", "stopped") else _Exit(EXIT_ERROR)


def cmd_runs(args) -> Any:
    from hermes_rl.core.runs import list_runs

    runs = list_runs()
    if args.json:
        return runs
    from rich.table import Table

    table = Table("run", "status", "environment", "profile", "age", "step", "reward", "reason", box=None, header_style="bold")
    for run in runs:
        style = STATUS_STYLE.get(run.get("status"), "")
        step = f"{run.get('step') if run.get('step') is not None else '-'}/{run.get('total_steps') or '-'}"
        table.add_row(run["run_id"], f"[{style}]{run.get('status')}[/]", run.get("environment") or "", run.get("profile") or "", _age(run.get("created_at")), step, _fmt_num(run.get("reward_mean")), run.get("reason") or "")
    if not runs:
        _console().print("no runs yet: hermes-rl start")
    else:
        _console().print(table)
    return None


def cmd_status(args) -> Any:
    from hermes_rl.core.runs import get_run

    run = get_run(args.run_id)
    if args.json:
        return run
    from rich.table import Table

    console = _console()
    style = STATUS_STYLE.get(run["status"], "")
    console.print(f"run [bold]{run['run_id']}[/]  [{style}]{run['status']}[/]  {run.get('environment')}  profile {run.get('profile')}" + (f"\n  reason: {run['reason']}" if run.get("reason") else ""))
    last = run.get("last_metric") or {}
    if last:
        console.print("  step {}/{}  reward {}  loss {}".format(last.get("step"), run.get("total_steps") or "-", _fmt_num(last.get("reward/mean")), _fmt_num(last.get("train/loss"), 4)))
    table = Table("process", "pid", "state", "health", "uptime", "cpu%", "rss", "restarts", "exit", "log", box=None, header_style="bold")
    for proc in run.get("processes", []):
        uptime = proc.get("uptime_s")
        table.add_row(
            proc["name"], str(proc.get("pid") or "-"), proc.get("state") or "", proc.get("health") or "",
            f"{uptime:.0f}s" if uptime else "-", _fmt_num(proc.get("cpu_percent"), 1), _fmt_bytes(proc.get("rss")),
            str(proc.get("restarts") or 0), "-" if proc.get("exit_code") is None else str(proc.get("exit_code")), proc.get("log") or "",
        )
    console.print(table)
    if run.get("survivors"):
        console.print(f"[magenta]surviving processes of a lost run: {run['survivors']} (hermes-rl stop {run['run_id']})[/]")
    return None


def cmd_logs(args) -> Any:
    from pathlib import Path

    from hermes_rl.core.readers.logs import LogReader
    from hermes_rl.core.runs import get_run

    run = get_run(args.run_id, sample=False)
    processes = {p["name"]: p for p in run.get("processes", [])}
    if args.process and args.process not in processes:
        raise HermesError(f"run {args.run_id} has no process {args.process!r}", hint=f"processes: {', '.join(processes) or 'none'}")
    names = [args.process] if args.process else list(processes)
    readers = {name: LogReader(Path(processes[name]["log"])) for name in names if processes[name].get("log")}
    prefix = len(readers) > 1
    width = max((len(n) for n in readers), default=0)
    out = sys.stdout

    def emit(name: str, lines: list[str]) -> None:
        for line in lines:
            out.write((f"{name:<{width}} | " if prefix else "") + line + "\n")
        out.flush()

    for name, reader in readers.items():
        reader.refresh()
        emit(name, reader.tail(args.lines))
    if not args.follow:
        return None
    try:
        while True:
            for name, reader in readers.items():
                before = reader.line_count
                if reader.refresh():
                    emit(name, reader.lines(before, reader.line_count))
            time.sleep(0.25)
    except KeyboardInterrupt:
        return None


def cmd_stop(args) -> Any:
    from hermes_rl.core.runs import stop_run

    run = stop_run(args.run_id)
    if args.json:
        return run
    _console().print(f"run {run['run_id']} {run.get('status')}" + (f": {run['reason']}" if run.get("reason") else ""))
    return None


def cmd_results(args) -> Any:
    from hermes_rl.core.runs import get_results

    results = get_results(args.run_id)
    if args.json:
        return results
    console = _console()
    console.print(f"run [bold]{results.get('run_id', args.run_id)}[/] {results.get('status', '')}")
    for key, value in sorted((results.get("final_metrics") or {}).items()):
        console.print(f"  {key:<28} {_fmt_num(value, 4)}")
    if results.get("checkpoint"):
        console.print(f"checkpoint: {results['checkpoint']}")
    if results.get("tinker_path"):
        console.print(f"tinker weights: {results['tinker_path']}")
    return None


def cmd_mcp(args) -> Any:
    from hermes_rl.core.clients.mcp_server import main as mcp_main

    mcp_main()
    return None


def _open_dashboard(args, run_id: str | None) -> None:
    if args.open_dashboard is None:
        raise HermesError("the dashboard is not part of this entry point", hint="run `hermes-rl` (or python -m hermes_rl.tui)")
    args.open_dashboard(run_id)


def cmd_dashboard(args) -> Any:
    _open_dashboard(args, getattr(args, "run_id", None))
    return None


def cmd_demo(args) -> Any:
    """The main job: start a local run on the embedded default and open the dashboard over it."""
    from hermes_rl.core.runs import start_run

    run = start_run(None, profile=None)
    for notice in run.get("notices") or []:
        _console(stderr=True).print(f"[yellow]{notice}[/]")
    if not sys.stdout.isatty():
        return _watch(run["run_id"], json_output=args.json)
    _open_dashboard(args, run["run_id"])
    return None


class _Exit:
    def __init__(self, code: int):
        self.code = code


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-rl", description="RL runs on the Tinker-Atropos pipeline: dashboard, supervisor, agent tools.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Callable, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(handler=handler)
        return cmd

    add("envs", cmd_envs, "list discovered environments")
    cmd = add("select", cmd_select, "select the environment (and profile) new runs use")
    cmd.add_argument("env")
    cmd.add_argument("--profile")
    cmd = add("config", cmd_config, "show or edit the selected environment's config draft")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd = add("start", cmd_start, "start a run (default: the selected environment, local profile without a Tinker key)")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd.add_argument("--watch", action="store_true", help="show progress until the run ends (Ctrl-C detaches)")
    add("runs", cmd_runs, "list runs, newest first")
    cmd = add("status", cmd_status, "a run's state, processes and last metrics")
    cmd.add_argument("run_id")
    cmd = add("logs", cmd_logs, "print (or follow) a run's process logs")
    cmd.add_argument("run_id")
    cmd.add_argument("--process")
    cmd.add_argument("--follow", "-f", action="store_true")
    cmd.add_argument("--lines", "-n", type=int, default=40)
    cmd = add("stop", cmd_stop, "stop a run (ordered shutdown)")
    cmd.add_argument("run_id")
    cmd = add("results", cmd_results, "final metrics and checkpoint of a run")
    cmd.add_argument("run_id")
    add("mcp", cmd_mcp, "serve the rl_* tools over MCP (stdio)")
    cmd = add("dashboard", cmd_dashboard, "open the dashboard (the default)")
    cmd.add_argument("--run", dest="run_id")
    add("demo", cmd_demo, "start a local run and open the dashboard over it")
    return parser


def main(argv: list[str] | None = None, open_dashboard: Callable[[str | None], None] | None = None) -> int:
    """Run one command. `open_dashboard(run_id)` is handed in by the `hermes-rl` launcher (hermes_rl.tui),
    so this module never imports Textual; without it, `dashboard` and `demo` say where the dashboard is."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        args = parser.parse_args(["dashboard"])
    args.open_dashboard = open_dashboard
    try:
        result = args.handler(args)
    except HermesError as exc:
        if getattr(args, "json", False):
            print(json.dumps(exc.to_dict()))
        else:
            print(f"hermes-rl: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        message = f"{type(exc).__name__}: {exc}"
        if getattr(args, "json", False):
            print(json.dumps({"error": message}))
        else:
            print(f"hermes-rl: unexpected error: {message}", file=sys.stderr)
        return EXIT_ERROR
    if isinstance(result, _Exit):
        return result.code
    if result is not None:
        from hermes_rl.core.base.fsutil import dumps

        print(dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
