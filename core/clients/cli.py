"""`hermes-rl`: the command-line client. No arguments opens the dashboard.

Every command is a thin wrapper over the same core calls the dashboard and the agent tools use.
Errors are one clear line on stderr and a non-zero exit (or a JSON error with --json), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any, Callable

from ..base.errors import HermesError
from ..base.formatting import (
    exit_text,
    human_age,
    human_duration,
    human_number,
    human_size,
    lineage,
    metric_text,
    process_id_text,
    process_place_text,
    value_text,
)
from ..base.names import ascii_float, ascii_int
from ..base.states import FINAL, ProcState, RunStatus, run_style
from ..readers.logs import sanitize_terminal

EXIT_ERROR = 1
WAITING = (ProcState.PENDING, ProcState.STARTING)  # a process the run still waits for


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _cli() -> str:
    """The command that runs hermes-rl from where the user is (`.venv/bin/hermes-rl` off PATH)."""
    from ..base.paths import cli_command

    return cli_command()


def _steps():
    """The CLI's names for the actions a report's tips suggest."""
    from ..runs.report import NextSteps

    cli = _cli()
    return NextSteps(stop=f"`{cli} stop {{run_id}}`", results=f"`{cli} results {{run_id}}`", start=f"`{cli} start`")


def _safe(value: Any) -> str:
    """Any text that comes from a run's files or an environment's (reasons, names, notices, config values,
    paths) as Rich markup that prints it literally: the terminal sanitizer the log views use (SGR colours
    kept, every other escape sequence removed, controls shown as symbols) and markup brackets escaped,
    so a crafted run.json can neither act on the terminal nor restyle or break the output."""
    from rich.markup import escape

    return escape(sanitize_terminal("" if value is None else str(value)))


def _styled(status: Any) -> str:
    icon, colour = run_style(status)
    return f"[{colour}]{icon} {_safe(status)}[/]"


def _parse_assignments(items: list[str] | None) -> dict[str, str]:
    """`--set field=value` pairs; values stay strings so the config library does the typed coercion."""
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

    from ..base.paths import PROJECT_ROOT

    for base, label in ((PROJECT_ROOT, ""), (Path.home(), "~/")):
        try:
            return label + str(Path(path).relative_to(base))
        except ValueError:
            continue
    return path


# ---------------------------------------------------------------- commands


def _env_note(env) -> str:
    """How one row differs from its namesakes: the one a bare name means, a base, a broken file."""
    if env.error:
        return f"[red]cannot be read: {_safe(env.error)}[/]"
    if env.abstract:
        return f"[yellow]base, not runnable ({_safe(env.abstract)})[/]"
    return ""


def cmd_envs(args) -> Any:
    from ..envs.discovery import discover_environments, discovery_notices, environment_dirs, import_root

    envs = discover_environments()
    if args.json:
        rows = []
        for env in envs:
            root = import_root(env) if env.usable else None
            rows.append({**env.to_dict(), "import_root": {"root": root.root, "why": root.why} if root else None})
        return rows
    from rich.table import Table

    shared = {env.name for env in envs if env.duplicate_of}
    table = Table(box=None, header_style="bold")
    table.add_column("id", max_width=40, overflow="fold")
    table.add_column("class", no_wrap=True)
    table.add_column("description", ratio=2)
    table.add_column("file", ratio=1, overflow="fold")
    for env in envs:
        label = _safe(env.id)
        if env.id == env.name and env.name in shared:
            label += " [dim](bare name)[/]"
        note = _env_note(env)
        text = _safe(env.description or "")
        table.add_row(label, _safe(env.class_name or "-"), f"{note} {text}".strip(), _safe(_short_path(env.file)))
    console = _console()
    console.print(table)
    for notice in discovery_notices():
        console.print(f"[yellow]note:[/] {_safe(notice)}")
    console.print("[dim]scanned: " + ", ".join(f"{_safe(str(d))} ({s})" for s, d in environment_dirs()) + "[/]")
    return None


def envs_help() -> str:
    import os

    from ..envs.discovery import ENV_PATH_VAR, TINKER_ATROPOS_VAR

    return ENVS_HELP.format(TINKER_ATROPOS_VAR=TINKER_ATROPOS_VAR, ENV_PATH_VAR=ENV_PATH_VAR, sep=os.pathsep)


ENVS_HELP = """Where environments are found, in this order (the first of a name answers to its bare name):
  1. environments/ of this project
  2. $HERMES_HOME/rl/environments/ (HERMES_HOME defaults to ~/.hermes)
  3. a tinker-atropos checkout: ${TINKER_ATROPOS_VAR} (the checkout, its tinker_atropos/ or its
     environments/ folder), else a tinker-atropos/ folder beside this project
  4. ${ENV_PATH_VAR}: more folders, separated by '{sep}'
