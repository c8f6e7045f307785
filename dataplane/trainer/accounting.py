"""Token accounting: what a run sends through Tinker, counted where it passes, per step and in total.

- prefill: the prompt tokens of each sample request (the trainer's inference server sends every request
  once with num_samples=n, so a group's prompt is counted once), environments' evals included;
- sample: the tokens the sampler generated (every completion of every request);
- train: the tokens of every datum sent to forward_backward (and to the extra forward pass for an
  environment that sent no logprobs).

Each metrics row gets `tokens/<kind>` (since the previous row) and `tokens/<kind>_total` (since the run
began), plus `usage/cpu_s`: this machine's CPU seconds of the run's processes so far (RunCpu). `Budget`
turns the totals into dollars at the price resolved when the run was launched and says when the run's
budget is reached.
"""

from __future__ import annotations

import os
import threading
import time

import psutil

from hermes_rl.core.daemons.procscan import find_run_processes

KINDS = ("prefill", "sample", "train")


class TokenCounter:
    """Thread-safe running totals; `row()` gives the keys of one metrics row (the step's share and totals)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(KINDS, 0)
        self._reported = dict.fromkeys(KINDS, 0)

    def add(self, kind: str, count: int) -> None:
        with self._lock:
            self.totals[kind] += int(count)

    def add_sample(self, prompt_tokens: int, completion_tokens: list[int]) -> None:
        with self._lock:
            self.totals["prefill"] += int(prompt_tokens)
            self.totals["sample"] += sum(int(n) for n in completion_tokens)

    def row(self) -> dict[str, int]:
        with self._lock:
            totals = dict(self.totals)
            step = {kind: totals[kind] - self._reported[kind] for kind in KINDS}
            self._reported = totals
        out = {f"tokens/{kind}": step[kind] for kind in KINDS}
        out.update({f"tokens/{kind}_total": totals[kind] for kind in KINDS})
        return out


class RunCpu:
    """CPU seconds (user + system) of the run's processes on this machine: every process carrying the
    run's marker (core.daemons.procscan), each one's last reading kept once it ends. Read at most every
    `every_s` seconds (a /proc scan: about 2 ms); None where none could be read (processes elsewhere)."""

    def __init__(self, run_dir: str | None, every_s: float = 1.0):
        self.run_dir = run_dir
        self.every_s = every_s
        self._seen: dict[tuple[int, float | None], float] = {}
        self._read_at = 0.0

    def seconds(self) -> float | None:
        if not self.run_dir:
            return None
        now = time.monotonic()
        if now - self._read_at >= self.every_s:
            self._read_at = now
            self._scan()
        return round(sum(self._seen.values()), 2) if self._seen else None

    def _scan(self) -> None:
        # the scan leaves out the calling process: the trainer counts itself
        keys = [(p.pid, p.create_time) for p in find_run_processes(self.run_dir)] + [(os.getpid(), None)]
        for pid, created in keys:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            self._seen[(pid, created)] = times.user + times.system


class Budget:
    """A run's budget at the price resolved at launch (config.yaml `hermes.price`, `tinker.budget_usd`)."""

    def __init__(self, budget_usd: float | None, price: dict | None):
        self.budget_usd = budget_usd
        self.price = price if isinstance(price, dict) and all(k in price for k in KINDS) else None

    def usd(self, totals: dict) -> float | None:
        if self.price is None:
            return None
        return sum(float(totals.get(f"tokens/{k}_total") or 0) * float(self.price[k]) for k in KINDS) / 1e6

    def reached(self, row: dict) -> str | None:
        """ "budget reached: $X of $Y" once the run's cost is at or over its budget; None before (or without
        a budget or a price)."""
        if not self.budget_usd:
            return None
        usd = self.usd(row)
        if usd is None or usd < self.budget_usd:
            return None
        return f"budget reached: ${usd:.4f} of ${self.budget_usd:.2f}"


class Usage:
    """What the trainer loop holds: the token counter (shared with the inference server's Policy), the
    run's CPU time and its budget; `row()` gives a metrics row's usage keys."""

    def __init__(self, run_dir: str | None, budget_usd: float | None, price: dict | None):
        self.tokens = TokenCounter()
        self.cpu = RunCpu(run_dir)
        self.budget = Budget(budget_usd, price)

    def row(self) -> dict:
        """tokens/…, usage/cpu_s and, at the launch price, cost/usd and budget/used (the share of the
        budget spent: the supervisor's alert at 80 % reads it); the last two only where known."""
        row: dict = {**self.tokens.row(), "usage/cpu_s": self.cpu.seconds()}
        usd = self.budget.usd(row)
        if usd is not None:
            row["cost/usd"] = round(usd, 6)
            if self.budget.budget_usd:
                row["budget/used"] = round(usd / self.budget.budget_usd, 4)
        return row
