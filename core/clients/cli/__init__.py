"""`hermes-rl`: the command-line client. No arguments opens the dashboard.

Every command is a thin wrapper over the same core calls the dashboard and the agent tools use.
Errors are one clear line on stderr and a non-zero exit (or a JSON error with --json), never a traceback.

A package by command group: `parser` (every command's arguments, in help order), `output` (what every
command prints with), then `environments`, `lifecycle` (with `watch`), `data`, `inference`, `sweeps`,
`alerts`, `frontends`. Handlers import Rich and the run library when they run, so `--help` and a
one-line command start without them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from ...base.errors import BadInput, HermesError
from ...readers.logs import sanitize_terminal
from ...readers.metrics_digest import REPORT_PROGRESS
from .output import EXIT_ERROR, DigestProgress, Exit
from .parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None, open_dashboard: Callable[[str | None], None] | None = None) -> int:
    """Run one command. `open_dashboard(run_id)` is handed in by the `hermes-rl` launcher (hermes_rl.tui),
    so this module never imports Textual; without it, `dashboard` and `demo` say where the dashboard is.
    A reader that goes away (`| head`) ends any command quietly, wherever the write was."""
    try:
        return _main(argv, open_dashboard)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader closed the pipe: what is still buffered would fail again when Python flushes
    stdout at exit (an "Exception ignored" traceback), so stdout now points at /dev/null."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0


def _check_text_arguments(args) -> None:
    """BadInput naming the argument whose bytes are not UTF-8 text (Python hands them on as lone
    surrogates, which fail much later, in whatever encodes them, as an "unexpected error")."""
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    shown = text.encode("utf-8", "backslashreplace").decode("ascii", "replace")[:60]
                    raise BadInput(
                        f"{name.replace('_', '-')} is not UTF-8 text: {shown!r}",
                        hint="pass the text in UTF-8 (check the terminal's or the script's encoding)",
                    ) from None


def _main(argv: list[str] | None, open_dashboard: Callable[[str | None], None] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        args = parser.parse_args(["dashboard"])
    args.open_dashboard = open_dashboard
    progress = DigestProgress()  # a long first look at a run (its metrics digest built) says how it goes
    token = REPORT_PROGRESS.set(progress)
    try:
        _check_text_arguments(args)
        result = args.handler(args)
    except HermesError as exc:
        if getattr(args, "json", False):
            print(json.dumps(exc.to_dict()))
        else:
            # Messages quote run state (a reason, a bad field's value): sanitized like everything else shown.
            text = sanitize_terminal(exc.message) + (f"\n  hint: {sanitize_terminal(exc.hint)}" if exc.hint else "")
            print(f"hermes-rl: {text}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # main() ends quietly
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        message = f"{type(exc).__name__}: {exc}"
        if getattr(args, "json", False):
            print(json.dumps({"error": message}))
        else:
            print(f"hermes-rl: unexpected error: {sanitize_terminal(message)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        REPORT_PROGRESS.reset(token)
        progress.close()
    if isinstance(result, Exit):
        return result.code
    if result is not None:
        from ...base.fsutil import dumps

        print(dumps(result, indent=2))
    return 0
