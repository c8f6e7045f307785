"""hermes-rl core: headless library shared by the dashboard, the agent tools and the CLI.

Never imports Textual, torch, transformers or atroposlib (enforced by import-linter contracts
in pyproject.toml and by tests/test_import_hygiene.py).
"""

__version__ = "0.1.0"