Every *.py below a root is read (never imported); hidden folders, caches, virtualenvs, site-packages
and node_modules are skipped, 8 levels at most.

Ids: NAME for the first of a name in the first two roots, NAME@ROOT for the others (ROOT: project,
user, tinker-atropos, or an extra folder's name, its parent's for a folder called environments),
NAME@ROOT.sub.module when one root holds several environments of a name. An id never changes when
another root is added. --json rows also carry each environment's import_root: the folder its probe
and its run put first on PYTHONPATH, and why."""


def cmd_select(args) -> Any:
    from ..envs.drafts import select_environment

    result = select_environment(args.env, profile=args.profile)
    if args.json:
        return result
    _console().print(
        f"selected [bold]{_safe(result.get('environment'))}[/] (profile {_safe(result.get('profile') or 'auto')})"
    )
    return None


def cmd_config(args) -> Any:
    from ..envs.drafts import get_config, set_fields

    assignments = _parse_assignments(args.set)
    if args.refresh:
        from ..envs.discovery import find_environment
        from ..envs.drafts import current_selection
        from ..envs.probe import clear_probe_cache
        from ..envs.profiles import resolve_profile

        name = args.env or current_selection().get("environment")
        name = name or resolve_profile(args.profile)[0].default_environment
        clear_probe_cache(find_environment(name), disk=True)
    if assignments:
        set_fields(assignments, env_name=args.env, profile=args.profile)
    view = get_config(args.env, profile=args.profile).to_dict()
    if args.json:
        return view
    from rich.table import Table

    console = _console()
    console.print(f"environment [bold]{_safe(view['environment'])}[/]  profile [bold]{_safe(view['profile'])}[/]")
    editable = Table(title="editable", box=None, header_style="bold")
    for column, width in (("field", 26), ("value", 16), ("default", 16), ("type", 5)):
        editable.add_column(column, no_wrap=True, max_width=width, overflow="ellipsis")
    editable.add_column("description", ratio=1, overflow="fold")
    for field in view["editable"]:
        marker = "[yellow]*[/]" if field.get("modified") else " "
        editable.add_row(
            f"{marker}{_safe(field['name'])}",
            _safe(value_text(field.get("value"))),
            _safe(value_text(field.get("default"))),
            _safe(field.get("type", "")),
            _safe(field.get("description") or ""),
        )
    console.print(editable)
    locked = Table("field", "value", "why locked", title="locked", box=None, header_style="dim", style="dim")
    for field in view["locked"]:
        locked.add_row(_safe(field["name"]), _safe(value_text(field.get("value"))), _safe(field.get("reason") or ""))
    console.print(locked)
    return None


def _workers(args) -> dict | None:
    """The start command's worker options as core.runs.workers takes them (None: one local worker)."""
    import shlex

    from ..base.errors import BadInput

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
    from ..runs.workers import parse_mix

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
    from .. import runs

    # Ctrl-C inside start_run stops and removes the run; once it returned, the run is announced whatever
    # happens next, so an interrupted start never leaves a run training unseen.
    run = runs.start_run(
        args.env, profile=args.profile, overrides=_parse_assignments(args.set) or None, workers=_workers(args)
    )
    run_id = run["run_id"]
    try:
        if args.json and not args.watch:
            return run
        console = _console()
        for notice in run.get("notices") or []:
            console.print(f"[yellow]{_safe(notice)}[/]")
        console.print(
            f"started run [bold]{run_id}[/] ({_safe(run.get('environment'))}, profile {_safe(run.get('profile'))})"
        )
        cli = _cli()
        console.print(
            f"  watch: {cli} status {run_id}   logs: {cli} logs {run_id} --follow   stop: {cli} stop {run_id}"
        )
    except KeyboardInterrupt:
        print(f"interrupted: run {run_id} was started and keeps going ({_cli()} stop {run_id})", file=sys.stderr)
        return _Exit(130)
    if args.watch:
        return _watch(run_id, json_output=args.json)
    return None


