"""The `hermes-rl` command line: every command's arguments and help, in the order `--help` lists them.
Each command's handler lives with its group (environments, lifecycle, data, inference, sweeps, alerts,
front ends)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ...base.names import ascii_float, ascii_int
from ...runs.ordering import SORT_KEYS
from .alerts import ALERTS_EPILOG, cmd_alerts
from .cost import add_cost_arguments
from .data import cmd_compare, cmd_metrics, cmd_report, cmd_results, cmd_rollouts
from .environments import cmd_config, cmd_envs, cmd_profile, cmd_select, envs_help
from .frontends import cmd_dashboard, cmd_demo, cmd_mcp
from .inference import cmd_sample, cmd_test_inference
from .lifecycle import cmd_launchers, cmd_logs, cmd_resume, cmd_start, cmd_status, cmd_stop
from .runs_list import cmd_runs
from .sweeps import cmd_sweep

Add = Callable[..., argparse.ArgumentParser]  # build_parser's add(name, handler, help_text, epilog=None)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help says each option's default where it has one (not for flags off by default or values left unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or not action.option_strings
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-rl", description="RL runs on the Tinker-Atropos pipeline: dashboard, supervisor, agent tools."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Callable, help_text: str, epilog: str | None = None) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=epilog,
            formatter_class=_HelpFormatter,
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.set_defaults(handler=handler)
        return cmd

    _environment_commands(add)
    _run_commands(add)
    _data_commands(add)
    _profile_and_sweep_commands(add)
    _front_end_commands(add)
    _export_commands(add)
    return parser


def _environment_commands(add: Add) -> None:
    """envs, select, config."""
    cmd = add("envs", cmd_envs, "list discovered environments", epilog=envs_help())
    where = cmd.add_mutually_exclusive_group()
    where.add_argument(
        "--add-folder", metavar="DIR", help="save a folder of environments for every client ($HERMES_HOME/rl/envs.yaml)"
    )
    where.add_argument(
        "--add-python", metavar="PATH", help="save an interpreter holding verifiers tasksets for every client"
    )
    where.add_argument("--remove", metavar="PATH", help="forget a saved folder or interpreter")
    where.add_argument("--where", action="store_true", help="show where environments are looked for, and why")
    cmd = add("select", cmd_select, "select the environment (and profile) new runs use")
    cmd.add_argument("env")
    cmd.add_argument("--profile")
    cmd = add("config", cmd_config, "show or edit the selected environment's config draft")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd.add_argument("--refresh", action="store_true", help="probe the environment's config again (not cached)")


def _run_commands(add: Add) -> None:
    """start, resume, launchers, runs, status, logs, stop."""
    cmd = add("start", cmd_start, "start a run (default: the selected environment, local profile without a Tinker key)")
    cmd.add_argument("--env")
    cmd.add_argument("--profile")
    cmd.add_argument("--set", action="append", metavar="FIELD=VALUE")
    cmd.add_argument("--watch", action="store_true", help="show progress until the run ends (Ctrl-C detaches)")
    cmd.add_argument("--replicas", type=ascii_int, help="environment workers (default 1)")
    cmd.add_argument(
        "--env-launcher",
        help="where the workers run: local (default), slurm, or another launcher (`hermes-rl launchers`)",
    )
    cmd.add_argument("--address", help="address run-api and the inference server bind for the workers")
    cmd.add_argument("--slurm-partition")
    cmd.add_argument("--slurm-time", help="each worker's time limit (sbatch --time)")
    cmd.add_argument("--slurm-cpus", type=ascii_int, help="CPUs per worker (default 1)")
    cmd.add_argument("--slurm-mem", help="memory per worker (sbatch --mem: 2G)")
    cmd.add_argument("--sbatch-args", help="more sbatch options, as one string")
    cmd.add_argument(
        "--mix",
        action="append",
        metavar="ENV[:WEIGHT[:MIN_SHARE[:REPLICAS]]]",
        help="train another environment in the same batches (Atropos inference_weight / min_batch_allocation)",
    )
    cmd.add_argument("--weight", type=ascii_float, help="the main environment's weight in the batch mix (default 1)")
    cmd.add_argument("--min-batch-allocation", type=ascii_float, help="the main environment's least share of a batch")
    add_cost_arguments(cmd)
    cmd = add("resume", cmd_resume, "start a new run continuing an ended one from its saved state and step")
    cmd.add_argument("run_id")
    cmd.add_argument("--watch", action="store_true", help="show progress until the run ends (Ctrl-C detaches)")
    cmd = add("launchers", cmd_launchers, "where workers can run: each launcher, its site settings and preflight")
    cmd.add_argument("--no-preflight", action="store_true", help="list them without asking any cluster")
    cmd = add("runs", cmd_runs, "list runs, newest first")
    cmd.add_argument("--sort", choices=SORT_KEYS, default="created", help="order (eval, reward: best first)")
    cmd.add_argument("--status", help="only runs with this status (commas: any of several)")
    cmd.add_argument("--env", help="only runs of this environment")
    cmd.add_argument("--sweep", help="only the runs of this sweep id")
    cmd.add_argument("--search", help="only runs whose id, environment, profile, status, reason or sweep has this text")
    cmd.add_argument("--limit", type=ascii_int, help="at most this many runs (default 50; --json: all)")
    cmd.add_argument("--all", action="store_true", help="every run")
    cmd = add("status", cmd_status, "a run's state, processes and last metrics")
    cmd.add_argument("run_id")
    cmd.add_argument(
        "--cloud", action="store_true", help="first ask Tinker what the run used (needs a billing role; docs/cost.md)"
    )
    cmd = add("logs", cmd_logs, "print (or follow) a run's process logs (--json: JSON lines with --follow)")
    cmd.add_argument("run_id")
    cmd.add_argument("--process")
    cmd.add_argument("--follow", "-f", action="store_true")
    cmd.add_argument("--lines", "-n", type=ascii_int, default=40, help="the last lines of each log")
    cmd.add_argument("--access", action="store_true", help="also the HTTP access lines (hidden when merged)")
    cmd = add("stop", cmd_stop, "stop a run (ordered shutdown)")
    cmd.add_argument("run_id")


def _data_commands(add: Add) -> None:
    """results, rollouts, test-inference, compare."""
    cmd = add("results", cmd_results, "final metrics and checkpoint of a run")
    cmd.add_argument("run_id")
    cmd = add("rollouts", cmd_rollouts, "what the policy generated at a step: prompts, completions, rewards")
    cmd.add_argument("run_id")
    cmd.add_argument("--step", type=ascii_int, help="the trained step (default: the latest recorded)")
    side = cmd.add_mutually_exclusive_group()
    side.add_argument("--best", action="store_true", help="highest reward first")
    side.add_argument("--worst", action="store_true", help="lowest reward first")
    cmd.add_argument("--limit", type=ascii_int, metavar="K", help="at most K completions")
    cmd.add_argument("--env", help="only this environment's groups (a run training several)")
    cmd.add_argument("--prompt", metavar="TEXT", help="every step's group whose prompt holds TEXT (paged)")
    cmd.add_argument("--offset", type=ascii_int, default=0, help="with --prompt: groups to skip (paging)")
    cmd.add_argument("--zero-variance", action="store_true", help="with --prompt: only groups that all scored alike")
    cmd = add(
        "test-inference",
        cmd_test_inference,
        "try the selected environment against real models and score their answers (offline: SmolLM2, no keys)",
    )
    cmd.add_argument("--env", help="environment (default: the selected one)")
    cmd.add_argument("--steps", type=ascii_int, default=3, help="groups to generate and score")
    cmd.add_argument("--group-size", type=ascii_int, default=4, help="completions per group")
    cmd.add_argument("--model", action="append", help="model id (repeatable; default: the target's)")
    cmd.add_argument("--base-url", help="any OpenAI-compatible server (default: OpenRouter with its key, else local)")
    cmd = add("compare", cmd_compare, "runs side by side: config differences, first/best/last metrics")
    cmd.add_argument("run_ids", nargs="*", metavar="RUN")
    cmd.add_argument("--sweep", metavar="ID", help="every run of a sweep, with its summary per configuration")


def _profile_and_sweep_commands(add: Add) -> None:
    """profile (new, list, show), sweep."""
    cmd = add("profile", cmd_profile, "derived profiles: new (from another profile or a run), list, show")
    actions = cmd.add_subparsers(dest="profile_action", metavar="ACTION", required=True)
    new = actions.add_parser(
        "new", help="a new profile: another one with some values changed", description="a new profile"
    )
    new.add_argument("name")
    new.add_argument("--from", dest="source", metavar="PROFILE", help="the profile it starts from (default: local)")
    new.add_argument("--from-run", metavar="RUN", help="the values a run trained with")
    new.add_argument("--set", action="append", nargs="+", metavar="FIELD=VALUE")
    new.add_argument("--description")
    new.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    actions.add_parser("list", help="every profile").add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS
    )
    show = actions.add_parser("show", help="one profile's values and why each is locked")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS)

    cmd = add(
        "sweep",
        cmd_sweep,
        "a grid of runs as one sweep, queued under the local-run limit (sweep list, sweep show ID, sweep cancel ID)",
        epilog="e.g. hermes-rl sweep --set learning_rate=1e-4,3e-4 --seeds 2\n"
        "A training field (learning_rate, total_steps, lora_rank, group_size, batch_size) or an environment\n"
        "field is each run's own value; a locked backend field (max_token_length, ...) a derived profile.",
    )
    cmd.add_argument(
        "sweep_action", nargs="?", choices=("list", "show", "cancel"), help="list sweeps, show one, or cancel one"
    )
    cmd.add_argument("sweep_id", nargs="?", help="the sweep `show` reports on or `cancel` cancels")
    cmd.add_argument("--stop", action="store_true", help="cancel: also stop the sweep's active runs")
    cmd.add_argument("--set", action="append", metavar="FIELD=V1,V2")
    cmd.add_argument("--seeds", type=ascii_int, metavar="K", help="K runs (seeds 0..K-1) per configuration")
    add_cost_arguments(cmd, estimate=False)
    cmd.add_argument("--env")
    cmd.add_argument("--profile")


def _front_end_commands(add: Add) -> None:
    """mcp, dashboard, demo."""
    add("mcp", cmd_mcp, "serve the rl_* tools over MCP (stdio)")
    cmd = add("dashboard", cmd_dashboard, "open the dashboard (the default)")
    cmd.add_argument("--run", dest="run_id")
    add(
        "demo",
        cmd_demo,
        "start a local run of the default (the local profile's environment, its default values) and open "
        "the dashboard over it",
    )


def _export_commands(add: Add) -> None:
    """sample, metrics, report, alerts."""
    cmd = add(
        "sample",
        cmd_sample,
        "a saved checkpoint of any run (finished, stopped or live) answers a prompt, or its environment scores it",
    )
    cmd.add_argument("run_id")
    cmd.add_argument("--step", type=ascii_int, help="the checkpoint saved at this step (default: the newest)")
    what = cmd.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", metavar="TEXT", help="answer this prompt (as a user message; --raw: as text)")
    what.add_argument(
        "--env", nargs="?", const="", metavar="ENV", help="score answers with the run's environment (or ENV)"
    )
    what.add_argument("--list", action="store_true", help="list the run's saved checkpoints")
    cmd.add_argument("--n", type=ascii_int, default=1, help="completions of the prompt")
    cmd.add_argument("--max-tokens", type=ascii_int, default=128)
    form = cmd.add_mutually_exclusive_group()
    form.add_argument(
        "--raw",
        action="store_true",
        help="send the prompt as raw text (the default when the run's environment "
        "asked in raw text or the model has no chat template)",
    )
    form.add_argument("--chat", action="store_true", help="send the prompt through the model's chat template")
    cmd.add_argument("--groups", type=ascii_int, default=2, help="--env: groups to generate and score")
    cmd.add_argument("--group-size", type=ascii_int, default=4, help="--env: completions per group")
    cmd = add(
        "metrics", cmd_metrics, "a run's metrics, every step, as CSV or JSON (trainer and environment rows merged)"
    )
    cmd.add_argument("run_id")
    cmd.add_argument("--keys", nargs="+", metavar="KEY", help="these metrics only (default: all); commas also work")
    cmd.add_argument("--format", choices=("csv", "json"), default="csv")
    cmd.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    cmd = add(
        "report",
        cmd_report,
        "one self-contained HTML page of a run: charts, evals, config, best and worst rollouts, processes",
    )
    cmd.add_argument("run_id")
    cmd.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: <run folder>/report.html)")
    cmd = add("alerts", cmd_alerts, "alert rules (alerts.yaml): show them, or send a sample", epilog=ALERTS_EPILOG)
    cmd.add_argument("action", nargs="?", choices=("show", "test"), default="show")
