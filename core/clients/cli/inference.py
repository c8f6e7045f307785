"""`hermes-rl` commands that put models to work outside training: test-inference (the inference trial,
core.runs.trial) and sample (a saved checkpoint of any run, core.runs.sampling)."""

from __future__ import annotations

from typing import Any

from ...base.formatting import counted, human_duration
from .output import EXIT_ERROR, Exit, rich_console, safe, say, short_path


def cmd_test_inference(args) -> Any:
    """The selected environment against real models (OpenRouter, a base_url, a running local run, or
    SmolLM2 on this machine with no key at all), through the same call as rl_test_inference."""
    from ...runs.trial import InferenceTrial

    trial = InferenceTrial.prepare(args.steps, args.group_size, args.model or None, args.base_url, env_name=args.env)
    if args.json:
        return trial.run()
    console = rich_console()

    def show(event: dict) -> None:
        kind = event["event"]
        if kind == "started":
            target = event["target"]
            console.print(
                f"testing [bold]{safe(event['environment'])}[/] ({counted(event['num_steps'], 'group')} of "
                f"{event['group_size']}) against {safe(target['kind'])}"
                + (f": {safe(target['note'])}" if target.get("note") else "")
            )
        elif kind == "progress" and event.get("stage"):
            console.print(f"  {safe(event['stage'])}")
        elif kind == "progress":
            console.print(f"  {safe(event['model'])}: {event['groups_done']}/{event['groups_total']} groups")
        elif kind == "model_result":
            accuracy = "n/a" if event["accuracy"] is None else f"{event['accuracy']:.1%}"
            console.print(
                f"  {safe(event['model'])}: {event['completions']} completions, {event['correct']} correct "
                f"({accuracy}) in {human_duration(event['duration_s'])}"
            )
            for error in event["errors"]:
                console.print(f"    [red]{safe(error)}[/]")
        elif kind == "summary":
            console.print(f"{safe(event['verdict'])}\nresults: {safe(short_path(event['folder']))}")

    summary = trial.run(show)
    return None if summary.get("environment_working") else Exit(EXIT_ERROR)


def cmd_sample(args) -> Any:
    from ...runs import sampling

    if args.list:
        checkpoints = sampling.list_checkpoints(args.run_id)
        if args.json:
            return checkpoints
        if not checkpoints:
            say(f"run {args.run_id} has saved no checkpoint yet")
        for c in checkpoints:
            where = c["local_path"] or c["tinker_path"]
            say(f"  step {c['step'] if c['step'] is not None else '?':>6}  {c['name']:<14} {where}")
        return None
    checkpoint = sampling.find_checkpoint(args.run_id, args.step)
    said = (
        f"run {args.run_id}'s checkpoint {checkpoint['name']} (step {checkpoint['step']}, run {checkpoint['status']})"
    )

    def stage(line: str) -> None:
        if not args.json:
            say(f"  {line}", err=True)

    if args.prompt is not None:
        if not args.json:
            say(f"sampling {said}…", err=True)
        chat = False if args.raw else True if args.chat else None
        answer = sampling.sample_prompt(
            checkpoint, args.prompt, n=args.n, max_tokens=args.max_tokens, chat=chat, on_stage=stage
        )
        if args.json:
            return answer
        say(f"prompt sent as {answer['prompt_format']}: {answer['prompt_format_why']}", err=True)
        for index, completion in enumerate(answer["completions"], 1):
            say(f"--- completion {index}/{len(answer['completions'])} ({completion['finish']})")
            say(completion["text"])
        return None
    from ...runs.trial import InferenceTrial

    trial = InferenceTrial.prepare(args.groups, args.group_size, env_name=args.env or None, checkpoint=checkpoint)
    if not args.json:
        say(f"scoring {said} on {trial.env_info.name}: {counted(args.groups, 'group')} of {args.group_size}…", err=True)
    summary = trial.run(lambda event: stage(event["stage"]) if event.get("stage") else None)
    results = summary.get("models") or [{}]
    scored = sampling.scored_completions(results[0].get("rollouts_path") or "", limit=10_000)
    summary["completions"] = scored
    if args.json:
        return summary
    result = results[0]
    for error in result.get("errors") or []:
        say(f"  error: {error}")
    accuracy = "n/a" if result.get("accuracy") is None else f"{result['accuracy']:.1%}"
    mean = "n/a" if result.get("mean_score") is None else f"{result['mean_score']:.3f}"
    say(f"{result.get('completions', 0)} completions scored: mean reward {mean}, correct {accuracy}")
    shown = scored[:3] + [c for c in scored[-3:] if c not in scored[:3]]
    for completion in shown:
        say(f"--- reward {completion['score']:.3f}")
        say(completion["text"][:600])
    say(f"everything: {summary['folder']}")
    return None if summary.get("environment_working") else Exit(1)