def cmd_resume(args) -> Any:
    from .. import runs

    run = runs.resume_run(args.run_id)
    if args.json and not args.watch:
        return run
    console = _console()
    for notice in run.get("notices") or []:
        console.print(f"[yellow]{_safe(notice)}[/]")
    run_id = run["run_id"]
    console.print(f"started run [bold]{run_id}[/], resuming {args.run_id} ({_safe(run.get('environment'))})")
    console.print(f"  watch: {_cli()} status {run_id}   stop: {_cli()} stop {run_id}")
    if args.watch:
        return _watch(run_id, json_output=args.json)
    return None


def _phase(run: dict, step: int | None) -> str:
    """What a starting run is doing, in the words of its pipeline (DESIGN: model → tinker, api →
    trainer → env), so start-up is not a `step 0/800` that does not move for half a minute."""
    procs = {p.get("name"): p.get("state") for p in run.get("processes") or []}
    if run["status"] in FINAL:
        return str(run["status"])
    if procs.get("model") in (*WAITING, ProcState.READY):  # a one-shot step: it exits once built
        return "building the model"
    waiting = [name for name, state in procs.items() if state in WAITING and name != "model"]
    if waiting:
        return f"starting processes ({', '.join(map(str, waiting))})"
    if not step:
        return "waiting for the first batch"
    return "training"


class _Rate:
    """Steps per second since the first step seen, for an ETA."""

    def __init__(self):
        self.first: tuple[float, int] | None = None

    def eta(self, step: int | None, total: int | None, now: float) -> str:
        if not step or not total:
            return "-"
        if self.first is None or step < self.first[1]:
            self.first = (now, step)
            return "-"
        elapsed, done = now - self.first[0], step - self.first[1]
        if done <= 0 or elapsed <= 0:
            return "-"
        return human_duration((total - step) * elapsed / done)


PLAIN_EVERY_S = 10.0  # without a terminal: a progress line this often (and at each change of phase)


