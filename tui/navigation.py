"""How the user moves about the dashboard (focus by pane, filter, zoom, help) and opens the views over it
(a chart, step time, rollouts, a comparison, test inference)."""

from __future__ import annotations

from textual.widget import Widget

from hermes_rl.core.base.states import STEP_PHASES, STEP_TIME

from .dashboard_state import DashboardState
from .keymap import keymap_path
from .panes.config_editor import ConfigPane
from .panes.environments import EnvironmentsPane
from .panes.logs import LogsPane
from .panes.metrics import ChartScreen, MetricsPane
from .panes.runs import RunsPane
from .panes.step_time import StepTimeScreen
from .widgets.dialogs import HelpScreen, binding_rows

PANES = ("environments", "config", "runs", "processes", "logs", "metrics")
# What a pane's number focuses inside it (the config pane, 2, focuses its first field).
PANE_FOCUS = {1: "EnvList", 3: "RunsTable", 4: "ProcessTable", 5: "LogView", 6: "MetricsTable"}


class Navigation(DashboardState):
    """Focus, filter, zoom and help on the dashboard screen, and the screens pushed over it."""

    def action_focus_pane(self, index: int) -> None:
        if self.screen is not self.screen_stack[0]:
            return
        target = PANE_FOCUS.get(index)
        if target is None:
            self.pane(ConfigPane).focus_first()
        else:
            self.pane(f"#{PANES[index - 1]}").query_one(target).focus()

    def _current_pane(self) -> int:
        node = self.focused
        while node is not None:
            if node.id in PANES:
                return PANES.index(node.id) + 1
            node = node.parent if isinstance(node.parent, Widget) else None
        return 0

    def action_next_pane(self) -> None:
        if self.screen is not self.screen_stack[0]:
            self.screen.focus_next()
            return
        self.action_focus_pane(self._current_pane() % len(PANES) + 1)

    def action_prev_pane(self) -> None:
        if self.screen is not self.screen_stack[0]:
            self.screen.focus_previous()
            return
        current = self._current_pane() or 1
        self.action_focus_pane((current - 2) % len(PANES) + 1)

    def action_filter(self) -> None:
        pane = self._current_pane()
        if pane == 1:
            self.pane(EnvironmentsPane).start_filter()
        elif pane == 5:
            self.pane(LogsPane).start_filter()  # the logs pane searches
        else:
            self.pane(RunsPane).start_filter()  # the runs, from anywhere else

    def action_zoom(self) -> None:
        screen = self.screen
        if screen is not self.screen_stack[0]:
            return
        if screen.maximized is not None:
            screen.minimize()
            return
        pane = self._current_pane()
        if pane:
            screen.maximize(self.pane(f"#{PANES[pane - 1]}"), container=False)

    def action_help(self) -> None:
        note = (
            f"Remap any key by its binding id in {keymap_path()} (YAML, e.g. `run.start: ctrl+r`). "
            "Digits/letters typed into a field go to the field: press esc first."
        )
        self.push_screen(HelpScreen(binding_rows(self), note))

    def open_run(self, run_id: str) -> None:
        if self.pane(RunsPane).select(run_id):
            self.action_focus_pane(3)

    # -- views over the dashboard -----------------------------------------------------------------
    def open_chart(self, key: str) -> None:
        if key == STEP_TIME or key in STEP_PHASES:  # a step's phases read best together, stacked
            self.action_step_time()
            return
        self.push_screen(ChartScreen(key, self.pane(MetricsPane).rows))

    def action_step_time(self) -> None:
        """Where the selected run's step time goes: its time/… phases stacked per step."""
        self.push_screen(StepTimeScreen(self.pane(MetricsPane).rows))

    def compare_runs(self, run_ids: list[str], title: str | None = None) -> None:
        # Like the two views below, the comparison screen (~2 ms with its chart module) loads when first opened.
        from .panes.compare import CompareScreen

        self.push_screen(CompareScreen(run_ids, title=title))

    def compare_sweep(self, sweep_id: str) -> None:
        """The comparison of every run a sweep has started (core.runs.sweeps), with its configurations."""
        ids = [
            r["run_id"]
            for r in sorted(self.runs, key=lambda r: r.get("created_at") or 0)
            if r.get("sweep_id") == sweep_id
        ]
        if len(ids) < 2:
            self.notify(f"sweep {sweep_id} has {len(ids)} run(s) started: nothing to compare yet", severity="warning")
            return
        self.compare_runs(ids, title=f"sweep {sweep_id}")

    def action_rollouts(self, step: int | None = None) -> None:
        if self.screen is not self.screen_stack[0] and not isinstance(self.screen, ChartScreen):
            return
        if not self.selected_run:
            self.notify("select a run first: [3], then a row", severity="warning")
            return
        # The rollouts view (its row lists and prompt history, ~10 ms to import) loads when first opened.
        from .panes.rollouts import RolloutsScreen

        self.push_screen(RolloutsScreen(self.selected_run, step))

    def action_test_inference(self) -> None:
        # The inference screen and what it imports (~30 ms) load when first opened, not for the first frame.
        from .panes.inference import InferenceScreen

        self.push_screen(InferenceScreen(self.selected_env, self.selected_run))
