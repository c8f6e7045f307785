"""`--watch`: a run's progress until it ends (its phase while starting, then step, reward, eval and an
ETA), as a live bar on a terminal and as plain lines elsewhere; what `status` knows of a problem (a
failing environment, a process not ready and why) as it changes; at the end the audit's verdict."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ...base.audit_rule import headline
from ...base.failures import problem_key
from ...base.formatting import human_duration, human_number
from ...base.paths import cli_command
from ...base.states import FINAL, ProcState, RunStatus
from .output import DOUBTFUL, EXIT_ERROR, Exit, next_steps, rich_console, safe, styled_outcome

WAITING = (ProcState.PENDING, ProcState.STARTING)  # a process the run still waits for


def _phase(run: Mapping[str, Any], step: int | None) -> str:
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


def _notice(run: Mapping[str, Any]) -> tuple[str, ...]:
    """What `status` says is wrong with a live run (its health reason and tip), or nothing."""
    health = run.get("health") or {}
    if run.get("status") in FINAL or not health.get("reason"):
        return ()
    return (str(health["reason"]), *((f"tip: {health['tip']}",) if health.get("tip") else ()))


def _said(notice: tuple[str, ...]) -> tuple[str, ...]:
    """A notice as words: the same problem with its numbers grown ("no trained step since step 46 in 31 s",
    "logged 2,801 ×") is not said again every second."""
    return tuple(problem_key(line) for line in notice)


def ending_lines(run_id: str, run: Mapping[str, Any], audit: Mapping[str, Any] | None) -> list[str]:
    """The run's end and the audit's verdict, as rich markup: a completed run whose audit says no_signal
    or suspect is no green tick (it trained, but on nothing, or on what the reward pays)."""
    verdict = (audit or {}).get("verdict")
    reason = f": {safe(run['reason'])}" if run.get("reason") else ""
    head = f"run {run_id} {styled_outcome(run['status'], verdict)}{reason}"
    colour = "yellow" if verdict in DOUBTFUL else "green" if verdict == "learning" else "default"
    return [head, f"audit: [{colour}]{safe(headline(dict(audit) if audit else None))}[/]"]


def watch(run_id: str, json_output: bool = False) -> Any:
    """Progress of a run until it ends: its phase while starting (building the model, starting processes,
    waiting for the first batch), then step, reward, greedy eval accuracy and an ETA. On a terminal a
    live bar; otherwise (a pipe, a file, CI) a plain line every 10 s and at each change of phase. Ctrl-C
    detaches and leaves the run going. With --json, the run's status report (as `hermes-rl status
    --json`) once it ends or on detaching."""
    from ... import runs
    from ...runs import report

    console = rich_console()
    rate = _Rate()
    run: Mapping[str, Any] = runs.get_run(run_id)

    def sample() -> dict:
        run = runs.get_run(run_id, sample=False)
        summary: Mapping[str, Any] = next((r for r in runs.list_runs() if r["run_id"] == run_id), {})
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
            "notice": _notice(run),
        }

    try:
        run = _plain_lines(run_id, sample) if not console.is_terminal else _live_bar(console, run, sample)
    except KeyboardInterrupt:
        console.print(f"detached; run {run_id} keeps going ({cli_command()} stop {run_id} to stop it)")
        return report.status_report(run_id, steps=next_steps()) if json_output else None
    if json_output:
        return report.status_report(run_id, steps=next_steps())
    for line in ending_lines(run_id, run, report.run_audit(runs.get_run(run_id, sample=False))):
        console.print(line)
    if run["status"] == RunStatus.COMPLETED:
        results = runs.get_results(run_id)
        if results.get("checkpoint"):
            console.print(f"checkpoint: {safe(results['checkpoint'])}")
    return None if run["status"] in (RunStatus.COMPLETED, RunStatus.STOPPED) else Exit(EXIT_ERROR)


def _plain_lines(run_id: str, sample: Callable[[], dict]) -> Mapping[str, Any]:
    """A line at each change of phase and every PLAIN_EVERY_S until the run ends; the run at its end."""
    started = time.monotonic()
    shown_phase, shown_at = None, 0.0
    shown_notice: tuple[str, ...] = ()
    while True:
        now = sample()
        run = now["run"]
        said = _said(now["notice"])
        if now["notice"] and said != shown_notice:
            print("\n".join(f"  {line}" for line in now["notice"]), flush=True)
        shown_notice = said
        if now["phase"] != shown_phase or time.monotonic() - shown_at >= PLAIN_EVERY_S or run["status"] in FINAL:
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
            return run
        time.sleep(1.0)


def _live_bar(console, run: Mapping[str, Any], sample: Callable[[], dict]) -> Mapping[str, Any]:
    """A live progress bar on the terminal until the run ends; the run at its end."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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
            "run", total=run.get("total_steps") or 1, phase=safe(run["status"]), reward="-", eval="-", eta="-"
        )
        shown_notice: tuple[str, ...] = ()
        while True:
            now = sample()
            run = now["run"]
            said = _said(now["notice"])
            if now["notice"] and said != shown_notice:
                for line in now["notice"]:
                    progress.console.print(f"  [yellow]{safe(line)}[/]")
            shown_notice = said
            progress.update(
                task,
                total=now["total"],
                completed=now["step"],
                phase=safe(now["phase"]),
                reward=now["reward"],
                eval=now["eval"],
                eta=now["eta"],
            )
            if run["status"] in FINAL:
                return run
            time.sleep(1.0)
