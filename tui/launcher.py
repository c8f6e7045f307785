"""`hermes-rl`: the CLI with the dashboard wired in (core's CLI never imports Textual)."""

from __future__ import annotations

import sys

from hermes_rl.core.clients.cli import main as cli_main


def open_dashboard(run_id: str | None) -> None:
    from .app import run_dashboard  # Textual loads only when the dashboard opens: not for `--help` or a command

    run_dashboard(run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    return cli_main(argv, open_dashboard=open_dashboard)


if __name__ == "__main__":
    sys.exit(main())
