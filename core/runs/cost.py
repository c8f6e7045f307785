"""What a run costs: tokens measured by its trainer, priced by core.base.prices, before, during and after.

- `run_cost(run)` — a run's cost so far from its newest metrics row (the trainer's `tokens/<kind>_total`
  and `usage/cpu_s`), and at the measured rate, what its remaining steps will cost;
- `cost_of(model, tokens)` — tokens priced (usd None and "price unknown" where the model has no price);
- `estimate(...)` — before a run: tokens and USD from its config (steps × batch × prompt and completion
  lengths), with the assumptions spelled out;
- `add_costs(costs)` — a sum over runs (a sweep's total), unknown as soon as one part is unknown.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..base import prices
from ..base.errors import BadInput, HermesError, NotFound
from ..base.formatting import counted, shown_value
from ..base.fsutil import read_json
from ..base.paths import run_dir
from ..base.prices import KINDS, count_text, tokens_text, usd_text
from ..base.secrets import secret_env
from ..base.states import FINAL
from ..daemons.spawn import run_bounded
from ..envs.drafts import current_selection, resolve_run_values, selected_or_default
from ..envs.profiles import resolve_profile
from .pricing import run_model, tokens_of
from .runconfig import read_run_config
from .store import get_run, list_runs

DEFAULT_PROMPT_TOKENS = 256  # the estimate's prompt length when nothing better is known (said so)
CLOUD_USAGE_FILE = "cloud_usage.json"  # what Tinker reported the run used (dataplane.cloud_usage)


def cost_of(model: str | None, tokens: dict[str, int] | None, *, cpu_s: float | None = None) -> dict[str, Any]:
    """{usd, text, tokens, model, price, prices_as_of, price_source, cpu_s}: `tokens` at `model`'s price;
    usd is None (text "price unknown") when the model has no price or no tokens were recorded."""
    price = prices.lookup(model)
    usd = price.usd(tokens) if price is not None and tokens is not None else None
    if tokens is None:
        text = "no token counts"
    else:
        text = usd_text(usd)
    return {
        "usd": None if usd is None else round(usd, 6),
        "text": text,
        "tokens": tokens,
        "model": model,
        "price": price.to_dict() if price else None,
        "prices_as_of": price.as_of if price else None,
        "price_source": price.source if price else None,
        "cpu_s": cpu_s,
    }


def run_cost(run: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
    """A run's cost so far (cost_of) from its newest metrics row, plus `projected`: at the measured rate,
    what all of its steps will cost ({usd, tokens, steps, text}; None before the first step and after
    the last)."""
    last = run.get("last_metric") or {}
    tokens = tokens_of(last)
    model = model if model is not None else run_model(run["run_id"])
    cpu = last.get("usage/cpu_s")
    out = cost_of(model, tokens, cpu_s=cpu if isinstance(cpu, (int, float)) else None)
    out["projected"] = _projected(run, last, tokens, out["usd"])
    out["cloud"] = cloud_cost(run["run_id"], tokens, out["usd"])
    return out


# -- what Tinker reports -------------------------------------------------------------------------------

CLOUD_LAG_NOTE = "cloud data lags up to a few hours"
TOKENS_AGREE = 0.01  # a token count within 1 % of hermes-rl's agrees (requests in flight, rounding in reports)
SOURCE_NAMES = {"cloud": "Tinker cloud", "local": "the local Tinker server"}


def cloud_cost(run_id: str, tokens: dict[str, int] | None, usd: float | None) -> dict[str, Any] | None:
    """What Tinker reported the run used (cloud_usage.json, written by dataplane.cloud_usage), beside what
    hermes-rl counted: {usd, tokens, checked_at, source, cost_data_through, differs}. `differs` says how
    they differ (None when they agree; a figure either side lacks is not compared). None without a report."""
    try:
        report = read_json(run_dir(run_id) / CLOUD_USAGE_FILE)
        reported = {kind: int(report["tokens"][kind]) for kind in KINDS}
        checked_at = float(report["checked_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cloud_usd = report.get("usd") if isinstance(report.get("usd"), (int, float)) else None
    source = str(report.get("source") or "cloud")
    return {
        "usd": cloud_usd,
        "tokens": reported,
        "checked_at": checked_at,
        "source": source,
        "cost_data_through": report.get("cost_data_through"),
        "differs": differences(reported, cloud_usd, tokens, usd, source, checked_at),
    }


def cloud_text(cloud: Mapping[str, Any] | None) -> str | None:
    """ "Tinker cloud reports $2.19 (prefill 1.3k · sample 2.1k · train 7.2k tokens; checked 2026-12-05 14:02):
    agrees with hermes-rl's count" or how it differs; None when no report was read (`status RUN --cloud`)."""
    if not cloud:
        return None
    name = SOURCE_NAMES.get(cloud.get("source") or "cloud", "Tinker cloud")
    usd = usd_text(cloud["usd"]) if cloud.get("usd") is not None else "no USD estimate"
    checked = time.strftime("%Y-%m-%d %H:%M", time.localtime(cloud["checked_at"]))
    head = f"{name} reports {usd} ({tokens_text(cloud.get('tokens'))}; checked {checked})"
    if cloud.get("differs"):
        return f"{head}: it differs: {cloud['differs']}"
    return f"{head}: agrees with hermes-rl's count"


