"""The trainer process: `python -m dataplane.trainer --config CONFIG_YAML` (see loop.py)."""
