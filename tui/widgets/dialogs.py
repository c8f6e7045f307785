"""Modal dialogs: confirmation and the help screen (generated from the live bindings)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Footer, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, detail: str = "", *, more=None, more_waiting: str = ""):
        """`more`: a slow text (the start dialog's cost estimate) computed in a thread once shown; until
        then `more_waiting` stands in its place. The answer never waits for it."""
        super().__init__()
        self.question = question
        self.detail = detail
        self.more = more
        self.more_waiting = more_waiting

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(Text(self.question, style="bold"), id="confirm-question")
            if self.detail:
                yield Static(Text(self.detail, style="dim"))
            if self.more is not None:
                yield Static(Text(self.more_waiting, style="dim italic"), id="confirm-more")
            yield Static(Text.from_markup("[b]y[/b]/enter: yes    [b]n[/b]/esc: no"), id="confirm-keys")

    def on_mount(self) -> None:
        if self.more is not None:
            self._fill_more()

    @work(thread=True, exit_on_error=False)
    def _fill_more(self) -> None:
        try:
            text = Text(self.more())
        except Exception as exc:  # a bad draft or price file: said here, the answer is still the user's
            text = Text(f"no estimate: {exc}", style="orange1")
        self.app.call_from_thread(self._show_more, text)

    def _show_more(self, text: Text) -> None:
        if self.is_attached:
            self.query_one("#confirm-more", Static).update(text)

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


SHARED_AREA = "lists (every pane)"  # bindings a widget inherits from a shared base (moving in any list)


def _area(node, app) -> str:
    """What a user calls where a binding works: the whole dashboard, a pane by its title, or the screen."""
    if node is app:
        return "everywhere"
    if getattr(node, "HELP_AREA", None):
        return node.HELP_AREA
    for ancestor in (node, *node.ancestors):
        title = getattr(ancestor, "border_title", None)
        if title:
            return str(title)
    if node is app.screen:
        return "this screen" if app.screen is not app.screen_stack[0] else "dashboard"
    return "this screen"


def screen_bindings(app: App, screen: Screen | None = None) -> list[tuple[App | Widget, str, Binding]]:
    """(node, area, binding) for every binding with an id of the app and the widgets on `screen` (default:
    the screen shown), each id once, grouped by area in the order the areas are first met."""
    screen = screen if screen is not None else app.screen
    found: list[tuple[App | Widget, str, Binding]] = []
    seen_ids: set[str] = set()
    seen_classes: set[type] = set()
    nodes: list[App | Widget] = [app, screen, *screen.walk_children(Widget)]
    for node in nodes:
        cls = type(node)
        if cls in seen_classes:
            continue
        seen_classes.add(cls)
        bindings: list[tuple[str, Binding]] = []
        for klass in reversed(cls.__mro__):
            if "BINDINGS" in klass.__dict__ and klass.__module__.startswith("hermes_rl.tui"):
                area = _area(node, app) if klass is cls or node is app else SHARED_AREA
                bindings.extend((area, b) for b in Binding.make_bindings(klass.__dict__["BINDINGS"]))
        for area, binding in bindings:
            if not binding.id or binding.id in seen_ids:
                continue
            seen_ids.add(binding.id)
            if binding.id.startswith("nav."):  # moving in a list works the same in every pane
                area = SHARED_AREA
            found.append((node, area, binding))
    order = list(dict.fromkeys(area for _, area, _ in found))
    return sorted(found, key=lambda row: order.index(row[1]))


def key_text(app, binding: Binding) -> str:
    """The keys of a binding as the footer shows them, keymap applied."""
    keys = (getattr(app, "_keymap", {}) or {}).get(binding.id, binding.key)
    return ", ".join(app.get_key_display(Binding(key.strip(), binding.action)) for key in keys.split(","))


def binding_rows(app) -> list[tuple[str, str, str, str]]:
    """(area, keys, description, id) for every binding of the app and the widgets on screen, keymap applied,
    grouped by area (in the order the areas are first met)."""
    return [
        (area, key_text(app, binding), binding.description or binding.action, str(binding.id))
        for _node, area, binding in screen_bindings(app)
    ]


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str, str]], keymap_note: str):
        super().__init__()
        self.rows = rows
        self.keymap_note = keymap_note

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, header_style="bold", pad_edge=False)
        table.add_column("area", style="cyan")
        table.add_column("keys", style="bold")
        table.add_column("does")
        table.add_column("binding id (keymap)", style="dim")
        last_area = None
        for area, keys, description, binding_id in self.rows:
            table.add_row(area if area != last_area else "", keys, description, binding_id)
            last_area = area
        with VerticalScroll(id="help-box"):
            yield Static(Text("Keys", style="bold"))
            yield Static(table)
            yield Static(Text(self.keymap_note, style="dim"))
        # Its own footer (how to close it): the dashboard's, seen through the modal, changes with focus.
        yield Footer()
