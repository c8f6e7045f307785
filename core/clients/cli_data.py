"""`hermes-rl` commands that take a run's data out and tell people about runs: sample, metrics, report,
alerts. Registered by core.clients.cli's parser (`add_commands`); each is a thin wrapper over core.runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from ..base.errors import BadInput
from ..base.names import ascii_int
from ..readers.logs import sanitize_terminal


def _say(text: object = "", *, err: bool = False) -> None:
    """Print text that may hold what a model or a run's files wrote: escape sequences cannot act on the
    terminal (the sanitizer the log views use)."""
    lines = str(text).split("\n")
    print("\n".join(sanitize_terminal(line) for line in lines), file=sys.stderr if err else sys.stdout)


ALERTS_EPILOG = """\
Rules live in $HERMES_HOME/rl/alerts.yaml and are applied by each run's own supervisor, so nothing
needs to be open for an alert to go out. Each event is delivered once:

  webhook:
    url: https://hooks.example.com/hermes   # https; plain http only to 127.0.0.1 / ::1 / localhost
    # url_env: HERMES_RL_ALERT_URL          # or read the URL from the environment or .env
    secret_env: HERMES_RL_ALERT_SECRET      # optional: X-Hermes-Signature: sha256=<HMAC of the body>
    timeout_s: 5                            # the whole request; at most 30
  rules:
    - on: failed
    - on: completed
      channels: [dashboard]                 # default: dashboard, desktop (notify-send), webhook
    - on: stalled
      after_s: 600                          # default: HERMES_RL_STALL_S (900)
    - on: metric
      metric: eval/percent_correct
      above: 0.9                            # or below:

`hermes-rl alerts test` sends a sample through the channels the rules use."""


def _exit(code: int) -> Any:
    from .cli import _Exit  # the CLI's own "exit with this code" result

    return _Exit(code)


def cmd_alerts(args) -> Any:
    from ..runs import alerts

    if args.action == "test":
        outcome = alerts.send_test()
        if args.json:
            return outcome
        _say(f"rules: {', '.join(outcome['rules']) or 'none (a sample goes to every channel)'}")
        if outcome["webhook"]:
            _say(f"webhook: {outcome['webhook']}")
        for channel, result in outcome["channels"].items():
            _say(f"  {channel:<10} {result}")
        failed = [c for c, r in outcome["channels"].items() if not r.startswith(("delivered", "skipped"))]
        return _exit(1) if failed else None
    config = alerts.load_config()
    shown = {
        "file": str(alerts.alerts_file()),
        "rules": [{"on": r.on, "rule": r.describe(), "channels": list(r.channels)} for r in config.rules],
        "webhook": config.webhook.target if config.webhook else None,
    }
    if args.json:
        return shown
    _say(f"{shown['file']}: {len(config.rules)} rule(s)" + (f", webhook {shown['webhook']}" if config.webhook else ""))
    for rule in shown["rules"]:
        _say(f"  {rule['rule']:<36} → {', '.join(rule['channels'])}")
    return None


def cmd_sample(args) -> Any:
    from ..runs import sampling

    if args.list:
        checkpoints = sampling.list_checkpoints(args.run_id)
        if args.json:
            return checkpoints
        if not checkpoints:
            _say(f"run {args.run_id} has saved no checkpoint yet")
        for c in checkpoints:
            where = c["local_path"] or c["tinker_path"]
            _say(f"  step {c['step'] if c['step'] is not None else '?':>6}  {c['name']:<14} {where}")
        return None
    checkpoint = sampling.find_checkpoint(args.run_id, args.step)
    said = (
        f"run {args.run_id}'s checkpoint {checkpoint['name']} (step {checkpoint['step']}, run {checkpoint['status']})"
    )

    def stage(line: str) -> None:
        if not args.json:
            _say(f"  {line}", err=True)

    if args.prompt is not None:
        if not args.json:
            _say(f"sampling {said}…", err=True)
        answer = sampling.sample_prompt(
            checkpoint, args.prompt, n=args.n, max_tokens=args.max_tokens, chat=not args.raw, on_stage=stage
        )
        if args.json:
            return answer
        for index, completion in enumerate(answer["completions"], 1):
            _say(f"--- completion {index}/{len(answer['completions'])} ({completion['finish']})")
            _say(completion["text"])
        return None
    from ..runs.trial import InferenceTest

    test = InferenceTest.prepare(args.groups, args.group_size, env_name=args.env or None, checkpoint=checkpoint)
    if not args.json:
        _say(f"scoring {said} on {test.env_info.name}: {args.groups} groups of {args.group_size}…", err=True)
    summary = test.run(lambda event: stage(event["stage"]) if event.get("stage") else None)
    results = summary.get("models") or [{}]
    scored = sampling.scored_completions(results[0].get("rollouts_path") or "", limit=10_000)
    summary["completions"] = scored
    if args.json:
        return summary
    result = results[0]
    for error in result.get("errors") or []:
        _say(f"  error: {error}")
    accuracy = "n/a" if result.get("accuracy") is None else f"{result['accuracy']:.1%}"
    mean = "n/a" if result.get("mean_score") is None else f"{result['mean_score']:.3f}"
    _say(f"{result.get('completions', 0)} completions scored: mean reward {mean}, correct {accuracy}")
    shown = scored[:3] + [c for c in scored[-3:] if c not in scored[:3]]
    for completion in shown:
        _say(f"--- reward {completion['score']:.3f}")
        _say(completion["text"][:600])
    _say(f"everything: {summary['folder']}")
    return None if summary.get("environment_working") else _exit(1)


def cmd_metrics(args) -> Any:
    from ..runs import export

    keys = [k for item in args.keys or [] for k in item.split(",")]
    columns, rows = export.metrics_table(args.run_id, keys)
    text = export.format_metrics(columns, rows, "json" if args.json else args.format)
    if args.output:
        from ..base.fsutil import atomic_write_text

        try:
            atomic_write_text(Path(args.output), text)
        except OSError as exc:
            raise BadInput(
                f"cannot write {args.output}: {exc.strerror or exc}", hint="choose a writable path"
            ) from None
        _say(f"{len(rows)} rows × {len(columns)} columns → {args.output}", err=True)
    else:
        sys.stdout.write(text)
    return None


def cmd_report(args) -> Any:
    from ..runs import export

    path = export.write_report(args.run_id, args.output)
    if args.json:
        return {"run_id": args.run_id, "path": str(path), "bytes": path.stat().st_size}
    _say(f"report of run {args.run_id}: {path} ({path.stat().st_size / 1024:.0f} KB, opens offline in any browser)")
    return None


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register this module's commands with the CLI's `add(name, handler, help, epilog)`."""
    cmd = add(
        "sample",
        cmd_sample,
        "a saved checkpoint of any run (finished, stopped or live) answers a prompt, or its environment scores it",
    )
    cmd.add_argument("run_id")
    cmd.add_argument("--step", type=ascii_int, help="the checkpoint saved at this step (default: the newest)")
    what = cmd.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", metavar="TEXT", help="answer this prompt (as a user message; --raw: as text)")
    what.add_argument(
        "--env", nargs="?", const="", metavar="ENV", help="score answers with the run's environment (or ENV)"
    )
    what.add_argument("--list", action="store_true", help="list the run's saved checkpoints")
    cmd.add_argument("--n", type=ascii_int, default=1, help="completions of the prompt")
    cmd.add_argument("--max-tokens", type=ascii_int, default=128)
    cmd.add_argument("--raw", action="store_true", help="send the prompt as raw text, no chat template")
    cmd.add_argument("--groups", type=ascii_int, default=2, help="--env: groups to generate and score")
    cmd.add_argument("--group-size", type=ascii_int, default=4, help="--env: completions per group")
    cmd = add(
        "metrics", cmd_metrics, "a run's metrics, every step, as CSV or JSON (trainer and environment rows merged)"
    )
    cmd.add_argument("run_id")
    cmd.add_argument("--keys", nargs="+", metavar="KEY", help="these metrics only (default: all); commas also work")
    cmd.add_argument("--format", choices=("csv", "json"), default="csv")
    cmd.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    cmd = add(
        "report",
        cmd_report,
        "one self-contained HTML page of a run: charts, evals, config, best and worst rollouts, processes",
    )
    cmd.add_argument("run_id")
    cmd.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: <run folder>/report.html)")
    cmd = add("alerts", cmd_alerts, "alert rules (alerts.yaml): show them, or send a sample", epilog=ALERTS_EPILOG)
    cmd.add_argument("action", nargs="?", choices=("show", "test"), default="show")
