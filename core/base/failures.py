"""Why a Python process failed, in one line: the last exception of its output, plus what to do about
the failures users meet most (a missing package, a dataset that cannot be loaded offline).

One reading for every client: the supervisor's run reason, the config probe, the test-inference runner.
"""

from __future__ import annotations

import re

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


def exception_type(line: str | None) -> str:
    return (line or "").split(":", 1)[0].rsplit(".", 1)[-1]


def repeats_on_restart(line: str | None) -> bool:
    """A failure a restart cannot change: an import that fails, a dataset the hub may not be asked for."""
    if exception_type(line) in DETERMINISTIC:
        return True
    hub = _HUB_UNREACHABLE.search(line or "")
    return bool(hub) and hub.group(2) == "OfflineModeIsEnabled"


def failure_hint(line: str | None) -> str | None:
    """What to do about a known failure, in words; None when nothing useful can be said."""
    if not line:
        return None
    missing = _MISSING_MODULE.search(line)
    if missing:
        module = missing.group(1)
        top = module.split(".")[0]
        if top in ("environments", "tinker_atropos") or "." in module and top not in _DISTRIBUTIONS:
            return (
                f"{module} is not importable from the environment's import root; check the import root "
                f"`hermes-rl envs` shows (a checkout's root must contain {top}/)"
            )
        known = _DISTRIBUTIONS.get(module) or _DISTRIBUTIONS.get(top)
        if known:
            return f"install the package that provides {top}: pip install {known}"
        guess = top.replace("_", "-")
        return f"install the package that provides {top} (on PyPI often the same name: pip install {guess})"
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


def describe_failure(text: str) -> str | None:
    """`<exception line>` (or logged error) plus its hint (`; install ...`), or None when the output holds
    neither."""
    line = failure_line(text)
    if line is None:
        return None
    hint = failure_hint(line)
    return f"{line} ({hint})" if hint else line
