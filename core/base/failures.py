"""Why a Python process failed, in one line: the last exception of its output, plus what to do about
the failures users meet most (a missing package, a dataset that cannot be loaded offline).

One reading for every client: the supervisor's run reason, the config probe, the test-inference runner.
"""

from __future__ import annotations

import re

from .extras import extra_providing, install_command

# `ValueError: bad`, `datasets.exceptions.DatasetNotFoundError: ...`, `KeyboardInterrupt`: the line Python
# prints last for an uncaught exception (traceback frames are indented, so they never match).
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|NotFound\w*))(?::\s?(.*))?$")
# What Python prints for an exception it could not raise (in __del__, a callback at exit): noise after
# the real failure (an event loop that EMFILE stopped half-built fails again as it is collected).
_IGNORED = "Exception ignored"
# A logged error, for a process that reports its fatal error through logging and exits without a
# traceback (uvicorn: `ERROR:    [Errno 98] ... address already in use`; our trainer and tinker-local:
# `2026-01-01 10:00:00,123 ERROR trainer: config rejected: ...`): an optional timestamp, the level.
_ERROR_LOG_LINE = re.compile(r"^(?:\[?\d[\d\-/:.,T ]*\]?\s+)?\[?(?:ERROR|CRITICAL|FATAL)\]?(?::\s*|\s+)(\S.*)$")
_ERROR_LOG_WINDOW = 20  # a fatal log line is among the last lines a process prints
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")
_MISSING_NAME = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_HUB_UNREACHABLE = re.compile(r"Couldn't reach '([^']+)' on the Hub \((\w+)\)")
# Import names whose distribution on PyPI is called something else.
_DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "PIL": "pillow",
    "bs4": "beautifulsoup4",
    "dotenv": "python-dotenv",
    "google.protobuf": "protobuf",
    "Levenshtein": "python-Levenshtein",
    "latex2sympy2_extended": "latex2sympy2-extended",
    "math_verify": "math-verify",
    "atroposlib": "atroposlib",
    "langdetect": "langdetect",
}
# Raised the same way on every attempt: restarting the process cannot help.
DETERMINISTIC = frozenset({"ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError"})
# A worker's own verdict that it cannot go on, after it was ready too: the verifiers bridge's (a taskset that
# cannot train here; episodes that failed group after group, each failure counted in its log).
ENDS_A_WORKER = frozenset({"VerifiersRefusedError", "VerifiersTasksetError"})


def exception_line(text: str) -> str | None:
    """The last uncaught-exception line in a process's output (`ModuleNotFoundError: No module named 'x'`);
    the exception of an "Exception ignored in ..." report never counts."""
    found, ignoring = None, False
    for raw in text.splitlines()[-400:]:
        line = raw.rstrip()
        if not line or line[0].isspace():
            continue
        if line.startswith(_IGNORED):
            ignoring = True
        elif ignoring:
            # The report is its first line, a traceback (indented frames) and one unindented last line.
            ignoring = line.startswith("Traceback (most recent call last)")
        elif _EXCEPTION_LINE.match(line):
            found = line[:300]
    return found


def error_log_line(text: str) -> str | None:
    """The message of the last error-level log line near the end of a process's output, or None."""
    lines = [ln.rstrip() for ln in text.splitlines()[-400:] if ln.strip()]
    for line in reversed(lines[-_ERROR_LOG_WINDOW:]):
        match = _ERROR_LOG_LINE.match(line)
        if match:
            return " ".join(match.group(1).split())[:300]
    return None


def failure_line(text: str) -> str | None:
    """Why a process that exited by itself failed: its last exception line, else its last logged error."""
    return exception_line(text) or error_log_line(text)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def last_line(text: str) -> str | None:
    """The line a process printed last (colour codes removed) when it reads as a message: a process that
    reports its failure in plain words (`cannot prepare smollm2: ...`) and exits non-zero says it there.
    None for an indented line or a traceback's header (part of something else)."""
    lines = [raw for raw in text.splitlines()[-50:] if raw.strip()]
    if not lines or lines[-1][:1].isspace():
        return None
    line = " ".join(_ANSI.sub("", lines[-1]).split())
    return None if not line or line.startswith("Traceback (most recent call last)") else line[:300]


