"""Readers of a run's files: logs and metrics, lazily and incrementally."""