def _watch(run_id: str, json_output: bool = False) -> Any:
    """Progress of a run until it ends: its phase while starting (building the model, starting processes,
    waiting for the first batch), then step, reward, greedy eval accuracy and an ETA. On a terminal a
    live bar; otherwise (a pipe, a file, CI) a plain line every 10 s and at each change of phase. Ctrl-C
    detaches and leaves the run going. With --json, the run's status report (as `hermes-rl status
    --json`) once it ends or on detaching."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .. import runs
    from ..runs import report

    console = _console()
    plain = not console.is_terminal
    started = time.monotonic()
    rate = _Rate()
    run = runs.get_run(run_id)

    def sample() -> dict:
        run = runs.get_run(run_id, sample=False)
        summary = next((r for r in runs.list_runs() if r["run_id"] == run_id), {})
        last = run.get("last_metric") or {}
        step = last.get("step")
        evals = summary.get("eval_last")
        return {
            "run": run,
            "step": step or 0,
            "total": run.get("total_steps") or 1,
            "phase": _phase(run, step),
            "reward": human_number(summary.get("reward")),  # the mean of the last reward_window steps
            "eval": "-" if evals is None else f"{evals:.2f}",
            "eta": rate.eta(step, run.get("total_steps"), time.monotonic()),
        }

    try:
        if plain:
            shown_phase, shown_at = None, 0.0
            while True:
                now = sample()
                run = now["run"]
                if (
                    now["phase"] != shown_phase
                    or time.monotonic() - shown_at >= PLAIN_EVERY_S
                    or run["status"] in FINAL
                ):
                    elapsed = human_duration(time.monotonic() - started)
                    line = f"run {run_id} {now['phase']}"
                    if now["step"]:
                        line += (
                            f" · step {now['step']}/{now['total']} · reward {now['reward']} · eval {now['eval']}"
                            f" · ETA {now['eta']}"
                        )
                    print(f"{line} · {elapsed}", flush=True)
                    shown_phase, shown_at = now["phase"], time.monotonic()
                if run["status"] in FINAL:
                    break
                time.sleep(1.0)
        else:
            with Progress(
                TextColumn("[bold]{task.fields[phase]}"),
                BarColumn(),
                TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
                TextColumn("reward {task.fields[reward]}"),
                TextColumn("eval {task.fields[eval]}"),
                TextColumn("ETA {task.fields[eta]}"),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            ) as progress:
                task = progress.add_task(
                    "run", total=run.get("total_steps") or 1, phase=_safe(run["status"]), reward="-", eval="-", eta="-"
                )
                while True:
                    now = sample()
                    run = now["run"]
                    progress.update(
                        task,
                        total=now["total"],
                        completed=now["step"],
                        phase=_safe(now["phase"]),
                        reward=now["reward"],
                        eval=now["eval"],
                        eta=now["eta"],
                    )
                    if run["status"] in FINAL:
                        break
                    time.sleep(1.0)
    except KeyboardInterrupt:
        console.print(f"detached; run {run_id} keeps going ({_cli()} stop {run_id} to stop it)")
        return report.status_report(run_id, steps=_steps()) if json_output else None
    if json_output:
        return report.status_report(run_id, steps=_steps())
    console.print(f"run {run_id} {_styled(run['status'])}" + (f": {_safe(run['reason'])}" if run.get("reason") else ""))
    if run["status"] == RunStatus.COMPLETED:
        results = runs.get_results(run_id)
        if results.get("checkpoint"):
            console.print(f"checkpoint: {_safe(results['checkpoint'])}")
    return None if run["status"] in (RunStatus.COMPLETED, RunStatus.STOPPED) else _Exit(EXIT_ERROR)


def cmd_runs(args) -> Any:
    from .. import runs
    from ..runs.ordering import sort_runs

    summaries = sort_runs(runs.list_runs(), args.sort)
    if args.json:
        return summaries
    if not summaries:
        _console().print("no runs yet: hermes-rl start")
        return None
    from rich.table import Table

    window = summaries[0].get("reward_window")
    table = Table(
        "run",
        "status",
        "environment",
        "profile",
        "age",
        "step",
        f"reward (mean of last {window})",
        "eval",
        "reason",
        box=None,
        header_style="bold",
    )
    # On a narrow terminal the reason gives way, never the id or the status a user acts on.
    for column, width in ((table.columns[0], 8), (table.columns[1], 12)):
        column.no_wrap, column.min_width = True, width
    resumed = lineage(summaries)
    for run in summaries:
        step = f"{run.get('step') if run.get('step') is not None else '-'}/{run.get('total_steps') or '-'}"
        sweep = f"sweep {run['sweep_id']}" if run.get("sweep_id") else None
        changes = " ".join(f"{k}={v}" for k, v in (run.get("profile_changes") or {}).items())
        table.add_row(
            _safe(run["run_id"]),
            _styled(run.get("status")),
            _safe(" ".join(filter(None, (run.get("environment"), resumed.get(run["run_id"]), sweep)))),
            _safe(" ".join(filter(None, (run.get("profile") or "", changes)))),
            human_age(run.get("created_at")),
            _safe(step),
            human_number(run.get("reward")),
            "-" if run.get("eval_last") is None else f"{run['eval_last']:.2f}",
            _safe(run.get("reason") or ""),
        )
    _console().print(table)
    return None


def cmd_status(args) -> Any:
    from ..runs import report

    status = report.status_report(args.run_id, steps=_steps())
    if args.json:
        return status
    from rich.table import Table

    console = _console()
    console.print(
        f"run [bold]{_safe(status['run_id'])}[/]  {_styled(status['status'])}  {_safe(status.get('environment'))}  "
        f"profile {_safe(status.get('profile'))}  "
        f"{'ran' if status['status'] in FINAL else 'running'} {human_duration(status['running_time_s'])}"
        + (f"\n  reason: {_safe(status['reason'])}" if status.get("reason") else "")
    )
    metrics = status["metrics"]
    if metrics["step"] is not None:
        reward = status.get("reward")
        reward_text = f"{human_number(reward['value'])} (mean of last {reward['steps']} steps)" if reward else "-"
        console.print(
            f"  step {_safe(metrics['step'])}/{_safe(metrics['total_steps'] or '-')}  "
            f"reward {reward_text}  loss {human_number(metrics['loss'], 4)}"
        )
    if status.get("step_time"):
        console.print(f"  {_safe(status['step_time']['text'])} (mean of the last {status['step_time']['steps']})")
    if status.get("plateau"):
        console.print(f"  [yellow]{_safe(status['plateau']['text'])}[/]")
    if status["stalled"]:
        console.print(f"  [yellow]stalled for {human_duration(status['stalled_for_s'])}[/]")
    if status.get("wandb_url"):
        console.print(f"  W&B: {_safe(status['wandb_url'])}")
    on_slurm = any(proc.get("launcher") == "slurm" for proc in status["processes"])
    table = Table(
        "process",
        "pid",
        *(("where",) if on_slurm else ()),
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
    for column, width in ((table.columns[0], 7), (table.columns[1], 9 if on_slurm else 7)):
        column.no_wrap, column.min_width = True, width
    for proc in status["processes"]:
        table.add_row(
            _safe(proc["name"]),
            _safe(process_id_text(proc, "-")),
            *((_safe(process_place_text(proc, "-")),) if on_slurm else ()),
            _safe(proc.get("state") or ""),
            _safe(proc.get("health") or ""),
            human_duration(proc.get("uptime_s")),
            human_number(proc.get("cpu_percent"), 1),
            human_size(proc.get("rss")),
            _safe(proc.get("restarts") or 0),
            _safe(exit_text(proc.get("exit_code"))),
            _safe(status["log_paths"].get(proc["name"], "")),
        )
    console.print(table)
    environments = status.get("environments") or []
    if len(environments) > 1 or any(len(e["processes"]) > 1 for e in environments):
        for env in environments:
            share = f", at least {env['min_batch_allocation']:g} of a batch" if env.get("min_batch_allocation") else ""
            shown = "  ".join(
                f"{_safe(k)} {human_number(v)}"
                for k, v in sorted(env["metrics"].items())
                if isinstance(v, (int, float))
            )
            console.print(
                f"  environment [bold]{_safe(env['environment'])}[/]  weight {env['weight']:g}{share}  "
                f"workers {env['ready']}/{len(env['processes'])} ready" + (f"  {shown}" if shown else "")
            )
    for proc in status["processes"]:
        if proc.get("cwd") or proc.get("import_path"):
            where = f"runs in {proc.get('cwd') or 'the run folder'}"
            imports = f", imports from {':'.join(map(str, proc['import_path']))}" if proc.get("import_path") else ""
            console.print(f"  {_safe(proc['name'])}: {_safe(where + imports)}")
    for tip in status["tips"]:
        console.print(f"[dim]- {_safe(tip)}[/]")
    return None


# The supervisor's line at each start of a process (core.daemons.supervisor): the one time a log holds.
START_MARKER = re.compile(r"^==== hermes-rl (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC: starting ")


def _in_start_order(tails: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(process, line) of several logs as one stream: log lines carry no time of their own, so each
    line takes that of the process start it follows (the supervisor's `==== hermes-rl … starting`
    line); a later start (a restart) comes after what the others logged before it. Within one
    start, a log keeps its order; processes started in the same second keep the pipeline's order."""
    keyed = []
    for order, (name, lines) in enumerate(tails.items()):
        started = ""
        for seq, line in enumerate(lines):
            marker = START_MARKER.match(line)
            if marker:
                started = marker.group(1)
            keyed.append(((started, order, seq), name, line))
    keyed.sort(key=lambda item: item[0])
    return [(name, line) for _, name, line in keyed]


