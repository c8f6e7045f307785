"""Widgets the panes share: the navigable table, the filter box, the header bar and the dialogs."""
