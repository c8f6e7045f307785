"""The trainer process: `python -m hermes_rl.dataplane.trainer --config CONFIG_YAML` (see loop.py)."""