def cmd_logs(args) -> Any:
    """The last --lines of each process's log (prefixed with its name when there are several, as one
    stream in start order, HTTP access lines hidden unless --access); --follow keeps printing what
    is appended, as it arrives. --json: {run_id, log_paths, lines: [{process, line}]}, or with
    --follow one {process, line} object per output line."""
    from pathlib import Path

    from .. import runs
    from ..readers.logs import LogReader, is_access_line
    from ..runs import report

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


def cmd_stop(args) -> Any:
    from .. import runs

    run = runs.stop_run(args.run_id)
    if args.json:
        return run
    _console().print(
        f"run {_safe(run['run_id'])} {_styled(run.get('status'))}"
        + (f": {_safe(run['reason'])}" if run.get("reason") else "")
    )
    return None


def cmd_results(args) -> Any:
    from ..runs import report

    results = report.results_summary(args.run_id)
    if args.json:
        return results
    console = _console()
    console.print(
        f"run [bold]{_safe(results['run_id'])}[/] {_styled(results['status'])}"
        + (f": {_safe(results['reason'])}" if results.get("reason") else "")
    )
    accuracy = results.get("eval_accuracy")
    if accuracy:
        console.print(
            f"eval accuracy (greedy): first {accuracy['first']:.2f} · best {accuracy['best']:.2f} "
            f"(step {accuracy['best_step']}) · last {accuracy['last']:.2f} (step {accuracy['last_step']})"
        )
    for key, value in sorted(results["final_metrics"].items()):
        console.print(f"  {_safe(key):<28} {_safe(metric_text(key, value))}")
    if results.get("checkpoint"):
        console.print(f"checkpoint: {_safe(results['checkpoint'])}")
    if results.get("tinker_path"):
        console.print(f"tinker weights: {_safe(results['tinker_path'])}")
    if results.get("wandb_url"):
        console.print(f"W&B: {_safe(results['wandb_url'])}")
    return None


