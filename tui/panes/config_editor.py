"""[2] Config editor: the selected environment's editable fields as typed inputs.

Focus lands on the field list, never inside a field: up/down (j/k) move the current field (shown
highlighted), enter edits it, esc (or enter) leaves the input on the same field, so single-key
commands (digits, z, s, q) never become a value. Values are checked as you type with core.config's
own validator (the message shows under the field); ctrl+s saves the draft (all or nothing, via
core.config.set_fields) that every client shares.
Locked fields are shown dimmed with their value and why the profile locks them.
"""

from __future__ import annotations

import asyncio
import json

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch
from textual.worker import Worker, WorkerState

from hermes_rl.core.base.errors import HermesError
from hermes_rl.core.base.paths import hermes_home

from .. import backend
from ..format import error_line, set_subtitle
from ..widgets.field_select import FieldSelect


def shown_value(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def shown_locked(value) -> str:
    """Locked values are often paths under $HERMES_HOME (the local model): show them short."""
    return shown_value(value).replace(str(hermes_home()), "$HERMES_HOME")


class FieldList(VerticalScroll):
    """The form's scroller, focused between edits: up/down move between fields (instead of scrolling
    a line), enter edits the current one."""

    BINDINGS = [
        Binding("down", "next_field", "Next field", show=False, id="config.next"),
        Binding("up", "prev_field", "Prev field", show=False, id="config.prev"),
        Binding("j", "next_field", "Next field", show=False, id="nav.down"),
        Binding("k", "prev_field", "Prev field", show=False, id="nav.up"),
        Binding("enter", "edit", "Edit field", id="config.edit"),
    ]

    def action_next_field(self) -> None:
        self.query_ancestor(ConfigPane).action_next_field()

    def action_prev_field(self) -> None:
        self.query_ancestor(ConfigPane).action_prev_field()

    def action_edit(self) -> None:
        self.query_ancestor(ConfigPane).edit_current()


class ConfigPane(Vertical):
    BINDINGS = [
        Binding("ctrl+s", "save", "Save draft", id="config.save"),
        Binding("ctrl+z", "revert", "Revert edits", id="config.revert"),
        Binding("ctrl+d", "reset_draft", "Reset to defaults", show=False, id="config.reset"),
        Binding("escape", "leave_field", "Leave field", show=False, id="config.leave"),
    ]
    ALLOW_MAXIMIZE = True
    can_focus = True

    class Loaded(Message):
        """A config view is shown (after a load or a save): the app shows its profile in the header."""

        def __init__(self, view) -> None:
            super().__init__()
            self.view = view

    class SaveRequested(Message):
        """ctrl+s: save the pending edits as the draft."""

    class ResetRequested(Message):
        """ctrl+d: reset this environment's draft to the defaults."""

        def __init__(self, environment: str) -> None:
            super().__init__()
            self.environment = environment

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.border_title = "[2] Config"
        self.view = None  # core.config.ConfigView
        self.rows: list[dict] = []
        self.pending: dict[str, object] = {}  # edited, valid, not saved
        self.errors: dict[str, str] = {}  # field -> message
        self._generation = 0
        self._loading: str | None = None  # the environment the latest load is for
        self.cursor = 0  # the current field (index into rows)
        self._label_width = 0  # the longest label's
        # One rebuild of the fields at a time (a newer one wins; FieldSelect survives its removal mid-mount).
        self._fields_lock = asyncio.Lock()

    def compose(self) -> ComposeResult:
        yield Static("select an environment (enter in [1])", id="config-head")
        yield FieldList(id="config-fields")

    @property
    def environment(self) -> str | None:
        return self.view.environment if self.view is not None else None

    @property
    def profile(self) -> str | None:
        return self.view.profile if self.view is not None else None

    def show_unselected(self, default_env: str | None, profile: str | None) -> None:
        """Nothing selected: say what a run would use meanwhile (start_run falls back to the profile's
        default environment), so an empty form over a live run of that environment is not a puzzle."""
        head = Text("no environment selected", style="bold")
        if default_env:  # the pane is narrow: short lines
            head.append(f"\nruns use {default_env}", style="dim")
            head.append(f" ({profile} default)", style="dim")
        head.append("\nenter in [1] selects one", style="dim")
        self.query_one("#config-head", Static).update(head)

    def show_run(self, run_id: str, rows: list[tuple[str, object, bool]]) -> None:
        """No environment selected, a run selected: that run's resolved config, read-only (locked
        values dimmed with a lock), so the pane is not empty over a live run."""
        if self.view is not None:
            return  # an environment's form is shown: it wins
        head = Text(f"run {run_id} config (read-only)", style="bold")
        head.append("\nenter in [1] selects an environment to edit", style="dim")
        for key, value, locked in rows:
            head.append(f"\n{key.split('.', 1)[-1]} ", style="dim" if locked else "")
            head.append(shown_locked(value) if locked else shown_value(value), style="dim" if locked else "cyan")
            if locked:
                head.append(" 🔒", style="dim")
        if not rows:
            head.append("\n(no config.yaml in the run folder)", style="dim")
        self.query_one("#config-head", Static).update(head)

    def load(self, name: str) -> None:
        """Show the environment's config once core has it (config_init may take seconds: a worker)."""
        self._loading = name
        self.query_one("#config-head", Static).update(Text(f"loading {name} (config_init)…", style="dim"))
        self._load(name)

    @work(thread=True, exclusive=True, group="config", exit_on_error=False, description="cannot load the config")
    def _load(self, name: str):
        return backend.get_config(name)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A failed load shows in the pane, in place of the form (not as a toast)."""
        if event.worker.group != "config":
            return
        event.stop()
        if event.state is WorkerState.SUCCESS:
            self.show(event.worker.result)
            self.post_message(self.Loaded(event.worker.result))
        elif event.state is WorkerState.ERROR:
            self.show_error(self._loading or "", error_line(event.worker.error))

    def show_error(self, name: str, message: str) -> None:
        self.view = None
        self.rows = []
        self._generation += 1
        self.query_one("#config-head", Static).update(Text(f"{name}: {message}", style="red"))
        self._replace_fields([], self._generation)

    def show(self, view) -> None:
        """Rebuild the form for a ConfigView (after a load or a save)."""
        self.view = view
        self.rows = list(view.editable)
        self.pending.clear()
        self.errors.clear()
        self._generation += 1
        gen = self._generation
        self._render_head()
        widgets: list[Widget] = []
        self._label_width = max((len(self._label_text(row, unsaved=True)) for row in self.rows), default=0) + 1
        self.cursor = min(self.cursor, max(0, len(self.rows) - 1))
        for index, row in enumerate(self.rows):
            widgets.append(self._field_row(index, row, gen))
        if view.locked:
            head = Text("backend, locked by the profile", style="bold dim")
            if getattr(view, "locked_hint", ""):
                head.append(f"\n{shown_locked(view.locked_hint)}", style="dim")
            widgets.append(Static(head, classes="locked-head"))
            for row in view.locked:
                text = Text()
                text.append(f"🔒 {row['name']} = {shown_locked(row['value'])}", style="dim")
                text.append(f"  — {row['reason']}", style="dim italic")
                widgets.append(Static(text, classes="locked-row"))
        self._replace_fields(widgets, gen)

    @work(group="config-fields", exit_on_error=False)
    async def _replace_fields(self, widgets: list, gen: int) -> None:
        """The form's fields become `widgets`, once the previous rebuild is done; a newer rebuild wins."""
        async with self._fields_lock:
            if gen != self._generation:
                return
            box = self.query_one("#config-fields", FieldList)
            await box.remove_children()
            await box.mount_all(widgets)
        self.call_after_refresh(self._fit_labels)
        self.call_after_refresh(self._show_cursor)

    def _fit_labels(self) -> None:
        """Labels as wide as the longest (never into the value: a padded, cut column), at most 60 % of the pane."""
        width = self._label_width
        if self.content_region.width:
            width = min(width, max(12, self.content_region.width * 3 // 5))
        for label in self.query(".field-label"):
            label.styles.width = width

    def on_resize(self, _event) -> None:
        self._fit_labels()

    def _rows_shown(self) -> list:
        return list(self.query(".field-row"))

    def _show_cursor(self) -> None:
        for index, row in enumerate(self._rows_shown()):
            row.set_class(index == self.cursor, "-current")
            if index == self.cursor:
                row.scroll_visible(animate=False)

    def _field_row(self, index: int, row: dict, gen: int) -> Vertical:
        kind, value = row.get("type"), row.get("value")
        wid = f"field-{gen}-{index}"
        editor: Widget
        if kind == "bool":
            editor = Switch(value=bool(value), id=wid, classes="field-input")
        elif kind == "enum" and row.get("choices"):
            choices = row["choices"]
            editor = FieldSelect(
                [(str(c), c) for c in choices],
                value=value if value in choices else Select.BLANK,
                allow_blank=value not in choices,
                id=wid,
                compact=True,
                classes="field-input",
            )
        else:
            editor = Input(
                shown_value(value), id=wid, compact=True, classes="field-input", tooltip=row.get("description") or None
            )
        label = Label(self._label_text(row), classes="field-label")
        if self._label_width:
            label.styles.width = self._label_width
        note = Static(self._note_text(row), classes="field-note", id=f"note-{gen}-{index}")
        classes = "field-row" + (" modified" if row.get("modified") else "")
        line: list[Widget] = [label, editor]
        if kind == "bool":
            line.append(Label("true" if value else "false", classes="switch-value"))
        return Vertical(Horizontal(*line, classes="field-line"), note, classes=classes)

    def _label_text(self, row: dict, unsaved: bool = False) -> Text:
        text = Text()
        marker = "●" if unsaved else ("*" if row.get("modified") else " ")
        text.append(f"{marker} ", style="yellow" if unsaved or row.get("modified") else "")
        text.append(row["name"], style="bold yellow" if row.get("modified") else "")
        return text

    def _note_text(self, row: dict, error: str | None = None) -> Text:
        if error:
            return Text(f"✖ {error}", style="red")
        parts = [str(row.get("type") or "")] if row.get("type") else []  # the type here: labels stay short
        if row.get("group"):  # "training": a hyperparameter, the profile's default until changed here
            parts.insert(0, str(row["group"]))
        if row.get("modified"):
            parts.append(f"default {shown_value(row.get('default'))}")
        if row.get("description"):
            parts.append(row["description"])
        return Text(" · ".join(parts), style="dim")

    def _index_of(self, widget_id: str | None) -> int | None:
        if not widget_id or not widget_id.startswith("field-"):
            return None
        _, gen, index = widget_id.split("-")
        if int(gen) != self._generation:
            return None
        return int(index)

    def _edited(self, widget_id: str | None, raw) -> None:
        index = self._index_of(widget_id)
        if index is None:
            return
        row = self.rows[index]
        name = row["name"]
        note = self.query_one(f"#note-{self._generation}-{index}", Static)
        try:
            value = backend.validate_field(row, raw)
        except HermesError as exc:
            self.errors[name] = exc.message
            self.pending.pop(name, None)
            note.update(self._note_text(row, exc.message))
            return
        self.errors.pop(name, None)
        if value != row.get("value"):
            self.pending[name] = value
        else:
            self.pending.pop(name, None)
        note.update(self._note_text(row))
        label = note.query_ancestor(".field-row").query_one(".field-label", Label)
        label.update(self._label_text(row, unsaved=name in self.pending))
        self._update_subtitle()

    def _render_head(self) -> None:
        """Environment, profile and how many values differ from the defaults, unsaved edits counted."""
        view = self.view
        if view is None:
            return
        head = Text()
        head.append(view.environment, style="bold")
        head.append(f"  profile {view.profile}", style="cyan")
        changed = [
            r["name"]
            for r in self.rows
            if (self.pending[r["name"]] != r.get("default") if r["name"] in self.pending else r.get("modified"))
        ]
        unsaved = sum(1 for name in changed if name in self.pending)
        text = f"  {len(changed)} changed from defaults" if changed else "  all defaults"
        head.append(text + (f" ({unsaved} unsaved)" if unsaved else ""), style="dim")
        for line in ([view.notice] if view.notice else []) + list(view.warnings or []):
            head.append(f"\n⚠ {line}", style="yellow")
        self.query_one("#config-head", Static).update(head)

    def _update_subtitle(self) -> None:
        self._render_head()
        parts = []
        if self.pending:
            parts.append(f"{len(self.pending)} unsaved (ctrl+s)")
        if self.errors:
            parts.append(f"{len(self.errors)} invalid")
        set_subtitle(self, " · ".join(parts))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._edited(event.input.id, event.value)

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        for label in event.switch.query_ancestor(".field-line").query(".switch-value").results(Label):
            label.update("true" if event.value else "false")
        self._edited(event.switch.id, event.value)

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is not Select.BLANK:
            self._edited(event.select.id, event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_leave_field()

    def on_descendant_focus(self, event) -> None:
        """A field focused (enter, a click): it is the current field."""
        inputs = self._inputs()
        if event.widget in inputs and inputs.index(event.widget) != self.cursor:
            self.cursor = inputs.index(event.widget)
            self._show_cursor()

    # -- actions ------------------------------------------------------------------------------
    def _inputs(self) -> list:
        return list(self.query(".field-input"))

    def _move(self, delta: int) -> None:
        """The next or previous field becomes current; while editing, its input takes the edit."""
        inputs = self._inputs()
        if not inputs:
            return
        editing = self.screen.focused in inputs
        self.cursor = (self.cursor + delta) % len(inputs)
        self._show_cursor()
        if editing:
            inputs[self.cursor].focus()

    def action_next_field(self) -> None:
        self._move(1)

    def action_prev_field(self) -> None:
        self._move(-1)

    def focus_first(self) -> None:
        """Pane 2: the field list (the current field highlighted), not an input."""
        if self._inputs():
            self.query_one(FieldList).focus()
            self._show_cursor()
        else:
            self.focus()

    def edit_current(self) -> None:
        """enter on the list: edit the current field (a switch flips, a choice opens)."""
        inputs = self._inputs()
        if not inputs:
            return
        editor = inputs[min(self.cursor, len(inputs) - 1)]
        if isinstance(editor, Switch):
            editor.toggle()
        elif isinstance(editor, Select):
            editor.focus()
            editor.action_show_overlay()
        else:
            editor.focus()
            editor.action_end()

    def action_leave_field(self) -> None:
        """esc: out of the field, back on the list at the same field, so single-key commands (digits,
        s, z, q) work again."""
        if self._inputs():
            self.query_one(FieldList).focus()
            self._show_cursor()
        else:
            self.focus()

    def action_save(self) -> None:
        self.post_message(self.SaveRequested())

    def action_revert(self) -> None:
        if self.view is not None:
            self.show(self.view)

    def action_reset_draft(self) -> None:
        if self.view is not None:
            self.post_message(self.ResetRequested(self.view.environment))

    def unsaved(self) -> tuple[dict, dict]:
        return dict(self.pending), dict(self.errors)
