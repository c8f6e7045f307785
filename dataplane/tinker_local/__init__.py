"""A local server speaking the Tinker protocol over a tiny locally built model (see __main__ for the CLI)."""
