"""The dashboard's actions on runs (save the config draft and start a run of it, stop, resume, restart one
process, derive a profile from a run, write its report). Each asks first where it cannot be undone, and
does the work in a worker; a failure reaches the user as one line (tui/routing.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual import work

from hermes_rl.core.base.states import RECORDED_FINAL, RunStatus

from . import backend
from .dashboard_state import DashboardState
from .format import estimate_summary
from .panes.config_editor import ConfigPane
from .widgets.dialogs import ConfirmScreen
from .widgets.name_prompt import NamePrompt

START_SUMMARY_FIELDS = ("total_steps", "learning_rate", "lora_rank", "group_size", "batch_size")


class RunControl(DashboardState):
    """Config drafts and the run lifecycle, from keys, the palette and pane messages."""

    # -- the config draft -------------------------------------------------------------------------
    def save_config(self, then_start: bool = False) -> None:
        pane = self.pane(ConfigPane)
        pending, errors = pane.unsaved()
        if errors:
            name, error = next(iter(errors.items()))
            self.notify(f"fix {name} first: {error}", severity="error")
            return
        if not pending:
            if then_start:
                self._start(pane.environment, None)
            else:
                self.notify("nothing to save", timeout=2)
            return
        self._save(pane.environment, pane.profile, pending, then_start)

    @work(thread=True, exclusive=True, group="config-save", exit_on_error=False, description="not saved")
    def _save(self, env: str, profile: str | None, pending: dict, then_start: bool) -> None:
        result = backend.set_fields(pending, env, profile)
        changed = ", ".join(f"{k}={v['value']!r}" for k, v in result.get("changed", {}).items())
        said = f"{env}'s draft saved: {changed} (later runs of it start with these values)"
        self.call_from_thread(self.notify, said, timeout=4)
        self.call_from_thread(self.load_config, env)
        if then_start:
            self.call_from_thread(self._start, env, None)

    @work(thread=True, exclusive=True, group="config-save", exit_on_error=False, description="cannot reset the draft")
    def reset_config(self, env: str) -> None:
        backend.reset_draft(env)
        self.call_from_thread(self.load_config, env)

    # -- start, resume ----------------------------------------------------------------------------
    def action_start_run(self) -> None:
        pane = self.pane(ConfigPane)
        env = pane.environment or self.selected_env
        if not env:
            self.notify("select an environment first: [1], then enter", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.save_config(then_start=True)

        pending = pane.unsaved()[0] if pane.view is not None and pane.view.environment == env else {}

        def estimated() -> str:  # what the run would cost: the values _start resolves (edits saved first)
            return estimate_summary(backend.estimate_start(env, None, pending))

        self.push_screen(
            ConfirmScreen(
                f"Start a run of {env}?",
                self._start_summary(pane, env),
                more=estimated,
                more_waiting="estimating its tokens and cost…",
            ),
            answered,
        )

    def _start_summary(self, pane: ConfigPane, env: str) -> str:
        """What `s` would start: the profile and the training values (unsaved edits included)."""
        view = pane.view if pane.view is not None and pane.view.environment == env else None
        if view is None:
            return f"profile {self.header.profile or '?'} · the environment's saved config · a new run's processes"
        pending, _errors = pane.unsaved()
        values = {**view.values(), **pending}
        shown = [f"{k} {values[k]}" for k in START_SUMMARY_FIELDS if values.get(k) is not None]
        defaults = {row["name"]: row.get("default") for row in view.editable}
        edited = sorted(k for k, v in values.items() if k in defaults and v != defaults[k])
        draft = ""
        if edited:  # the draft outlives this run: said here, so it is never silently every later run's default
            unsaved = f"{len(pending)} unsaved, saved first; " if pending else ""
            draft = (
                f"\n{len(edited)} value(s) differ from the defaults ({', '.join(edited[:4])}"
                f"{', …' if len(edited) > 4 else ''}): {unsaved}kept as {env}'s draft, so later runs of it "
                "start with them too (ctrl+d in [2] resets)"
            )
        return f"profile {view.profile} · " + " · ".join(shown) + draft

    def _start(self, env: str | None, profile: str | None) -> None:
        self.notify(f"starting {env}…", timeout=2)
        self._start_worker(env, profile)

    @work(thread=True, group="start-run", exit_on_error=False, description="cannot start")
    def _start_worker(self, env: str | None, profile: str | None) -> None:
        run = backend.start_run(env, profile)
        self.call_from_thread(self._started, run)

    def _started(self, run: dict) -> None:
        run_id = run.get("run_id")
        self.notify(f"run {run_id} started ({run.get('environment')}, {run.get('profile')})")
        self.initial_run_id = run_id  # select it as soon as the list shows it
        self.poke_live()

    def action_resume_run(self) -> None:
        """A new run continuing the selected ended run from its saved state (core.runs.resume_run)."""
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        self.notify(f"resuming {run_id}…", timeout=2)
        self._resume_worker(run_id)

    @work(thread=True, group="start-run", exit_on_error=False, description="cannot resume")
    def _resume_worker(self, run_id: str) -> None:
        run = backend.resume_run(run_id)
        self.call_from_thread(self._started, run)

    # -- stop, restart ----------------------------------------------------------------------------
    def action_stop_run(self) -> None:
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return
        run: Mapping[str, Any] = next((r for r in self.runs if r["run_id"] == run_id), {})
        if run.get("status") in RECORDED_FINAL:  # a lost run can still be stopped (its leftovers)
            self.notify(f"run {run_id} is already {run.get('status')}", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop_worker(run_id)

        detail = (
            f"{run.get('environment', '')} · {run.get('status', '')} · "
            "its processes get SIGTERM, then SIGKILL after their timeout"
        )
        self.push_screen(ConfirmScreen(f"Stop run {run_id}?", detail), answered)

    @work(thread=True, group="stop-run", exit_on_error=False, description="cannot stop the run")
    def _stop_worker(self, run_id: str) -> None:
        self.call_from_thread(self.notify, f"stopping {run_id}…", timeout=2)
        result = backend.stop_run(run_id)
        self.call_from_thread(self.notify, f"run {run_id}: {result.get('status', RunStatus.STOPPED)}")
        self.poke_live()

    def confirm_restart_process(self, run_id: str | None, name: str) -> None:
        if not run_id:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._restart_worker(run_id, name)

        self.push_screen(
            ConfirmScreen(
                f"Restart {name} of run {run_id}?",
                "the supervisor stops its process group and starts it again; the other processes keep running",
            ),
            answered,
        )

    @work(thread=True, group="restart", exit_on_error=False, description="cannot restart the process")
    def _restart_worker(self, run_id: str, name: str) -> None:
        self.call_from_thread(self.notify, f"restarting {name} of {run_id}…", timeout=2)
        run = backend.restart_process(run_id, name)
        proc: Mapping[str, Any] = next((p for p in run.get("processes") or [] if p.get("name") == name), {})
        self.call_from_thread(
            self.notify,
            f"{name} restarted: pid {proc.get('pid')}, {proc.get('state')}, {proc.get('restarts', 0)} restart(s)",
        )
        self.poke_live()

    # -- what a run leaves: a profile of its values, its report -----------------------------------
    def action_derive_profile(self) -> None:
        """Ask for a name, then write a profile holding the selected run's values (core.runs.profile_of_run)."""
        run_id = self._cursor_run()
        if not run_id:
            self.notify("no run selected", severity="warning")
            return

        def chosen(name: str | None) -> None:
            if name:
                self._derive_worker(run_id, name)

        self.push_screen(
            NamePrompt(f"A new profile with the values run {run_id} trained with", placeholder="profile name"),
            chosen,
        )

    @work(thread=True, group="derive-profile", exit_on_error=False, description="cannot derive the profile")
    def _derive_worker(self, run_id: str, name: str) -> None:
        profile = backend.profile_from_run(run_id, name)
        self.call_from_thread(
            self.notify, f"profile {profile.name} created ({profile.overrides_file}): use it with the palette"
        )

    def action_write_report(self) -> None:
        if not self.selected_run:
            self.notify("select a run first: [3], then a row", severity="warning")
            return
        self._write_report(self.selected_run)

    @work(thread=True, group="report", exit_on_error=False, description="cannot write the report")
    def _write_report(self, run_id: str) -> None:
        path = backend.write_report(run_id)
        self.call_from_thread(self.notify, f"report of run {run_id}: {path}", timeout=15, markup=False)