def cmd_test_inference(args) -> Any:
    """The selected environment against real models (OpenRouter, a base_url, a running local run, or
    SmolLM2 on this machine with no key at all), through the same call as rl_test_inference."""
    from ..runs.trial import InferenceTest

    test = InferenceTest.prepare(args.steps, args.group_size, args.model or None, args.base_url, env_name=args.env)
    if args.json:
        return test.run()
    console = _console()

    def show(event: dict) -> None:
        kind = event["event"]
        if kind == "started":
            target = event["target"]
            console.print(
                f"testing [bold]{_safe(event['environment'])}[/] ({event['num_steps']} groups of "
                f"{event['group_size']}) against {_safe(target['kind'])}"
                + (f": {_safe(target['note'])}" if target.get("note") else "")
            )
        elif kind == "progress" and event.get("stage"):
            console.print(f"  {_safe(event['stage'])}")
        elif kind == "progress":
            console.print(f"  {_safe(event['model'])}: {event['groups_done']}/{event['groups_total']} groups")
        elif kind == "model_result":
            accuracy = "n/a" if event["accuracy"] is None else f"{event['accuracy']:.1%}"
            console.print(
                f"  {_safe(event['model'])}: {event['completions']} completions, {event['correct']} correct "
                f"({accuracy}) in {human_duration(event['duration_s'])}"
            )
            for error in event["errors"]:
                console.print(f"    [red]{_safe(error)}[/]")
        elif kind == "summary":
            console.print(f"{_safe(event['verdict'])}\nresults: {_safe(_short_path(event['folder']))}")

    summary = test.run(show)
    return None if summary.get("environment_working") else _Exit(EXIT_ERROR)


def _one_line(text: str, width: int | None = None) -> str:
    shown = text.replace("\\", "\\\\").replace("\n", "\\n")
    return shown if width is None or len(shown) <= width else shown[: width - 1] + "…"


def cmd_rollouts(args) -> Any:
    """The completions the policy produced at one step (the latest by default), from rollouts.jsonl."""
    from .. import runs
    from ..readers.rollouts import read_rollouts

    runs.get_run(args.run_id, sample=False)  # an unknown run is NotFound, not "no rollouts"
    order = "best" if args.best else "worst" if args.worst else None
    out = read_rollouts(args.run_id, step=args.step, order=order, limit=args.limit, environment=args.env)
    if args.json:
        return out
    console = _console()
    console.print(
        f"run [bold]{out['run_id']}[/]  step {out['step']}  {out['groups']} groups  "
        f"(recorded steps {out['first_step']}-{out['last_step']}"
        + (f", recording capped at step {out['capped_at_step']}" if out.get("capped_at_step") is not None else "")
        + ")"
    )
    shown = None  # the (group, prompt) whose completions follow: each prompt is printed before them
    for item in out["completions"]:
        if (item["group"], item["prompt"]) != shown:
            shown = (item["group"], item["prompt"])
            where = f" ({_safe(item['environment'])})" if item.get("environment") else ""
            console.print(
                f"[bold]group {_safe(item['group'])}[/]{where}  prompt: {_safe(_one_line(item['prompt'], 200))}"
            )
        console.print(
            f"  reward {human_number(item['reward'])}  adv {human_number(item['advantage'])}  "
            f"{_safe(item['tokens'] if item['tokens'] is not None else '-')} tok  {_safe(item['finish'] or '-')}  "
            f"{_safe(_one_line(item['text'], 160))}"
        )
    return None


