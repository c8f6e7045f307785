"""How the CLI shows cost (core.runs.cost): the status and results line, the runs column, `start --estimate`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ...base.formatting import human_duration
from ...base.names import ascii_float, ascii_int
from ...base.prices import tokens_text, usd_text


def cost_line(cost: dict | None) -> str | None:
    """ "cost $0.0123 (prefill 1.2k · sample 3.4k · train 5.6k tokens; prices as of 2026-12-05); at this rate:
    $0.10 for 800 steps; CPU 2 min" — None when the run has no cost record."""
    if not cost:
        return None
    parts = [f"cost {cost.get('text') or usd_text(cost.get('usd'))} ({tokens_text(cost.get('tokens'))}"]
    if cost.get("prices_as_of"):
        parts[0] += f"; prices as of {cost['prices_as_of']}"
    parts[0] += ")"
    projected = cost.get("projected")
    if projected and projected.get("usd") is not None:
        parts.append(projected["text"])
    if cost.get("cpu_s") is not None:
        parts.append(f"CPU {human_duration(cost['cpu_s'])} on this machine")
    return "; ".join(parts)


def cost_cell(run: Mapping[str, Any]) -> str:
    """A runs-list cell: "$0.0123", "?" (tokens counted, no price) or "-" (nothing counted)."""
    if run.get("cost_usd") is not None:
        return usd_text(run["cost_usd"])
    return "?" if run.get("tokens") else "-"


def estimate_text(est: dict) -> list[str]:
    """`hermes-rl start --estimate`: what the run would cost, and on what assumptions."""
    lines = [
        f"estimate for {est.get('environment')} (profile {est.get('profile')}, model {est.get('model')}): "
        f"{est['text']} for {est['steps']} steps",
        f"  tokens: {tokens_text(est['tokens'])} ({tokens_text(est['per_step'])} per step)",
    ]
    if est.get("price"):
        p = est["price"]
        lines.append(
            f"  price: ${p['prefill']:g} / ${p['sample']:g} / ${p['train']:g} per million prefill / sample / train "
            f"tokens, as of {p.get('as_of') or 'an unknown date'} ({p['source']})"
        )
    if est.get("budget_warning"):
        lines.append(f"  budget: {usd_text(est['budget_usd'])}, which stops nothing: {est['budget_warning']}")
    elif est.get("budget_usd"):
        lines.append(f"  budget: {usd_text(est['budget_usd'])}")
    lines += [f"  assumes {a}" for a in est["assumptions"]]
    lines.append("  nothing was started")
    return lines


def cmd_estimate(args, overrides: dict | None) -> Any:
    from ...runs.cost import estimate_start

    est = estimate_start(
        args.env,
        args.profile,
        overrides,
        prompt_tokens=args.prompt_tokens,
        completion_tokens=args.completion_tokens,
    )
    if args.json:
        return est
    for line in estimate_text(est):
        print(line)
    return None


def _positive_usd(text: str) -> float:
    try:
        value = ascii_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of USD, got {text!r}") from None
    if not 0 < value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 1000000, got {text!r}")
    return value


def add_cost_arguments(cmd, *, estimate: bool = True) -> None:
    """`--budget-usd` (and on start, `--estimate` with its lengths) on a command's parser."""
    cmd.add_argument(
        "--budget-usd",
        type=_positive_usd,
        metavar="USD",
        help="stop the run (checkpoint saved) once its cost reaches this (the budget_usd field)",
    )
    if not estimate:
        return

    cmd.add_argument(
        "--estimate", action="store_true", help="print the expected tokens and USD, with assumptions; start nothing"
    )
    cmd.add_argument("--prompt-tokens", type=ascii_int, metavar="N", help="--estimate: prompt length to assume")
    cmd.add_argument("--completion-tokens", type=ascii_int, metavar="N", help="--estimate: completion length to assume")
