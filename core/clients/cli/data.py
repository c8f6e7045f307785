"""`hermes-rl` commands that take a run's data out: results, rollouts, compare, metrics, report.
Thin wrappers over core.runs and core.readers."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ...base.audit_rule import audit_lines
from ...base.errors import BadInput
from ...base.formatting import human_number, metric_text, value_text
from ...runs.cost import cloud_text
from .cost import cost_line
from .output import one_line, rich_console, safe, say, styled_outcome
from .sweeps import print_sweep


def cmd_results(args) -> Any:
    from ...runs import report

    results = report.results_summary(args.run_id)
    if args.json:
        return results
    console = rich_console()
    console.print(
        f"run [bold]{safe(results['run_id'])}[/] "
        + styled_outcome(results["status"], (results.get("audit") or {}).get("verdict"))
        + (f": {safe(results['reason'])}" if results.get("reason") else "")
    )
    for line in audit_lines(results.get("audit")):  # whether its numbers mean learning (docs/audit.md)
        console.print(safe(line))
    accuracy = results.get("eval_accuracy")
    if accuracy:
        console.print(
            f"eval accuracy (greedy): first {accuracy['first']:.2f} · best {accuracy['best']:.2f} "
            f"(step {accuracy['best_step']}) · last {accuracy['last']:.2f} (step {accuracy['last_step']})"
        )
    for key, value in sorted(results["final_metrics"].items()):
        console.print(f"  {safe(key):<28} {safe(metric_text(key, value))}")
    if cost_line(results.get("cost")):
        console.print(safe(cost_line(results["cost"])))
    if cloud := cloud_text((results.get("cost") or {}).get("cloud")):
        console.print(safe(cloud))
    if results.get("checkpoint"):
        console.print(f"checkpoint: {safe(results['checkpoint'])}")
    if results.get("tinker_path"):
        console.print(f"tinker weights: {safe(results['tinker_path'])}")
    if results.get("wandb_url"):
        console.print(f"W&B: {safe(results['wandb_url'])}")
    return None


def cmd_rollouts(args) -> Any:
    """The completions the policy produced at one step (the latest by default), from rollouts.jsonl."""
    from ... import runs
    from ...readers.rollouts import read_rollouts

    runs.get_run(args.run_id, sample=False)  # an unknown run is NotFound, not "no rollouts"
    if args.prompt is not None:  # the same prompt across training (core.readers.prompt_history)
        from .prompt import prompt_rollouts

        return prompt_rollouts(args, rich_console(), safe)
    order = "best" if args.best else "worst" if args.worst else None
    out = read_rollouts(args.run_id, step=args.step, order=order, limit=args.limit, environment=args.env)
    if args.json:
        return out
    console = rich_console()
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
            where = f" ({safe(item['environment'])})" if item.get("environment") else ""
            console.print(f"[bold]group {safe(item['group'])}[/]{where}  prompt: {safe(one_line(item['prompt'], 200))}")
        console.print(
            f"  reward {human_number(item['reward'])}  adv {human_number(item['advantage'])}  "
            f"{safe(item['tokens'] if item['tokens'] is not None else '-')} tok  {safe(item['finish'] or '-')}  "
            f"{safe(one_line(item['text'], 160))}"
        )
    return None


def cmd_compare(args) -> Any:
    """Runs side by side: the config values that differ, first/best/last of the headline metrics."""
    from rich.table import Table

    from ...runs.compare import compare_runs

    sweep = None
    run_ids = list(args.run_ids or [])
    if args.sweep:
        from ...runs.sweeps import sweep_status

        sweep = sweep_status(args.sweep)
        run_ids = sweep["run_ids"] + [r for r in run_ids if r not in sweep["run_ids"]]
    out = compare_runs(run_ids)
    if sweep is not None:
        out["sweep"] = sweep
    if args.json:
        return out
    if sweep is not None:
        print_sweep(sweep)
    ids = [r["run_id"] for r in out["runs"]]
    console = rich_console()
    runs = Table("", *map(safe, ids), box=None, header_style="bold")
    for label, key in (("environment", "environment"), ("profile", "profile"), ("status", "status")):
        runs.add_row(label, *(safe(r.get(key) or "-") for r in out["runs"]))
    runs.add_row("steps", *(safe(f"{r.get('steps') or 0}/{r.get('total_steps') or '-'}") for r in out["runs"]))
    if any(r.get("profile_changes") for r in out["runs"]):
        runs.add_row("profile changes", *(safe(value_text(r.get("profile_changes") or "-")) for r in out["runs"]))
    runs.add_row(
        f"reward (mean of last {out['reward_window']})",
        *(human_number((r.get("reward") or {}).get("value")) for r in out["runs"]),
    )
    runs.add_row("cost", *(safe((r.get("cost") or {}).get("text") or "-") for r in out["runs"]))
    console.print(runs)
    if out["config_differences"]:
        table = Table("config that differs", *map(safe, ids), box=None, header_style="bold")
        for row in out["config_differences"]:
            table.add_row(safe(row["key"]), *(safe(row["values"][r]) for r in ids))
        console.print(table)
    else:
        console.print("[dim]same config (paths, ports and names aside)[/]")
    table = Table("metric: first → best@step → last", *map(safe, ids), box=None, header_style="bold")
    for key, per_run in out["metrics"].items():
        cells = []
        for run_id in ids:
            m = per_run.get(run_id)
            if m is None:
                cells.append("-")
                continue
            best = f" → {human_number(m['best'])}@{m['best_step']}" if m["best"] is not None else ""
            cells.append(f"{human_number(m['first'])}{best} → {human_number(m['last'])}")
        table.add_row(safe(key), *cells)
    console.print(table)
    return None


def cmd_metrics(args) -> Any:
    from ...runs import export

    keys = [k for item in args.keys or [] for k in item.split(",")]
    fmt = "json" if args.json else args.format
    if not args.output:  # streamed: a run of a million steps exports in bounded memory
        export.stream_metrics(args.run_id, keys, fmt, sys.stdout)
        return None
    target = Path(args.output)
    try:  # written beside the target, then renamed: a reader never sees half a file
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise BadInput(f"cannot write {args.output}: {exc.strerror or exc}", hint="choose a writable path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            rows, columns = export.stream_metrics(args.run_id, keys, fmt, handle)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except OSError as exc:
        raise BadInput(f"cannot write {args.output}: {exc.strerror or exc}", hint="choose a writable path") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    say(f"{rows} rows × {columns} columns → {args.output}", err=True)
    return None


def cmd_report(args) -> Any:
    from ...runs import export

    path = export.write_report(args.run_id, args.output)
    if args.json:
        return {"run_id": args.run_id, "path": str(path), "bytes": path.stat().st_size}
    say(f"report of run {args.run_id}: {path} ({path.stat().st_size / 1024:.0f} KB, opens offline in any browser)")
    return None