def cmd_compare(args) -> Any:
    """Runs side by side: the config values that differ, first/best/last of the headline metrics."""
    from rich.table import Table

    from ..runs.compare import compare_runs

    sweep = None
    run_ids = list(args.run_ids or [])
    if args.sweep:
        from ..runs.sweeps import sweep_status

        sweep = sweep_status(args.sweep)
        run_ids = sweep["run_ids"] + [r for r in run_ids if r not in sweep["run_ids"]]
    out = compare_runs(run_ids)
    if sweep is not None:
        out["sweep"] = sweep
    if args.json:
        return out
    if sweep is not None:
        from .cli_loop import print_sweep

        print_sweep(sweep)
    ids = [r["run_id"] for r in out["runs"]]
    console = _console()
    runs = Table("", *map(_safe, ids), box=None, header_style="bold")
    for label, key in (("environment", "environment"), ("profile", "profile"), ("status", "status")):
        runs.add_row(label, *(_safe(r.get(key) or "-") for r in out["runs"]))
    runs.add_row("steps", *(_safe(f"{r.get('steps') or 0}/{r.get('total_steps') or '-'}") for r in out["runs"]))
    if any(r.get("profile_changes") for r in out["runs"]):
        runs.add_row("profile changes", *(_safe(value_text(r.get("profile_changes") or "-")) for r in out["runs"]))
    runs.add_row(
        f"reward (mean of last {out['reward_window']})",
        *(human_number((r.get("reward") or {}).get("value")) for r in out["runs"]),
    )
    console.print(runs)
    if out["config_differences"]:
        table = Table("config that differs", *map(_safe, ids), box=None, header_style="bold")
        for row in out["config_differences"]:
            table.add_row(_safe(row["key"]), *(_safe(row["values"][r]) for r in ids))
        console.print(table)
    else:
        console.print("[dim]same config (paths, ports and names aside)[/]")
    table = Table("metric: first → best@step → last", *map(_safe, ids), box=None, header_style="bold")
    for key, per_run in out["metrics"].items():
        cells = []
        for run_id in ids:
            m = per_run.get(run_id)
            if m is None:
                cells.append("-")
                continue
            best = f" → {human_number(m['best'])}@{m['best_step']}" if m["best"] is not None else ""
            cells.append(f"{human_number(m['first'])}{best} → {human_number(m['last'])}")
        table.add_row(_safe(key), *cells)
    console.print(table)
    return None


def cmd_mcp(args) -> Any:
    from .mcp_server import main as mcp_main

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
    """The main job: start a local run on the embedded default and open the dashboard over it."""
    from .. import runs

    run = runs.start_run(None, profile=None)
    for notice in run.get("notices") or []:
        _console(stderr=True).print(f"[yellow]{_safe(notice)}[/]")
    if not sys.stdout.isatty():
        return _watch(run["run_id"], json_output=args.json)
    _open_dashboard(args, run["run_id"])
    return None


