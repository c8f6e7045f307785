"""[1] Environments: what discovery found (project, user, tinker-atropos), with parse errors shown."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..format import safe, set_subtitle
from ..widgets.filter_box import FilterBox


def short_path(file: str) -> str:
    """folder/file.py: enough to find it; the full path is in the config pane and `hermes-rl envs`."""
    path = Path(file)
    return f"{path.parent.name}/{path.name}"


class EnvList(OptionList):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="nav.down"),
        Binding("k", "cursor_up", "Up", show=False, id="nav.up"),
        Binding("g", "first", "Top", show=False, id="nav.top"),
        Binding("G", "last", "Bottom", show=False, id="nav.bottom"),
    ]


class EnvironmentsPane(Vertical):
    ALLOW_MAXIMIZE = True

    class Selected(Message):
        """Enter on an environment that loads: the app makes it the current selection."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[1] Environments"
        self.environments: list = []
        self.filter_text = ""
        self.selected: str | None = None  # the current selection (current.yaml)
        self.running: set[str] = set()  # environments with an active run

    def compose(self) -> ComposeResult:
        yield FilterBox("filter environments", id="env-filter")
        yield EnvList(id="env-list")
        yield Static("", id="env-details")

    @property
    def option_list(self) -> EnvList:
        return self.query_one(EnvList)

    def show(self, environments: list, selected: str | None = None) -> None:
        self.environments = sorted(environments, key=lambda e: (e.error is not None, _key(e).lower()))
        if selected is not None:
            self.selected = selected
        self._render_list()

    def show_running(self, environments: set[str]) -> None:
        """Mark the environments that have an active run (the runs pane's starting/running ones)."""
        if environments != self.running:
            self.running = set(environments)
            self._render_list()

    def _visible(self) -> list:
        needle = self.filter_text.lower()
        if not needle:
            return self.environments
        return [
            e for e in self.environments if needle in f"{_key(e)} {e.class_name} {e.description} {e.source}".lower()
        ]

    def _render_list(self) -> None:
        options = self.option_list
        highlighted = options.highlighted_option.id if options.highlighted_option is not None else self.selected
        options.clear_options()
        visible = self._visible()
        for env in visible:
            label = Text(no_wrap=True, overflow="ellipsis")  # one line at any width, re-laid out or not
            key = _key(env)
            label.append("● " if key == self.selected else "  ", style="green")
            if key in self.running or env.name in self.running:
                label.append("▶ ", style="bold green")
            if env.error:
                label.append(safe(key), style="red")
                label.append(
                    "  cannot load" if getattr(env, "kind", "atropos") != "atropos" else "  parse error",
                    style="red dim",
                )
            else:
                running = key in self.running or env.name in self.running
                label.append(safe(key), style="bold green" if running else ("bold" if key == self.selected else ""))
                if running:
                    label.append(" running", style="green")
                label.append(f"  {safe(env.source)}", style="dim")
                if getattr(env, "abstract", None):
                    label.append("  base", style="yellow dim")
                if getattr(env, "refused", None):
                    label.append("  needs a sandbox", style="yellow dim")
            options.add_option(Option(label, id=key))
        target = next((i for i, e in enumerate(visible) if _key(e) == highlighted), 0)
        if visible:
            options.highlighted = target
        set_subtitle(
            self,
            f"{len(visible)}/{len(self.environments)}"
            + (f" · filter {self.filter_text!r}" if self.filter_text else ""),
        )
        self._show_details()

    def _highlighted_env(self):
        option = self.option_list.highlighted_option
        if option is None:
            return None
        return next((e for e in self.environments if option.id == _key(e)), None)

    def _show_details(self) -> None:
        env = self._highlighted_env()
        details = self.query_one("#env-details", Static)
        if env is None:
            details.update(Text("no environments found" if not self.environments else "no match", style="dim"))
            return
        text = Text()
        if env.error:
            text.append("cannot load: ", style="bold red")
            text.append(f"{safe(env.error)}\n", style="red")
            text.append(f"file: {safe(short_path(env.file))} ({safe(env.source)})", style="dim")
        else:
            text.append(safe(env.class_name), style="bold")
            if env.config_class:
                text.append(f"  config: {safe(env.config_class)}", style="dim")
            text.append("\n")
            if env.description:
                text.append("\n".join(safe(line) for line in env.description.splitlines()) + "\n")
            text.append(f"{safe(short_path(env.file))} ({safe(env.source)})", style="dim")
            if getattr(env, "kind", "atropos") != "atropos":
                text.append(f"\nkind: {safe(env.kind)} · interpreter: {safe(short_path(env.python))}", style="dim")
            if getattr(env, "refused", None):
                text.append(f"\ncannot train here: {safe(env.refused)}", style="yellow")
            if getattr(env, "abstract", None):
                text.append(f"\nbase class, not runnable: {safe(env.abstract)}", style="yellow")
            if getattr(env, "duplicate_of", None):
                text.append(
                    f"\nthe bare name {safe(repr(env.name))} selects {safe(short_path(env.duplicate_of))}",
                    style="yellow",
                )
        details.update(text)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        self._show_details()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        env = self._highlighted_env()
        if env is None:
            return
        if env.error:
            self.notify(f"{_key(env)} cannot be loaded: {env.error}", severity="error")
            return
        self.post_message(self.Selected(_key(env)))

    def start_filter(self) -> None:
        self.query_one(FilterBox).open()

    def on_filter_box_changed(self, event: FilterBox.Changed) -> None:
        event.stop()
        self.filter_text = event.control.text
        self._render_list()

    def on_filter_box_left(self, event: FilterBox.Left) -> None:
        event.stop()
        self.option_list.focus()


def _key(env) -> str:
    """An environment's unique id (its name, qualified when another one shares it)."""
    return getattr(env, "id", "") or env.name