def _delta(theirs: float, ours: float) -> str:
    if ours == 0:
        return "hermes-rl counted none"
    return f"{(theirs - ours) / ours * 100:+.1f} %".replace("-", "−")


def differences(
    reported: dict[str, int],
    cloud_usd: float | None,
    tokens: dict[str, int] | None,
    usd: float | None,
    source: str,
    checked_at: float,
) -> str | None:
    """ "train 12.3k vs 12.1k (+1.6 %) (the report's figure vs hermes-rl's count); cloud data lags up to a
    few hours; checked 14:02" — None when every figure both sides have agrees."""
    if tokens is None:
        return None
    parts = []
    for kind in KINDS:
        theirs, ours = reported[kind], tokens[kind]
        if abs(theirs - ours) <= TOKENS_AGREE * max(ours, 1):
            continue  # within the tolerance: nothing worth saying
        shown = (count_text(theirs), count_text(ours))
        if shown[0] == shown[1]:  # "1.3k vs 1.3k" says nothing: the exact counts
            shown = (f"{theirs:,}", f"{ours:,}")
        parts.append(f"{kind} {shown[0]} vs {shown[1]} ({_delta(theirs, ours)})")
    if cloud_usd is not None and usd is not None and abs(cloud_usd - usd) > max(1e-6, 0.005 * usd):
        parts.append(f"{usd_text(cloud_usd)} vs {usd_text(usd)} ({_delta(cloud_usd, usd)})")
    if not parts:
        return None
    checked = time.strftime("%H:%M", time.localtime(checked_at))
    lag = f"{CLOUD_LAG_NOTE}; " if source == "cloud" else ""
    return f"{'; '.join(parts)} (the report's figure vs hermes-rl's count); {lag}checked {checked}"


def refresh_cloud_usage(run_id: str, timeout_s: float = 60.0) -> None:
    """Ask Tinker for the run's usage now (`python -m hermes_rl.dataplane.cloud_usage`, a process of its own:
    core does not import the SDK), with TINKER_API_KEY from the environment or $HERMES_HOME/.env. Its
    one-line reason is a HermesError."""
    folder = run_dir(run_id)
    if not folder.is_dir():
        raise NotFound(f"no run {run_id}")
    env = {**os.environ, **secret_env(["TINKER_API_KEY"])}
    argv = [sys.executable, "-m", "hermes_rl.dataplane.cloud_usage", str(folder), "--timeout", str(timeout_s)]
    done = run_bounded(argv, timeout_s + 30, env=env)
    if done.timed_out:
        raise HermesError(f"the usage check did not end within {timeout_s + 30:g} s")
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        reason = lines[-1].removeprefix("cloud usage: ") if lines else f"the usage check exited {done.returncode}"
        raise HermesError(reason)


