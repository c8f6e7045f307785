"""Entry point: python -m hermes_rl.dataplane.trainer --config RUN_DIR/config.yaml"""

from __future__ import annotations

import argparse

from .loop import main as run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_rl.dataplane.trainer", description="hermes-rl GRPO trainer (tinker SDK)"
    )
    parser.add_argument(
        "--config", required=True, help="the run's config.yaml (env / openai / tinker / backend / hermes)"
    )
    args = parser.parse_args(argv)

    return run(args.config)


if __name__ == "__main__":
    from .. import exit_now

    exit_now(main())
