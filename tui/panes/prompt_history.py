"""The same prompt across training (p on a completion in the rollouts view): that prompt's group at every
step it was sampled, oldest first, with rewards and advantages; z keeps the groups that scored alike,
[ and ] page through steps (core.readers.prompt_history reads a page, never the whole file)."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from .. import backend
from ..format import number, safe
from ..widgets.rowlist import RowList

PAGE = 20  # groups a page
TEXT_CELL = 160
COLUMNS = [
    ("step", "step", 6),
    ("reward", "reward", 7),
    ("adv", "adv", 7),
    ("finish", "finish", 6),
    ("completion", "text", None),
]


def _line(text: str) -> str:
    shown = safe(str(text).replace("\n", "⏎"))
    return shown if len(shown) <= TEXT_CELL else shown[: TEXT_CELL - 1] + "…"


def history_rows(out: dict) -> list[tuple[str, list]]:
    """A bold line per group (step, mean reward, alike or not), then its completions, best first."""
    by_group: dict[tuple, list[dict]] = {}
    for row in out["rows"]:
        by_group.setdefault((row["step"], row["group"]), []).append(row)
    rows: list[tuple[str, list]] = []
    for index, group in enumerate(out["groups"]):
        alike = " · all scored alike (no signal)" if group["zero_variance"] else ""
        head = Text(f"mean {number(group['reward_mean'], 3)}{alike}", style="bold yellow" if alike else "bold")
        rows.append((f"g{index}", [str(group["step"]), "", "", "", head]))
        items = sorted(by_group.get((group["step"], group["group"]), []), key=lambda r: -(r["reward"] or 0.0))
        for rank, item in enumerate(items):
            rows.append(
                (
                    f"g{index}.{rank}",
                    [
                        "",
                        number(item["reward"], 3),
                        number(item["advantage"], 3),
                        safe(item["finish"]) or "—",
                        _line(item["completion"]),
                    ],
                )
            )
    return rows


class PromptHistoryScreen(ModalScreen):
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close", id="prompt.close"),
        Binding("z", "zero_variance", "Alike only", id="prompt.alike"),
        Binding("right_square_bracket", "page(1)", "Next steps", id="prompt.next"),
        Binding("left_square_bracket", "page(-1)", "Prev steps", id="prompt.prev"),
    ]

    def __init__(self, run_id: str, prompt: str):
        super().__init__()
        self.run_id, self.prompt = run_id, prompt
        self.page_offset, self.zero_variance = 0, False
        self.out: dict | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="rollouts-box"):
            yield Static("", id="prompt-title")
            yield RowList(COLUMNS, scrolls=True, max_auto_width=TEXT_CELL, id="prompt-rows")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="prompt-history", exit_on_error=False, description="cannot read")
    def load(self) -> None:
        out = backend.prompt_history(
            self.run_id, self.prompt, offset=self.page_offset, limit=PAGE, zero_variance=self.zero_variance
        )
        self.app.call_from_thread(self.show, out)

    def show(self, out: dict) -> None:
        self.out = out
        shown = f"{out['offset'] + 1}–{out['offset'] + len(out['groups'])} of " if out["groups"] else ""
        self.query_one("#prompt-title", Static).update(
            Text.assemble(
                ("Same prompt", "bold"),
                f" · run {self.run_id} · {shown}{out['matches']} group(s) over {out['steps']} step(s)"
                + (" · alike only (z)" if self.zero_variance else "")
                + f" · prompt: {_line(self.prompt)}",
            )
        )
        self.query_one(RowList).replace_rows(history_rows(out))

    def action_zero_variance(self) -> None:
        self.zero_variance, self.page_offset = not self.zero_variance, 0
        self.load()

    def action_page(self, delta: int) -> None:
        if self.out is None:
            return
        offset = self.page_offset + delta * PAGE
        if 0 <= offset < max(1, self.out["matches"]):
            self.page_offset = offset
            self.load()
