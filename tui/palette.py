"""Command palette (`:` or ctrl+p): every dashboard action plus one entry per environment and run."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class HermesCommands(Provider):
    def _commands(self) -> list[tuple[str, object, str]]:
        app = self.app
        commands = [
            ("Start a run", app.action_start_run, "start the selected environment with the saved draft (s)"),
            ("Stop the selected run", app.action_stop_run, "asks for confirmation (x)"),
            ("Resume the selected run", app.action_resume_run, "a new run from its saved state and step"),
            ("Test inference", app.action_test_inference, "run the environment against inference models"),
            ("Write the selected run's report", app.action_write_report, "one HTML page (hermes-rl report)"),
            ("Save config draft", app.save_config, "ctrl+s in the config editor"),
            ("Help: keys", app.action_help, "?"),
            ("Quit (runs keep going)", app.action_quit, "q"),
        ]
        for index, name in enumerate(("environments", "config", "runs", "processes", "logs", "metrics"), 1):
            commands.append((f"Go to {name}", partial(app.action_focus_pane, index), f"pane {index}"))
        for env in getattr(app, "environments", []):
            if not env.error:
                commands.append(
                    (
                        f"Select environment {env.name}",
                        partial(app.choose_environment, env.name),
                        env.description or env.file,
                    )
                )
        for run in getattr(app, "runs", [])[:50]:
            commands.append(
                (
                    f"Open run {run['run_id']} ({run.get('environment')}, {run.get('status')})",
                    partial(app.open_run, run["run_id"]),
                    "show its processes, logs and metrics",
                )
            )
        for profile in ("local", "tinker"):
            commands.append(
                (f"Use profile {profile}", partial(app.choose_profile, profile), "for the selected environment")
            )
        return commands

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