def exit_failure_line(text: str) -> str | None:
    """Why a process that exited non-zero by itself failed: failure_line, else its last line."""
    return failure_line(text) or last_line(text)


def exception_type(line: str | None) -> str:
    return (line or "").split(":", 1)[0].rsplit(".", 1)[-1]


def repeats_on_restart(line: str | None) -> bool:
    """A failure a restart cannot change: an import that fails, a dataset the hub may not be asked for."""
    if exception_type(line) in DETERMINISTIC:
        return True
    hub = _HUB_UNREACHABLE.search(line or "")
    return hub is not None and hub.group(2) == "OfflineModeIsEnabled"


def failure_hint(line: str | None) -> str | None:
    """What to do about a known failure, in words; None when nothing useful can be said."""
    if not line:
        return None
    missing = _MISSING_MODULE.search(line)
    if missing:
        module = missing.group(1)
        top = module.split(".")[0]
        if top == "atroposlib" and "." in module:
            return _atroposlib_mismatch(f"module {module}")
        if top in ("environments", "tinker_atropos") or "." in module and top not in _DISTRIBUTIONS:
            return (
                f"{module} is not importable from the environment's import root; check the import_root "
                f"`hermes-rl envs --json` shows for it (a checkout's root must contain {top}/)"
            )
        extra = extra_providing(top)
        if extra:
            return f"{top} comes with hermes-rl's {extra} extra: {install_command(extra)}"
        known = _DISTRIBUTIONS.get(module) or _DISTRIBUTIONS.get(top)
        if known:
            return f"install the package that provides {top}: pip install {known}"
        guess = top.replace("_", "-")
        return f"install the package that provides {top} (on PyPI often the same name: pip install {guess})"
    name = _MISSING_NAME.search(line)
    if name and name.group(2).split(".")[0] == "atroposlib":
        return _atroposlib_mismatch(f"{name.group(1)} (from {name.group(2)})")
    hub = _HUB_UNREACHABLE.search(line)
    if hub:
        dataset, why = hub.groups()
        offline = why == "OfflineModeIsEnabled"
        cause = "HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set" if offline else "the hub is unreachable"
        return (
            f"dataset {dataset!r} cannot be loaded offline ({cause}) and is not in the local cache; "
            "download it once where the hub is reachable (it is cached under HF_HOME), or point the "
            "environment at a local copy"
        )
    return None


def _atroposlib_mismatch(what: str) -> str:
    """atroposlib is archived: its last release is the one installed, so `pip install` cannot add a name."""
    from importlib import metadata  # noqa: PLC0415 - stdlib; only paid when this hint is given

    try:
        version = metadata.version("atroposlib")
    except metadata.PackageNotFoundError:
        return f"atroposlib is not installed: it comes with hermes-rl's train extra: {install_command('train')}"
    return (
        f"{what} is not in the installed atroposlib {version}: the environment needs a different atroposlib "
        f"than the installed {version} (Atropos is archived; {version} is its last release), or a change to "
        "its imports"
    )


def describe_failure(text: str) -> str | None:
    """`<exception line>` (or logged error) plus its hint (`; install ...`), or None when the output holds
    neither."""
    line = failure_line(text)
    if line is None:
        return None
    hint = failure_hint(line)
    return f"{line} ({hint})" if hint else line


# -- problems a running process logs (the health monitor counts them, core.runs.flow words them) --------

# A logged warning or error, in the formats processes of a run use: logging's default (`ERROR:root:msg`),
# `2026-01-01 10:00:00,123 - atroposlib.envs.base - WARNING - msg`, ours (`2026-01-01 10:00:00,123 ERROR
# trainer: msg`), uvicorn's (`ERROR:    msg`), bracketed levels (`[ERROR] msg`).
_PROBLEM_LINE = re.compile(
    r"^(?:\[?\d[\d\-/:.,T ]*\]?\s*(?:[-|]\s*)?)?(?:[\w.<>]+\s+[-|]\s+)?"
    r"\[?(?P<level>ERROR|WARNING|WARN|CRITICAL|FATAL)\]?"
    r"(?:\s*[-:|]\s*|\s+)(?:(?P<logger>[\w.<>]+):(?=\S))?(?P<message>\S.*)$"
)
# Without a logging configuration Python prints a warning or error bare (logging's last-resort handler):
# the messages atroposlib's BaseEnv logs per item are known by their words.
_BARE_PROBLEM = re.compile(r"^(?:Error\b|Failed\b|Scoring exception|Scores are the same|Token length is too long)")
_DIGITS = re.compile(r"\d+")
# Logged at warning level but routine: the tinker SDK's long poll of a request that is still running.
_ROUTINE = re.compile(r"Retrying request .* because of try_again$")
PROBLEM_LEVELS = ("error", "warning")


