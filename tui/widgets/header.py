"""Header bar: profile, which keys are set (never their values), selection, stall warning, clock."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from hermes_rl.core.base.formatting import cell_duration
from hermes_rl.core.base.secrets import SECRET_NAMES

SHORT = {"TINKER_API_KEY": "TINKER", "WANDB_API_KEY": "WANDB", "OPENROUTER_API_KEY": "OPENROUTER"}


class HeaderBar(Static):
    def __init__(self, clock, **kwargs):
        super().__init__("", **kwargs)
        self.clock = clock
        self.profile: str | None = None
        self.profile_note: str | None = None
        self.keys: dict[str, bool] = {}
        self.environment: str | None = None
        self.run_line: str | None = None
        self.stalled: list[str] = []
        self.unhealthy: list[tuple[str, str]] = []  # (run id, why work does not flow), core.runs' health rule
        self.stall_after_s = 0.0  # core.runs' threshold, from the live worker
        self._shown: Text | None = None

    def on_mount(self) -> None:
        self.update_text()

    def update_text(self) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" hermes-rl ", style="bold reverse")
        text.append("  profile ", style="dim")
        text.append(self.profile or "?", style="bold cyan")
        if self.environment or not self.run_line:  # with none selected, the run's segment names its env
            text.append("  env ", style="dim")
            text.append(self.environment or "none selected", style="bold" if self.environment else "dim")
        if self.run_line:
            text.append("  run ", style="dim")
            text.append(self.run_line)
        if self.stalled:
            text.append(
                f"  ⚠ stalled (no metric or log line for {_threshold(self.stall_after_s)}): {', '.join(self.stalled)} ",
                style="bold black on dark_orange",
            )
        if self.unhealthy:
            run_id, reason = self.unhealthy[0]
            more = f" (+{len(self.unhealthy) - 1} more)" if len(self.unhealthy) > 1 else ""
            text.append(f"  ⚠ {run_id} {reason}{more} ", style="bold black on dark_orange")
        # The keys after what is selected: a narrow terminal cuts them first, not the run's name.
        text.append("  keys ", style="dim")
        for name in SECRET_NAMES:
            present = self.keys.get(name, False)
            text.append(f"{SHORT.get(name, name)}{'✓' if present else '✗'} ", style="green" if present else "grey50")
        text.append("  " + time.strftime("%H:%M UTC", time.gmtime(self.clock())), style="dim")
        if text != self._shown:  # an unchanged header costs nothing
            self._shown = text
            self.update(text, layout=False)  # one fixed line: no relayout


def _threshold(seconds: float) -> str:
    return f"{seconds:g}s" if seconds < 60 else cell_duration(seconds)
