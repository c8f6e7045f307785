"""Environments: discovery, profiles, config probing, editable fields, drafts and the selection."""
