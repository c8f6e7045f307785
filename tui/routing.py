"""The dashboard's messages, each routed to what handles it: the live loop's batches (tui/live.py) to
the panes they update, a pane's requests to the action that serves them, and every worker's failure to
the user as one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from textual.worker import Worker, WorkerState

from hermes_rl.core.base.states import FINAL, RunStatus

from .dashboard_state import dropped_when_closing
from .format import cost_cell, error_line
from .navigation import Navigation
from .panes.config_editor import ConfigPane
from .panes.environments import EnvironmentsPane
from .panes.logs import LogsPane
from .panes.metrics import ChartScreen, MetricsPane
from .panes.processes import ProcessesPane
from .panes.runs import RunsPane
from .panes.step_time import StepTimeScreen
from .run_control import RunControl
from .selection import EnvironmentSelection

if TYPE_CHECKING:
    from .live import LiveUpdater

# How a run's end is announced: failures as errors, the rest as information.
END_SEVERITY: dict[str, Literal["information", "warning", "error"]] = {
    RunStatus.FAILED: "error",
    RunStatus.LOST: "error",
}


class MessageRouting(Navigation, EnvironmentSelection, RunControl):
    """Message handlers only: each hands its message to a pane or to an action of the parts below."""

    # -- workers ----------------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self._report_failure(event.worker)

    def on_logs_pane_work_failed(self, message: LogsPane.WorkFailed) -> None:
        self._report_failure(message.worker)

    def _report_failure(self, worker: Worker) -> None:
        """Every worker's failure reaches the user here, as one line: what failed (the worker's
        description) and why (the error's message and hint)."""
        self.notify(f"{worker.description}: {error_line(worker.error)}", severity="error", timeout=10)

    # -- the live loop ----------------------------------------------------------------------------
    def on_live_updater_batch(self, batch: LiveUpdater.Batch) -> None:
        """One live cycle's updates, handled in one go (one frame): each by its own handler below."""
        for message in batch.updates:
            getattr(self, message.handler_name)(message)

    @dropped_when_closing
    def on_live_updater_environments_changed(self, message: LiveUpdater.EnvironmentsChanged) -> None:
        self.environments = message.environments
        self.pane(EnvironmentsPane).show(message.environments)

    @dropped_when_closing
    def on_live_updater_alerts_arrived(self, message: LiveUpdater.AlertsArrived) -> None:
        """An alert rule fired (alerts.yaml): a toast and the terminal's bell, whichever run it is about."""
        for alert in message.alerts[-5:]:  # a burst (many runs ending at once) shows its newest few
            urgent = alert.get("event") in ("failed", "stalled")
            self.notify(
                f"{alert.get('message')}",
                title=f"alert: {alert.get('title')}",
                severity="error" if urgent else "warning",
                timeout=30 if urgent else 15,
                markup=False,  # the text comes from run files: shown as written
            )
        self.bell()

    @dropped_when_closing
    def on_live_updater_runs_updated(self, message: LiveUpdater.RunsUpdated) -> None:
        self.runs = message.runs
        for run in message.runs:
            status, previous = run.get("status"), self._statuses.get(run["run_id"])
            if previous is not None and previous != status and status in FINAL:
                reason = f": {run['reason']}" if run.get("reason") else ""
                self.notify(
                    f"run {run['run_id']} ({run.get('environment')}) {status}{reason}",
                    severity=END_SEVERITY.get(status, "information"),
                    timeout=10,
                )
            self._statuses[run["run_id"]] = status
        pane = self.pane(RunsPane)
        pane.update_runs(message.runs, message.sparks, message.stalled, message.queued)
        self.pane(EnvironmentsPane).show_running(
            {env for r in message.runs if (env := r.get("environment")) and r.get("status") not in FINAL}
        )
        self.header.stalled = sorted(message.stalled)
        self.header.unhealthy = [
            (r["run_id"], why) for r in message.runs if (why := (r.get("health") or {}).get("reason"))
        ]
        self.header.stall_after_s = message.stall_after_s
        self._update_run_line()
        if self.initial_run_id and pane.select(self.initial_run_id):
            self.initial_run_id = None

    @dropped_when_closing
    def on_live_updater_run_sampled(self, message: LiveUpdater.RunSampled) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(ProcessesPane).show(message.run)
        self.pane(LogsPane).sync_processes(message.run)
        self.pane(MetricsPane).show_audit(message.run.get("audit"))

    @dropped_when_closing
    def on_live_updater_metrics_updated(self, message: LiveUpdater.MetricsUpdated) -> None:
        if message.run_id != self.selected_run:
            return
        self.pane(MetricsPane).show(message.run_id, message.rows, message.trainer_step)
        if isinstance(self.screen, (ChartScreen, StepTimeScreen)):
            self.screen.update_rows(message.rows)

    @dropped_when_closing
    def on_live_updater_logs_grew(self, message: LiveUpdater.LogsGrew) -> None:
        if message.run_id == self.selected_run:
            self.pane(LogsPane).logs_grew(message.names)

    # -- the panes --------------------------------------------------------------------------------
    def on_environments_pane_selected(self, message: EnvironmentsPane.Selected) -> None:
        self.choose_environment(message.name)

    @dropped_when_closing
    def on_config_pane_loaded(self, message: ConfigPane.Loaded) -> None:
        self.header.profile = message.view.profile
        self.header.update_text()

    def on_config_pane_save_requested(self, _message: ConfigPane.SaveRequested) -> None:
        self.save_config()

    def on_config_pane_reset_requested(self, message: ConfigPane.ResetRequested) -> None:
        self.reset_config(message.environment)

    @dropped_when_closing
    def on_runs_pane_selected(self, message: RunsPane.Selected) -> None:
        if message.run_id == self.selected_run:
            return
        self.selected_run = message.run_id
        self.pane(LogsPane).show_run(message.run_id)
        self.pane(MetricsPane).show(message.run_id, [])
        self.pane(ProcessesPane).show(None)
        self._update_run_line()
        if self.live is not None:
            self.live.select(message.run_id)
        if message.run_id and not self.selected_env:
            self._run_config_worker(message.run_id)

    def on_runs_pane_compare_requested(self, message: RunsPane.CompareRequested) -> None:
        self.compare_runs(message.run_ids)

    def on_processes_pane_restart_requested(self, message: ProcessesPane.RestartRequested) -> None:
        self.confirm_restart_process(message.run_id, message.name)

    def on_metrics_pane_chart_requested(self, message: MetricsPane.ChartRequested) -> None:
        self.open_chart(message.key)

    def on_chart_screen_rollouts_requested(self, message: ChartScreen.RolloutsRequested) -> None:
        self.action_rollouts(message.step)

    def _update_run_line(self) -> None:
        """The header's line about the selected run: its environment, status, step and cost."""
        header = self.header
        if self.selected_run is None:
            header.run_line = None
        else:
            run: Mapping[str, Any] = next((r for r in self.runs if r["run_id"] == self.selected_run), {})
            step, total = run.get("step"), run.get("total_steps")
            header.run_line = f"{self.selected_run} {run.get('environment') or ''} {run.get('status', '')}" + (
                f" step {step}/{total}" if step is not None else ""
            )
            if run.get("tokens"):  # docs/cost.md
                header.run_line += f" cost {cost_cell(run)}"
        header.update_text()
