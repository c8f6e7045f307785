"""Long-lived processes of a run: the supervisor, its watchdog, and the process helpers they share."""
