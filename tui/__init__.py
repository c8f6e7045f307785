"""hermes-rl dashboard: a Textual app over `core` (it never owns a run; quitting leaves runs going)."""