def logged_problem(line: str) -> tuple[str, str] | None:
    """(`error` | `warning`, message) of a log line that reports a problem, else None. An uncaught
    exception's last line (`ValueError: bad`) is an error too."""
    text = line.strip()
    if not text or line[:1].isspace():
        return None
    match = _PROBLEM_LINE.match(text)
    if match:
        level = "warning" if match.group("level").startswith("WARN") else "error"
        message = " ".join(match.group("message").split())
        if message.startswith(("- ", ": ")):
            message = message[2:]
        if _ROUTINE.search(message):
            return None
        return level, message[:300]
    if _EXCEPTION_LINE.match(text) and not text.startswith(_IGNORED):
        return "error", text[:300]
    if _BARE_PROBLEM.match(text):
        return ("warning" if text.startswith(("Scores", "Token")) else "error"), " ".join(text.split())[:300]
    return None


def problem_key(message: str) -> str:
    """Messages that differ only in numbers (a token count, a port, an item id) are one problem."""
    return _DIGITS.sub("#", message)[:160]


_CONTEXT_ERROR = re.compile(r"prompt has (\d+) tokens; the model's context is (\d+)")
_PROBLEM_TIPS = (
    (
        re.compile(r"Scores are the same in a group"),
        "every completion of a group got the same score, so the group carries no signal for GRPO and "
        "atroposlib drops it: check the environment's reward (are all answers marked right, or all wrong?), "
        "or set ensure_scores_are_not_same=false to send such groups anyway",
    ),
    (
        re.compile(r"Token length is too long"),
        "groups are longer than max_token_length and are dropped: shorten the prompts or raise max_token_length",
    ),
    (
        # located by the environment's worker (dataplane/env_launch.py): `Error in STEP at FILE:LINE: TYPE: …`
        re.compile(
            r"Error in (?:collect_trajectories|postprocess_histories)(?: \(×\d+ since the last line\))? at \S+:\d+"
        ),
        "the environment raises while it makes or scores items, at the file and line the message names: its log "
        "holds the first such error's traceback (hermes-rl logs RUN --process PROCESS); fix the environment and "
        "start a new run",
    ),
    (
        re.compile(r"Error in collect_trajectories|Error in scoring|Scoring exception"),
        "the environment raises while it makes or scores items; its log holds the message only, without a file "
        "or line (hermes-rl logs RUN --process PROCESS); fix the environment and start a new run",
    ),
    (
        re.compile(r"Failed to send .* after retries|Error registering env"),
        "the environment cannot deliver to run-api: read run-api's log (hermes-rl logs RUN --process api)",
    ),
    (
        re.compile(r"deprecated|has no attribute|not found|No such file", re.IGNORECASE),
        "the environment uses something its installed packages do not provide: read its log "
        "(hermes-rl logs RUN --process PROCESS) and pin or change what it loads",
    ),
)


def context_overflow(message: str) -> tuple[int, int] | None:
    """(prompt tokens, context tokens) of a model's "the prompt has N tokens; the model's context is M"."""
    found = _CONTEXT_ERROR.search(message)
    return (int(found.group(1)), int(found.group(2))) if found else None


def problem_tip(message: str, *, process: str = "env", run_id: str = "RUN") -> str:
    """What to do about a problem a process keeps logging, in words (commands filled for this run)."""
    context = _CONTEXT_ERROR.search(message)
    if context:
        prompt, limit = context.groups()
        return (
            f"prompts of {prompt} tokens do not fit the model's context of {limit} tokens: shorten the "
            f"environment's prompts (or its max_token_length) below {limit}, or use a profile whose model "
            "has a longer context"
        )
    for pattern, tip in _PROBLEM_TIPS:
        if pattern.search(message):
            return tip.replace("RUN", run_id).replace("PROCESS", process)
    return f"read its log: hermes-rl logs {run_id} --process {process}"
