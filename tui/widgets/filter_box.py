"""The filter line above a list or table (environments, runs): `/` opens it, rows filter as you type."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Input


class FilterBox(Input):
    """Hidden until `open()`. Enter or esc hand focus back to the rows; esc on an empty box also hides it."""

    class Changed(Input.Changed):
        """The filter text changed: posted on every keystroke (the pane shows the matching rows)."""

        @property
        def control(self) -> FilterBox:
            """The box (Input posts its change as `self.Changed`, so a FilterBox posts this class)."""
            assert isinstance(self.input, FilterBox)
            return self.input

    class Left(Message):
        """The user is done filtering (enter or esc): the pane puts focus back on its rows."""

    def __init__(self, placeholder: str, **kwargs):
        super().__init__(placeholder=placeholder, classes="hidden", **kwargs)

    @property
    def text(self) -> str:
        return self.value.strip()

    def open(self) -> None:
        self.remove_class("hidden")
        self.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Left())

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            if not self.value:
                self.add_class("hidden")
            self.post_message(self.Left())
