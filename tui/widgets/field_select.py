"""Textual's Select, safe to remove while it mounts."""

from __future__ import annotations

from textual import events
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Select


class FieldSelect(Select):
    """A Select for a config form field. Textual's Select sets itself up in its mount handler from its own
    children; one removed while it mounts (the form rebuilt, the dashboard quit meanwhile) has none left, and
    the NoMatches it raised ended the dashboard with a traceback."""

    def _on_mount(self, event: events.Mount) -> None:
        event.prevent_default()  # Select's and Widget's handlers run here instead, Select's guarded
        Widget._on_mount(self, event)
        try:
            super()._on_mount(event)
        except NoMatches:
            pass  # removed while mounting: nothing left to set up