def _projected(run: Mapping[str, Any], last: dict, tokens: dict | None, usd: float | None) -> dict | None:
    step, total = last.get("step"), run.get("total_steps")
    first = ((run.get("resumed_from") or {}).get("step")) or 0
    if tokens is None or not isinstance(step, int) or not isinstance(total, int) or not first < step < total:
        return None  # nothing measured yet, or nothing left to project
    done = step - first
    scale = (total - first) / done
    projected_usd = None if usd is None else round(usd * scale, 6)
    return {
        "usd": projected_usd,
        "tokens": {kind: round(tokens[kind] * scale) for kind in KINDS},
        "steps": total,
        # an ended run (its budget, a plateau, a stop) pays for no more steps: what all would have cost
        "text": f"all {total - first} steps would have cost {usd_text(projected_usd)} at this rate"
        if run.get("status") in FINAL
        else f"at this rate: {usd_text(projected_usd)} for {total - first} steps",
    }


def add_costs(costs: list[dict]) -> dict[str, Any]:
    """The sum of several runs' costs: tokens always, usd only when every run's is known."""
    known = [c for c in costs if c.get("tokens") is not None]
    tokens = {kind: sum(int(c["tokens"][kind]) for c in known) for kind in KINDS}
    usd = None
    if costs and all(c.get("usd") is not None for c in costs):
        usd = round(sum(float(c["usd"]) for c in costs), 6)
    dates = sorted({c["prices_as_of"] for c in costs if c.get("prices_as_of")})
    return {
        "usd": usd,
        "text": usd_text(usd) if costs else "no runs",
        "tokens": tokens,
        "runs": len(costs),
        "prices_as_of": dates[-1] if dates else None,
    }


def cost_card(run: Mapping[str, Any]) -> str:
    """The report's cost card: "$0.0123 (1.1k prefill, 1.6k sample, 5.3k train tokens; prices as of …)", then
    what Tinker reported (cloud_text) when `status RUN --cloud` has read it."""
    try:
        cost = run_cost(run)
    except HermesError as exc:
        return f"price unknown: {exc.message}"
    tokens = cost["tokens"]
    if tokens is None:
        return "no token counts"
    counts = ", ".join(f"{tokens[kind]:,} {kind}" for kind in KINDS)
    dated = f"; prices as of {cost['prices_as_of']}" if cost.get("prices_as_of") else ""
    cloud = cloud_text(cost.get("cloud"))
    return f"{cost['text']} ({counts} tokens{dated})" + (f". {cloud}" if cloud else "")


# -- before a run ---------------------------------------------------------------------------------------


def _reference_run(environment: str | None, model: str | None) -> dict | None:
    """The newest run of the same environment and model whose trainer counted tokens: its measured
    tokens per trained sequence are a better guess than any default."""
    for summary in list_runs():
        if summary.get("environment") != environment or not summary.get("step"):
            continue
        config = read_run_config(summary["run_id"])
        if str((config.get("tinker") or {}).get("base_model")) != str(model):
            continue
        run = get_run(summary["run_id"], sample=False)
        last = run.get("last_metric") or {}
        tokens = tokens_of(last)
        first = ((run.get("resumed_from") or {}).get("step")) or 0
        batch = (config.get("env") or {}).get("batch_size")
        if tokens and tokens["train"] and isinstance(batch, int) and (last.get("step") or 0) > first:
            steps = last["step"] - first
            per_seq = {kind: tokens[kind] / (steps * batch) for kind in KINDS}
            return {"run_id": summary["run_id"], "per_sequence": per_seq}
    return None


def budget_stop_warning(model: str | None, budget_usd: object) -> str | None:
    """What every place a budget is given says (start, sweep, the start dialog, rl_start_training, the
    estimate) when it cannot stop anything: the model has no price, so no cost is ever counted against it."""
    if not budget_usd:
        return None
    try:
        price = prices.lookup(model)
    except HermesError:  # an unusable price file: the trainer has no price either
        price = None
    if price is not None:
        return None
    return no_price_budget_text(model)


def no_price_budget_text(model: str | None) -> str:
    return (
        f"budget_usd is set but {model} has no price: the budget stops nothing (set a price in {prices.prices_path()})"
    )


MAX_ESTIMATE_TOKENS = 10_000_000  # a sequence length to assume, at most


