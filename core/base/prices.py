"""What a token costs: a dated price table per model, overridable in `$HERMES_HOME/rl/prices.yaml`.

A price is USD per million tokens for each of the three things Tinker bills separately: prefill (the
prompt tokens a sampler reads), sample (the tokens it generates) and train (the tokens forward_backward
runs over). Every built-in price carries the date it was published (or, where noted, the date hermes-rl
was told it) and where it comes from; a model with no price has none: cost shows "price unknown",
never a guess.

prices.yaml:

    Qwen/Qwen3-8B: {prefill: 0.2, sample: 0.6, train: 0.45}
    tiny-toy: {prefill: 1000, sample: 1000, train: 1000, as_of: "2026-12-05"}
    "*": {prefill: 0.1, sample: 0.3, train: 0.3}      # any model not named above

A model matches its exact name, then case-insensitively, then by its last path component (so a local
model folder `.../models/tiny-toy` matches `tiny-toy`); `"*"` matches any model. The user's file wins
over the built-in table, its exact names over its `"*"`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import BadInput
from .fsutil import read_yaml
from .paths import rl_dir

KINDS = ("prefill", "sample", "train")


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind, with the date it holds from and where it comes from."""

    model: str  # the table's key that matched
    prefill: float
    sample: float
    train: float
    as_of: str | None  # ISO date the price was published (or set by the user); None when not said
    source: str

    def usd(self, tokens: dict[str, Any]) -> float:
        """The cost of `tokens` ({prefill, sample, train} counts) at this price."""
        return sum(float(tokens.get(kind) or 0) * getattr(self, kind) for kind in KINDS) / 1e6

    def to_dict(self) -> dict:
        return asdict(self)


# Tinker's published prices (USD per million tokens). The date is the date hermes-rl was told them
# (issue 42); Tinker's page does not date its list. Add a model only with a price that can be cited.
_TINKER = "Tinker's published price list (the date is when hermes-rl was told it)"
BUILTIN_PRICES: dict[str, Price] = {
    "Qwen/Qwen3-4B-Instruct-2507": Price("Qwen/Qwen3-4B-Instruct-2507", 0.07, 0.22, 0.22, "2026-12-05", _TINKER),
    "Qwen/Qwen3-8B": Price("Qwen/Qwen3-8B", 0.195, 0.60, 0.44, "2026-12-05", _TINKER),
}

PRICES_FILE = "prices.yaml"
_CACHE: dict[str, tuple[tuple, dict[str, Price]]] = {}


def prices_path() -> Path:
    return rl_dir() / PRICES_FILE


def _number(model: str, kind: str, value: Any, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
        raise BadInput(
            f"{path}: {model}.{kind} must be a number of USD per million tokens (0 or more), got {value!r}",
            hint="fix or delete the file",
        )
    return float(value)


def _parse(data: Any, path: Path) -> dict[str, Price]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{path} must map model names to {{prefill, sample, train}}", hint="fix or delete the file")
    out = {}
    for model, entry in data.items():
        model = str(model)
        if not isinstance(entry, dict):
            raise BadInput(f"{path}: {model} must be a mapping {{prefill, sample, train}}", hint="fix the file")
        unknown = sorted(set(map(str, entry)) - {*KINDS, "as_of"})
        if unknown:
            raise BadInput(
                f"{path}: {model} has unknown key(s) {', '.join(unknown)} (allowed: prefill, sample, train, as_of)",
                hint="fix the file",
            )
        missing = [kind for kind in KINDS if kind not in entry]
        if missing:
            raise BadInput(f"{path}: {model} lacks {', '.join(missing)}", hint="give all three prices")
        as_of = entry.get("as_of")
        prefill, sample, train = (_number(model, kind, entry[kind], path) for kind in KINDS)
        out[model] = Price(
            model,
            prefill,
            sample,
            train,
            as_of=str(as_of) if as_of is not None else None,
            source=f"your {path}",
        )
    return out


def user_prices() -> dict[str, Price]:
    """The user's prices.yaml, parsed (cached by the file's mtime and size); {} without one; BadInput when
    it is not a valid price file."""
    path = prices_path()
    try:
        st = os.stat(path)
        sig: tuple = (st.st_mtime_ns, st.st_size)
    except OSError:
        return {}
    cached = _CACHE.get(str(path))
    if cached and cached[0] == sig:
        return cached[1]
    table = _parse(read_yaml(path, what="price file"), path)
    _CACHE[str(path)] = (sig, table)
    return table


def _match(table: dict[str, Price], model: str) -> Price | None:
    if model in table:
        return table[model]
    lowered = {key.lower(): price for key, price in table.items()}
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    return lowered.get(model.lower()) or lowered.get(base)


def lookup(model: str | None) -> Price | None:
    """The price of `model`: the user's file first (its named models, then its "*"), then the built-in
    table; None when neither has one (the cost is then unknown)."""
    if not model:
        return None
    user = user_prices()
    return _match(user, str(model)) or user.get("*") or _match(BUILTIN_PRICES, str(model))


def tokens_text(tokens: dict | None) -> str:
    """ "prefill 1.2k · sample 3.4M · train 5.6M tokens", or "no token counts"."""
    if not tokens:
        return "no token counts"
    return " · ".join(f"{kind} {count_text(tokens.get(kind))}" for kind in KINDS) + " tokens"


def count_text(value: object) -> str:
    n = float(value or 0)  # type: ignore[arg-type]
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= limit:
            return f"{n / limit:.1f}{suffix}"
    return str(int(n))


def usd_text(usd: float | None) -> str:
    """A dollar figure for people: "$4.12", "$0.0031", or "price unknown"."""
    if usd is None:
        return "price unknown"
    if usd == 0:
        return "$0.00"
    return f"${usd:.2f}" if usd >= 1 else f"${usd:.4f}" if usd >= 0.0001 else f"${usd:.2e}"
