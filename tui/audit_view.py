"""The audit (is it learning, and if not why: core.base.audit_rule) as the dashboard shows it: a coloured
verdict cell for the runs list, the highlighted run's verdict and first reason under it, and a two-line
health panel above the metrics."""

from __future__ import annotations

from rich.text import Text

from hermes_rl.core.base.audit_rule import signal_summary

VERDICT_STYLE = {
    "learning": "green",
    "flat": "yellow",
    "no_signal": "bold red",
    "suspect": "bold orange1",
    "unknown": "dim",
}


def verdict_cell(audit: dict | None) -> Text:
    verdict = (audit or {}).get("verdict") or "unknown"
    return Text(verdict.replace("_", " "), style=VERDICT_STYLE.get(verdict, ""))


def reason_line(audit: dict | None) -> Text | None:
    """The runs list's line under the table for a run that is not learning: `audit no signal: <reason>`."""
    audit = audit or {}
    reason = audit.get("reason") or (audit.get("reasons") or [None])[0]
    if audit.get("verdict") not in ("no_signal", "suspect", "flat") or not reason:
        return None
    text = Text("audit ", style="bold")
    text.append(f"{audit['verdict'].replace('_', ' ')}: ", style=VERDICT_STYLE[audit["verdict"]])
    text.append(str(reason))
    return text


def panel(audit: dict | None) -> Text:
    """Above the metrics: the verdict and its first reason, then the signals in one line."""
    audit = audit or {}
    text = Text("audit ", style="bold")
    text.append_text(verdict_cell(audit))
    reasons = audit.get("reasons") or []
    if reasons:
        text.append(f"  {reasons[0]}")
    text.append(f"\n{signal_summary(audit.get('signals'))}", style="dim")
    return text
