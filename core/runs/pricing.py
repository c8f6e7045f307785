"""A run's tokens and their price, as the run listing (core.runs.store) and the cost reports (core.runs.cost)
both need them: below both, so the store never imports the reports that read it."""

from __future__ import annotations

from ..base import prices
from ..base.errors import HermesError
from ..base.prices import KINDS
from .runconfig import read_run_config


def tokens_of(row: dict | None) -> dict[str, int] | None:
    """The run's token totals from its newest trainer row; None when its trainer records none (older runs)."""
    row = row or {}
    if not any(f"tokens/{kind}_total" in row for kind in KINDS):
        return None
    return {kind: int(row.get(f"tokens/{kind}_total") or 0) for kind in KINDS}


def priced(model: str | None, tokens: dict[str, int] | None) -> float | None:
    """USD of `tokens` at `model`'s price; None when either is unknown or the price file is unusable
    (a listing names no error per row: status says what is wrong with the file)."""
    if tokens is None:
        return None
    try:
        price = prices.lookup(model)
    except HermesError:
        return None
    return None if price is None else round(price.usd(tokens), 6)


def run_model(run_id: str) -> str | None:
    """The model a run trains (config.yaml's tinker.base_model)."""
    tinker = read_run_config(run_id).get("tinker")
    model = tinker.get("base_model") if isinstance(tinker, dict) else None
    return str(model) if model else None
