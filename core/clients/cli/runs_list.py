"""`hermes-rl runs`: the runs listing, filtered and paged. Thousands of runs print as fast as a screen
of them: the table shows the newest --limit runs and says how many more there are; --all past
PLAIN_ROWS rows prints plain aligned text (a rich table measures every cell of every row first)."""

from __future__ import annotations

import sys
from typing import Any

from ...base.formatting import human_age, human_number, lineage
from ...base.states import run_style, status_label
from ...readers.logs import plain_text
from .cost import cost_cell
from .output import DOUBTFUL, rich_console, safe, styled_outcome

DEFAULT_LIMIT = 50
PLAIN_ROWS = 200


def _cells(run, resumed: dict[str, str], mark: bool = False) -> list[str]:
    """One run's cells as plain text (the caller escapes or sanitizes them). `mark`: a reward and an eval
    that the run's audit says cannot be trusted (no_signal, suspect) carry a `?` (a listing ranked by them)."""
    verdict = str((run.get("audit") or {}).get("verdict") or "unknown")
    doubt = " ?" if mark and verdict in DOUBTFUL else ""
    step = f"{run.get('step') if run.get('step') is not None else '-'}/{run.get('total_steps') or '-'}"
    sweep = f"sweep {run['sweep_id']}" if run.get("sweep_id") else None
    changes = " ".join(f"{k}={v}" for k, v in (run.get("profile_changes") or {}).items())
    return [
        str(run["run_id"]),
        status_label(run.get("status"), run.get("reason")),
        " ".join(filter(None, (run.get("environment"), resumed.get(run["run_id"]), sweep))),
        " ".join(filter(None, (run.get("profile") or "", changes))),
        human_age(run.get("created_at")),
        step,
        human_number(run.get("reward")) + (doubt if run.get("reward") is not None else ""),
        "-" if run.get("eval_last") is None else f"{run['eval_last']:.2f}{doubt}",
        verdict,  # whether reward and eval can be trusted
        cost_cell(run),
        str(run.get("reason") or ""),
    ]


def _plain(headers: list[str], rows: list[list[str]]) -> None:
    """Aligned text without markup, for thousands of rows (cells sanitized like every run-sourced text,
    colours and tabs too: a plain column has no style to close them, and a tab breaks its alignment)."""
    rows = [[plain_text(cell).replace("\t", " ") for cell in row] for row in rows]
    for row, source in zip(rows, rows, strict=True):
        icon, _colour = run_style(source[1])
        row[1] = f"{'⚠' if source[1] == 'completed' and source[8] in DOUBTFUL else icon} {row[1]}"
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers[:-1])]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    out = [fmt.format(*headers)] + [fmt.format(*row) for row in rows]
    sys.stdout.write("\n".join(out) + "\n")


def cmd_runs(args) -> Any:
    from ... import runs
    from ...runs.ordering import sort_runs

    statuses = [s.strip() for s in (args.status or "").split(",") if s.strip()] or None
    summaries = sort_runs(
        runs.list_runs(status=statuses, environment=args.env, sweep=args.sweep, text=args.search), args.sort
    )
    limit = None if args.all else args.limit
    if args.json:
        return summaries if args.limit is None or args.all else summaries[: args.limit]
    if not summaries:
        filtered = any((statuses, args.env, args.sweep, args.search))
        rich_console().print("no run matches" if filtered else "no runs yet: hermes-rl start")
        return None
    limit = DEFAULT_LIMIT if limit is None and not args.all else limit
    shown = summaries if limit is None else summaries[:limit]
    window = summaries[0].get("reward_window")
    headers = ["run", "status", "environment", "profile", "age", "step", f"reward (mean of last {window})"]
    headers += ["eval", "audit", "cost", "reason"]
    resumed = lineage(summaries)
    rows = [_cells(run, resumed, mark=args.sort in ("eval", "reward")) for run in shown]
    if len(rows) > PLAIN_ROWS:
        _plain(headers, rows)
    else:
        _table(headers, rows)
    if len(shown) < len(summaries):
        rich_console().print(
            f"… {len(summaries) - len(shown)} more of {len(summaries)} runs (--limit N, --all, or filter: "
            "--status, --env, --sweep, --search)"
        )
    return None


def _table(headers: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    table = Table(*headers, box=None, header_style="bold")
    # On a narrow terminal the reason gives way, never the id or the status a user acts on.
    for column, width in ((table.columns[0], 8), (table.columns[1], 12)):
        column.no_wrap, column.min_width = True, width
    for row in rows:
        table.add_row(
            *[styled_outcome(cell, row[8], short=True) if i == 1 else safe(cell) for i, cell in enumerate(row)]
        )
    rich_console().print(table)