class _Exit:
    def __init__(self, code: int):
        self.code = code


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-rl", description="RL runs on the Tinker-Atropos pipeline: dashboard, supervisor, agent tools."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Callable, help_text: str, epilog: str | None = None) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(handler=handler)
        return cmd

    add("envs", cmd_envs, "list discovered environments", epilog=envs_help())
    cmd = add("select", cmd_select, "select the environment (and profile) new runs use")
    cmd.add_argument("env")
    cmd.add_argument("--profile")
    cmd = add("config", cmd_config, "show or edit the selected environment's config draft")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd.add_argument("--refresh", action="store_true", help="probe the environment's config again (not cached)")
    cmd = add("start", cmd_start, "start a run (default: the selected environment, local profile without a Tinker key)")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd.add_argument("--watch", action="store_true", help="show progress until the run ends (Ctrl-C detaches)")
    cmd.add_argument("--replicas", type=ascii_int, help="environment workers (default 1)")
    cmd.add_argument("--env-launcher", choices=("local", "slurm"), help="where the workers run (default local)")
    cmd.add_argument("--address", help="address run-api and the inference server bind for the workers")
    cmd.add_argument("--slurm-partition")
    cmd.add_argument("--slurm-time", help="each worker's time limit (sbatch --time)")
    cmd.add_argument("--slurm-cpus", type=ascii_int, help="CPUs per worker (default 1)")
    cmd.add_argument("--slurm-mem", help="memory per worker (sbatch --mem: 2G)")
    cmd.add_argument("--sbatch-args", help="more sbatch options, as one string")
    cmd.add_argument(
        "--mix",
        action="append",
        metavar="ENV[:WEIGHT[:MIN_SHARE[:REPLICAS]]]",
        help="train another environment in the same batches (Atropos inference_weight / min_batch_allocation)",
    )
    cmd.add_argument("--weight", type=ascii_float, help="the main environment's weight in the batch mix (default 1)")
    cmd.add_argument("--min-batch-allocation", type=ascii_float, help="the main environment's least share of a batch")
    cmd = add("resume", cmd_resume, "start a new run continuing an ended one from its saved state and step")
    cmd.add_argument("run_id")
    cmd.add_argument("--watch", action="store_true", help="show progress until the run ends (Ctrl-C detaches)")
    from ..runs.ordering import SORT_KEYS

    cmd = add("runs", cmd_runs, "list runs, newest first")
    cmd.add_argument("--sort", choices=SORT_KEYS, default="created", help="order (eval, reward: best first)")
    cmd = add("status", cmd_status, "a run's state, processes and last metrics")
    cmd.add_argument("run_id")
    cmd = add("logs", cmd_logs, "print (or follow) a run's process logs (--json: JSON lines with --follow)")
    cmd.add_argument("run_id")
    cmd.add_argument("--process")
    cmd.add_argument("--follow", "-f", action="store_true")
    cmd.add_argument("--lines", "-n", type=ascii_int, default=40)
    cmd.add_argument("--access", action="store_true", help="also the HTTP access lines (hidden when merged)")
    cmd = add("stop", cmd_stop, "stop a run (ordered shutdown)")
    cmd.add_argument("run_id")
    cmd = add("results", cmd_results, "final metrics and checkpoint of a run")
    cmd.add_argument("run_id")
    cmd = add("rollouts", cmd_rollouts, "what the policy generated at a step: prompts, completions, rewards")
    cmd.add_argument("run_id")
    cmd.add_argument("--step", type=ascii_int, help="the trained step (default: the latest recorded)")
    side = cmd.add_mutually_exclusive_group()
    side.add_argument("--best", action="store_true", help="highest reward first")
    side.add_argument("--worst", action="store_true", help="lowest reward first")
    cmd.add_argument("--limit", type=ascii_int, metavar="K", help="at most K completions")
    cmd.add_argument("--env", help="only this environment's groups (a run training several)")
    cmd = add(
        "test-inference",
        cmd_test_inference,
        "try the selected environment against real models and score their answers (offline: SmolLM2, no keys)",
    )
    cmd.add_argument("--env", help="environment (default: the selected one)")
    cmd.add_argument("--steps", type=ascii_int, default=3, help="groups to generate and score")
    cmd.add_argument("--group-size", type=ascii_int, default=4, help="completions per group")
    cmd.add_argument("--model", action="append", help="model id (repeatable; default: the target's)")
    cmd.add_argument("--base-url", help="any OpenAI-compatible server (default: OpenRouter with its key, else local)")
    cmd = add("compare", cmd_compare, "runs side by side: config differences, first/best/last metrics")
    cmd.add_argument("run_ids", nargs="*", metavar="RUN")
    cmd.add_argument("--sweep", metavar="ID", help="every run of a sweep, with its summary per configuration")
    from .cli_loop import add_commands

    add_commands(add)
    add("mcp", cmd_mcp, "serve the rl_* tools over MCP (stdio)")
    cmd = add("dashboard", cmd_dashboard, "open the dashboard (the default)")
    cmd.add_argument("--run", dest="run_id")
    add("demo", cmd_demo, "start a local run and open the dashboard over it")
    from . import cli_data

    cli_data.add_commands(add)  # sample, metrics, report, alerts
    return parser


def main(argv: list[str] | None = None, open_dashboard: Callable[[str | None], None] | None = None) -> int:
    """Run one command. `open_dashboard(run_id)` is handed in by the `hermes-rl` launcher (hermes_rl.tui),
    so this module never imports Textual; without it, `dashboard` and `demo` say where the dashboard is.
    A reader that goes away (`| head`) ends any command quietly, wherever the write was."""
    try:
        return _main(argv, open_dashboard)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader closed the pipe: what is still buffered would fail again when Python flushes
    stdout at exit (an "Exception ignored" traceback), so stdout now points at /dev/null."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0


def _main(argv: list[str] | None, open_dashboard: Callable[[str | None], None] | None) -> int:
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
            # Messages quote run state (a reason, a bad field's value): sanitized like everything else shown.
            text = sanitize_terminal(exc.message) + (f"\n  hint: {sanitize_terminal(exc.hint)}" if exc.hint else "")
            print(f"hermes-rl: {text}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # main() ends quietly
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        message = f"{type(exc).__name__}: {exc}"
        if getattr(args, "json", False):
            print(json.dumps({"error": message}))
        else:
            print(f"hermes-rl: unexpected error: {sanitize_terminal(message)}", file=sys.stderr)
        return EXIT_ERROR
    if isinstance(result, _Exit):
        return result.code
    if result is not None:
        from ..base.fsutil import dumps

        print(dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