def _check_length(name: str, length: object) -> None:
    """A token length given to an estimate: a whole number from 1 (a negative one made a negative cost)."""
    if length is None:
        return
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= MAX_ESTIMATE_TOKENS:
        raise BadInput(
            f"{name} must be a whole number of tokens from 1 to {MAX_ESTIMATE_TOKENS:,}, got {shown_value(length)}",
            hint=f"--{name.replace('_', '-')} N: the length to assume",
        )


def estimate(
    values: dict,
    *,
    environment: str | None = None,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    use_history: bool = True,
) -> dict[str, Any]:
    """Expected tokens and USD of a run with these values (total_steps, batch_size, group_size,
    max_token_length, base_model), and the assumptions made. Per step: one sample request per group
    (batch_size / group_size prompts prefilled), batch_size completions sampled, batch_size sequences
    (prompt + completion) trained. Lengths: given ones, else measured per sequence in the newest run of
    the same environment and model, else a prompt of DEFAULT_PROMPT_TOKENS and completions of
    max_token_length (an upper bound)."""
    for name, length in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        _check_length(name, length)
    steps, batch, group = int(values["total_steps"]), int(values["batch_size"]), int(values["group_size"])
    model = values.get("base_model")
    assumptions = [
        f"{counted(steps, 'step')} × {counted(batch, 'sequence')} ({counted(batch // group, 'group')} of {group}) "
        "per step",
    ]
    given = prompt_tokens is not None or completion_tokens is not None
    reference = _reference_run(environment, model) if use_history and not given else None
    if reference is not None:
        per = reference["per_sequence"]
        per_step = {
            "prefill": per["prefill"] * batch,
            "sample": per["sample"] * batch,
            "train": per["train"] * batch,
        }
        assumptions.append(
            f"tokens per sequence as measured in run {reference['run_id']} (same environment and model): "
            f"{per['prefill']:.1f} prefilled, {per['sample']:.1f} sampled, {per['train']:.1f} trained "
            "(its evals and dropped groups included)"
        )
    else:
        prompt = prompt_tokens if prompt_tokens is not None else DEFAULT_PROMPT_TOKENS
        completion = completion_tokens if completion_tokens is not None else int(values["max_token_length"])
        per_step = {
            "prefill": batch / group * prompt,
            "sample": batch * completion,
            "train": batch * (prompt + completion),
        }
        assumptions.append(
            f"prompts of {prompt} tokens"
            + (" (given)" if prompt_tokens is not None else " (assumed; --prompt-tokens to set)")
            + f", completions of {completion} tokens"
            + (" (given)" if completion_tokens is not None else " (max_token_length: an upper bound)")
        )
        assumptions.append("evals and groups an environment drops (all answers scored alike) add sampling not counted")
    tokens = {kind: round(per_step[kind] * steps) for kind in KINDS}
    out = cost_of(model, tokens)
    out.update(steps=steps, per_step={k: round(v) for k, v in per_step.items()}, assumptions=assumptions)
    if out["price"] is None:
        out["assumptions"].append(f"no price for {model}: set one in {prices.prices_path()}")
    return out


def estimate_start(
    env_name: str | None = None,
    profile: str | None = None,
    overrides: dict | None = None,
    *,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> dict[str, Any]:
    """The estimate of the run `start_run` with these arguments would start (nothing is started, no key
    is needed): the same environment, profile and values, resolved and validated the same way."""
    selection = current_selection()
    chosen, _notice = resolve_profile(profile or selection.get("profile"))
    env, _fallback = selected_or_default(env_name, selection, chosen)
    values = resolve_run_values(env, chosen, overrides)
    locked = {name: item.value for name, item in chosen.locked.items()}
    merged = {**locked, **values}
    out = estimate(merged, environment=env.id, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    budget = merged.get("budget_usd")
    out.update(environment=env.id, profile=chosen.name, backend=chosen.backend, budget_usd=budget)
    out["budget_warning"] = budget_stop_warning(merged.get("base_model"), budget)
    if out["budget_warning"]:
        out["assumptions"].append(out["budget_warning"])
    if budget and out["usd"] is not None and out["usd"] > budget:
        out["assumptions"].append(f"the budget (${budget:.2f}) stops it before the end")
    return out
