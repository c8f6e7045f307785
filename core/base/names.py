"""Names and numbers from users, files and environments are checked whole, in one way.

`re.match` with a pattern ending in `$` accepts a trailing newline ("abc\n" matches `^[a-z]+$`), and
`int()` and `str.isdigit()` accept any script's digits ("٣" is 3): both let a value through that then
lands in file names, run.json and command lines. Every name check and every number parsed from text
goes through here."""

from __future__ import annotations

import re


def is_name(pattern: re.Pattern[str], value: object) -> bool:
    """Whether `value` is a string that `pattern` matches from its first character to its last."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def is_ascii_digits(text: object) -> bool:
    """Whether `text` is one or more ASCII digits and nothing else (no sign, space or other script)."""
    return isinstance(text, str) and text.isascii() and text.isdigit()


def ascii_int(text: str) -> int:
    """An int written in ASCII digits (an optional sign, surrounding spaces allowed); ValueError otherwise.
    Usable as argparse's `type=`."""
    if not isinstance(text, str) or not _ASCII_INT.fullmatch(text.strip()):
        raise ValueError(f"not a whole number in ASCII digits: {text!r}"[:100])
    return int(text.strip())


def ascii_float(text: str) -> float:
    """A float written in ASCII digits (no `nan`/`inf`, no other script); ValueError otherwise."""
    if not isinstance(text, str) or not _ASCII_FLOAT.fullmatch(text.strip()):
        raise ValueError(f"not a number in ASCII digits: {text!r}"[:100])
    return float(text.strip())


ascii_int.__name__ = "int"  # argparse names the type in its error: "invalid int value: '٣'"
ascii_float.__name__ = "float"
