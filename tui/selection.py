"""Which environment and profile the dashboard shows: the selection it opens with, a choice made here or
elsewhere (`hermes-rl select`, an agent's tool), and the config pane that follows it."""

from __future__ import annotations

from textual import work

from hermes_rl.core.base.errors import HermesError

from . import backend
from .dashboard_state import DashboardState, dropped_when_closing
from .format import error_line
from .panes.config_editor import ConfigPane
from .panes.environments import EnvironmentsPane


class EnvironmentSelection(DashboardState):
    """The selected environment and profile, and the config pane that shows them (or the selected run's
    config when no environment is selected)."""

    @work(thread=True, group="load", exit_on_error=False, description="cannot load the selection")
    def _load_start_state(self) -> None:
        selection = backend.current_selection()
        try:
            profile, _notice = backend.resolve_profile(selection.get("profile"))
            profile_name, default_env = profile.name, profile.default_environment
        except Exception:  # a bad profile must not keep the dashboard from opening: the header shows "?"
            profile_name, default_env = selection.get("profile") or "local", None
        try:
            environments = backend.discover_environments()
        except HermesError as exc:  # still open, with no environments listed
            environments = []
            self.call_from_thread(self.notify, error_line(exc), severity="error")
        self.call_from_thread(self._start_state, selection, profile_name, environments, default_env)

    def _start_state(self, selection: dict, profile_name: str, environments: list, default_env: str | None) -> None:
        self.header.profile = profile_name
        self.selected_env = selection.get("environment")
        known = {key for e in environments for key in (e.id, e.name, *e.aliases)}
        if self.selected_env and environments and self.selected_env not in known:
            # saved where this dashboard does not look (an interpreter only another shell named): the default
            self.notify(
                f"the selected environment {self.selected_env} is not found here; showing the default "
                f"{default_env} (`hermes-rl envs --add-python/--add-folder` saves where it lives)",
                severity="warning",
                timeout=8,
            )
            self.selected_env = None
        self.header.environment = self.selected_env
        self.header.update_text()
        self.environments = environments
        self.pane(EnvironmentsPane).show(environments, self.selected_env)
        if self.selected_env:
            self.load_config(self.selected_env)
        else:
            self.pane(ConfigPane).show_unselected(default_env, profile_name)
            if self.selected_run:
                self._run_config_worker(self.selected_run)

    def action_rescan_environments(self) -> None:
        """Discover again now: environments added where no folder was watched (a folder made or saved
        since, a taskset installed into an environment interpreter) show up."""
        if self.live is None:  # live updates are off (a test, a bench): nothing rescans
            self.notify("live updates are off: nothing rescans", severity="warning", timeout=3)
            return
        self.live.rescan_environments()
        self.notify("rescanning environments…", timeout=2)

    @work(
        thread=True,
        exclusive=True,
        group="select-env",
        exit_on_error=False,
        description="cannot select the environment",
    )
    def choose_environment(self, name: str, profile: str | None = None) -> None:
        selected = backend.select_environment(name, profile)
        if selected.get("notice"):  # where it lives was saved for every client
            self.call_from_thread(self.notify, selected["notice"], timeout=6)
        self.call_from_thread(self._environment_chosen, name)

    def choose_profile(self, profile: str) -> None:
        if not self.selected_env:
            self.notify("select an environment first", severity="warning")
            return
        self.choose_environment(self.selected_env, profile)

    @dropped_when_closing  # a timer's: it may fire while the app's panes are being removed
    def _follow_selection(self) -> None:
        """A selection made elsewhere (`hermes-rl select`, an agent's tool) shows here too: the header,
        the environments pane and the config follow it."""
        seen = backend.selection_signature()
        if seen == self._selection_seen or self.closing:
            return
        self._selection_seen = seen
        selection = backend.current_selection()
        env, profile = selection.get("environment"), selection.get("profile")
        if profile and profile != self.header.profile:
            self.header.profile = profile
            self.header.update_text()
            if env and env == self.selected_env:
                self.load_config(env)  # the same environment under another profile: other defaults
        if env and env != self.selected_env:
            self._environment_chosen(env)

    def _environment_chosen(self, name: str) -> None:
        self.selected_env = name
        self.header.environment = name
        self.header.update_text()
        envs = self.pane(EnvironmentsPane)
        envs.selected = name
        envs.show(self.environments)
        self.load_config(name)
        self.notify(f"selected {name}", timeout=2)

    @work(thread=True, exclusive=True, group="run-config", exit_on_error=False, description="cannot read the config")
    def _run_config_worker(self, run_id: str) -> None:
        rows = backend.run_config_rows(run_id)
        self.call_from_thread(self._show_run_config, run_id, rows)

    def _show_run_config(self, run_id: str, rows: list) -> None:
        if self.screen_stack and run_id == self.selected_run and not self.selected_env:
            self.pane(ConfigPane).show_run(run_id, rows)
