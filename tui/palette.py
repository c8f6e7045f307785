"""Command palette (`:` or ctrl+p): every dashboard action plus one entry per environment and run."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from . import backend
from .widgets.dialogs import key_text, screen_bindings

if TYPE_CHECKING:  # the dashboard's parts (tui/app.py, which imports this module, composes them)
    from .routing import MessageRouting

# (name, what choosing it calls, help)
Command = tuple[str, Callable[[], Any], str]
SKIPPED_KEY_IDS = ("nav.", "pane.", "config.next", "config.prev", "config.leave", "confirm.")


class HermesCommands(Provider):
    @property
    def dashboard(self) -> MessageRouting:
        """The dashboard this palette was opened in (its COMMANDS name this provider)."""
        return cast("MessageRouting", self.app)

    def _commands(self) -> list[Command]:
        app = self.dashboard
        commands: list[Command] = [
            ("Start a run", app.action_start_run, "start the selected environment with the saved draft (s)"),
            ("Stop the selected run", app.action_stop_run, "asks for confirmation (x)"),
            ("Resume the selected run", app.action_resume_run, "a new run from its saved state and step"),
            (
                "Derive a profile from this run's values",
                app.action_derive_profile,
                "a new profile holding the selected run's learning rate, steps, LoRA rank…",
            ),
            ("Where step time goes", app.action_step_time, "the selected run's step phases, stacked per step"),
            ("Test inference", app.action_test_inference, "run the environment against inference models"),
            ("Write the selected run's report", app.action_write_report, "one HTML page (hermes-rl report)"),
            ("Save config draft", app.save_config, "ctrl+s in the config editor"),
            ("Help: keys", app.action_help, "?"),
            ("Quit (runs keep going)", app.action_quit, "q"),
        ]
        for index, name in enumerate(("environments", "config", "runs", "processes", "logs", "metrics"), 1):
            commands.append((f"Go to {name}", partial(app.action_focus_pane, index), f"pane {index}"))
        for env in app.environments:
            if not env.error:
                commands.append(
                    (
                        f"Select environment {env.name}",
                        partial(app.choose_environment, env.name),
                        env.description or env.file,
                    )
                )
        for run in app.runs[:50]:
            commands.append(
                (
                    f"Open run {run['run_id']} ({run.get('environment')}, {run.get('status')})",
                    partial(app.open_run, run["run_id"]),
                    "show its processes, logs and metrics",
                )
            )
        sweeps: list[str] = []
        for run in app.runs:
            if (sweep_id := run.get("sweep_id")) and sweep_id not in sweeps:
                sweeps.append(sweep_id)
        for sweep_id in sweeps[:20]:
            commands.append(
                (f"Compare sweep {sweep_id}", partial(app.compare_sweep, sweep_id), "every run the sweep has started")
            )
        for profile in backend.profile_names():  # the built-ins and every derived profile
            commands.append(
                (f"Use profile {profile}", partial(app.choose_profile, profile), "for the selected environment")
            )
        rescan = "find environments added since the dashboard opened"
        commands.append(("Rescan environments", app.action_rescan_environments, rescan))
        return commands + self._key_commands(commands)

    def _key_commands(self, listed: list[Command]) -> list[Command]:
        """Every other action a key has on the screen the palette was opened from, by its description and
        where it works ("Compare marked runs (runs: c)"), so what a key does can be found by name."""
        app = self.app
        done = {getattr(callback, "__name__", "") for _, callback, _ in listed}
        out: list[Command] = []
        for node, area, binding in screen_bindings(app, self.screen):
            action = binding.action.split("(")[0]
            if (
                (binding.id or "").startswith(SKIPPED_KEY_IDS)
                or f"action_{action}" in done
                or action in ("command_palette", "dismiss", "close", "quit", "help")
            ):
                continue
            name = f"{binding.description or action} ({area}: {key_text(app, binding)})"
            out.append((name, partial(app.call_later, node.run_action, binding.action), f"the {area} key"))
        return out

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
