"""What every `hermes-rl` command prints with: a Rich console, text from run files made safe to show,
a run status with its glyph, `--set` pairs, short paths, and `Exit`, a command's "exit with this code"."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ...base.errors import HermesError
from ...base.paths import cli_command
from ...base.states import run_style
from ...readers.logs import sanitize_terminal

EXIT_ERROR = 1


class Exit:
    """A command's result that is an exit code, not output."""

    def __init__(self, code: int):
        self.code = code


PIPE_WIDTH = 400  # written to a pipe or a file, a table row stays one line (grep, cut, awk), not 80 columns


def rich_console(stderr: bool = False):
    """A console for one command (Rich is imported here: `--help` and plain commands start without it);
    PIPE_WIDTH wide when its stream is not a terminal and COLUMNS is not set."""
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty()) and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, highlight=False, width=PIPE_WIDTH if piped else None)


def next_steps():
    """The CLI's names for the actions a report's tips suggest."""
    from ...runs.report import NextSteps

    cli = cli_command()
    return NextSteps(stop=f"`{cli} stop {{run_id}}`", results=f"`{cli} results {{run_id}}`", start=f"`{cli} start`")


def safe(value: Any) -> str:
    """Any text that comes from a run's files or an environment's (reasons, names, notices, config values,
    paths, every table cell) as Rich markup that prints it literally: the terminal sanitizer the log views
    use (SGR colours kept as styles that end with the text, every other escape sequence removed, controls,
    Unicode line separators and direction overrides shown as symbols) and markup brackets escaped, so a
    crafted run.json can neither act on the terminal nor restyle or break the output."""
    from rich.markup import escape

    # tabs as spaces: a table measures a tab as one cell and prints eight, which breaks its rows
    text = sanitize_terminal("" if value is None else str(value)).expandtabs()
    if "\x1b" not in text:
        return escape(text)
    from rich.text import Text

    # The SGR colours it kept become Rich styles: closed where the text ends (a colour or an inverse left
    # open restyled the rest of a table and the terminal), and not counted as width in a table's cells.
    return Text.from_ansi(text).markup


def styled(status: Any) -> str:
    icon, colour = run_style(status)
    return f"[{colour}]{icon} {safe(status)}[/]"


DOUBTFUL = ("no_signal", "suspect")  # audit verdicts that make a completed run no success (docs/audit.md)


def styled_outcome(status: Any, verdict: Any, *, short: bool = False) -> str:
    """A run's status styled, where a completed run whose audit says no_signal or suspect is no green tick:
    it trained, but on nothing, or on what the reward pays rather than the task (`short`: for a table
    whose audit column says which)."""
    if status == "completed" and verdict in DOUBTFUL:
        return "[yellow]⚠ completed[/]" if short else f"[yellow]⚠ completed, but the audit says {safe(verdict)}[/]"
    return styled(status)


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """`--set field=value` pairs; values stay strings so the config library does the typed coercion."""
    assignments: dict[str, str] = {}
    for item in items or []:
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise HermesError(f"--set expects field=value, got {item!r}", hint="e.g. --set group_size=8")
        assignments[field.strip()] = value
    return assignments


def short_path(path: str) -> str:
    """A path relative to the project or home when it lies inside them."""
    from pathlib import Path

    from ...base.paths import PROJECT_ROOT

    for base, label in ((PROJECT_ROOT, ""), (Path.home(), "~/")):
        try:
            return label + str(Path(path).relative_to(base))
        except ValueError:
            continue
    return path


def one_line(text: str, width: int | None = None) -> str:
    shown = text.replace("\\", "\\\\").replace("\n", "\\n")
    return shown if width is None or len(shown) <= width else shown[: width - 1] + "…"


def say(text: object = "", *, err: bool = False) -> None:
    """Print text that may hold what a model or a run's files wrote: escape sequences cannot act on the
    terminal (the sanitizer the log views use)."""
    lines = str(text).split("\n")
    print("\n".join(sanitize_terminal(line) for line in lines), file=sys.stderr if err else sys.stdout)


class DigestProgress:
    """How the build of a run's metrics digest goes (readers.metrics_digest.REPORT_PROGRESS), as one line on
    stderr once the build has taken over `after_s`: redrawn in place on a terminal, a line every `every_s`
    otherwise (a log), and a last line when it is done."""

    def __init__(self, stream=None, after_s: float = 1.0, every_s: float = 1.0):
        self.stream = stream or sys.stderr
        self.after_s, self.every_s = after_s, every_s
        self.began: dict[str, float] = {}
        self.shown_at = 0.0
        self.open_line = False  # a terminal line drawn without its newline yet

    def __call__(self, folder, done: int, total: int) -> None:
        now = time.monotonic()
        began = self.began.setdefault(str(folder), now)
        finished = done >= total
        if now - began < self.after_s or (not finished and now - self.shown_at < self.every_s):
            return
        self.shown_at = now
        percent = 100 if not total else min(100, done * 100 // total)
        line = (
            f"hermes-rl: building the metrics digest of run {Path(folder).name}: {percent}% of "
            f"{total / 1e6:,.0f} MB, {now - began:.0f} s"
        )
        tty = self.stream.isatty()
        self.stream.write(("\r\x1b[K" + line if tty else line + "\n") + ("\n" if tty and finished else ""))
        self.stream.flush()
        self.open_line = tty and not finished
        if finished:
            del self.began[str(folder)]

    def close(self) -> None:
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False
