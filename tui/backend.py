"""The dashboard's one door into `core`: the run library, environments and their config, the log and
metric readers, test inference. Each function imports its core module when first called, so the
first frame does not wait for them.

Elsewhere the dashboard imports only core.base's light primitives (errors, states, paths, the
secrets' names, fsutil's time parsing), and the launcher hands the dashboard to core's CLI
(tests/test_tui_pilot.py checks both). Calls that may be slow (config_init subprocesses,
starting/stopping runs, psutil sampling) are made from workers, never from the UI thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Protocol

from hermes_rl.core.base import secrets
from hermes_rl.core.base.paths import current_selection_file, run_dir, sweep_queue_flag

if TYPE_CHECKING:  # the run library's records: types only, nothing loaded for the first frame
    from hermes_rl.core.base.records import RunSummary, RunView, Selection, StartedRun


# -- runs ---------------------------------------------------------------------------------
def list_runs(stall_after_s: float | None = None) -> list[RunSummary]:
    from hermes_rl.core import runs

    return runs.list_runs(stall_after_s=stall_after_s)


def refresh_runs(run_ids: list[str], stall_after_s: float | None = None) -> dict[str, RunSummary | None]:
    from hermes_rl.core import runs

    return dict(runs.refresh_runs(run_ids, stall_after_s=stall_after_s))


def get_run(run_id: str, *, sample: bool = True, stall_after_s: float | None = None) -> RunView:
    from hermes_rl.core import runs

    return runs.get_run(run_id, sample=sample, stall_after_s=stall_after_s)


def stall_threshold(seconds: float | None = None) -> float:
    from hermes_rl.core import runs

    return runs.stall_threshold(seconds)


def alert_log_end() -> int:
    from hermes_rl.core.runs import alerts

    return alerts.alert_log_end()


def read_alerts(offset: int) -> tuple[list[dict], int]:
    from hermes_rl.core.runs import alerts

    return alerts.read_alert_log(offset)


def start_run(env_name: str | None, profile: str | None, overrides: dict | None = None) -> StartedRun:
    from hermes_rl.core import runs

    runs.keep_runs_warm()  # the runs this dashboard starts after this one fork their warm servers from it
    return runs.start_run(env_name, profile, overrides)


def estimate_start(env_name: str | None, profile: str | None, overrides: dict | None = None) -> dict:
    from hermes_rl.core.runs.cost import estimate_start

    return estimate_start(env_name, profile, overrides)


def resume_run(run_id: str) -> StartedRun:
    from hermes_rl.core import runs

    runs.keep_runs_warm()
    return runs.resume_run(run_id)


def stop_run(run_id: str, wait: float = 15.0) -> RunView:
    from hermes_rl.core import runs

    return runs.stop_run(run_id, wait=wait)


def restart_process(run_id: str, name: str, wait: float = 30.0) -> RunView:
    from hermes_rl.core import runs

    return runs.restart_process(run_id, name, wait=wait)


# -- environments and config ------------------------------------------------------------------
def keep_probes_warm() -> None:
    from hermes_rl.core.envs.probe import keep_warm

    keep_warm()


def discover_environments() -> list:
    from hermes_rl.core.envs.discovery import discover_environments

    return discover_environments()


def environment_dirs() -> list:
    from hermes_rl.core.envs.discovery import environment_dirs

    return environment_dirs()


def get_config(env_name: str | None, profile: str | None = None):
    from hermes_rl.core.envs.drafts import get_config

    return get_config(env_name, profile)


def set_fields(assignments: dict, env_name: str | None, profile: str | None = None) -> dict:
    from hermes_rl.core.envs.drafts import set_fields

    return set_fields(assignments, env_name, profile)


def reset_draft(env_name: str) -> None:
    from hermes_rl.core.envs.drafts import reset_draft

    reset_draft(env_name)


def select_environment(name: str, profile: str | None = None) -> Selection:
    from hermes_rl.core.envs.drafts import select_environment

    return select_environment(name, profile)


def current_selection() -> dict:
    from hermes_rl.core.envs.drafts import current_selection

    return current_selection()


def selection_signature() -> tuple | None:
    """What changes when any client (the CLI, an agent, this dashboard) changes the selection."""
    try:
        st = current_selection_file().stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def resolve_profile(name: str | None):
    from hermes_rl.core.envs.profiles import resolve_profile

    return resolve_profile(name)


def validate_field(row: dict, raw: object) -> object:
    """Coerce and range-check one editable field's value without saving (BadInput says what is wrong)."""
    from hermes_rl.core.envs.fields import FieldInfo, validate_value

    names = {f.name for f in dataclass_fields(FieldInfo)}
    return validate_value(FieldInfo(**{k: v for k, v in row.items() if k in names}), raw)


# -- logs and metrics --------------------------------------------------------------------------
def plain_text(text: str) -> str:
    """core.readers.logs.plain_text: untrusted text with every terminal control sequence removed."""
    from hermes_rl.core.readers.logs import plain_text as plain

    return plain(text)


def access_line_test():
    """core.readers.logs.is_access_line: the merged view hides HTTP access lines unless asked."""
    from hermes_rl.core.readers.logs import is_access_line

    return is_access_line


def log_reader(path):
    """A LogReader over one process log: indexed lazily, opened at its tail."""
    from hermes_rl.core.readers.logs import LogReader

    return LogReader(path)


def strip_ansi(text: str) -> str:
    from hermes_rl.core.readers.logs import strip_ansi

    return strip_ansi(text)


def run_metrics(run_id: str, **kwargs):
    """A RunMetrics reader over a run's metrics files (kwargs: max_rows, tail_bytes)."""
    from hermes_rl.core.readers.metrics import RunMetrics

    return RunMetrics(run_dir(run_id), **kwargs)


def run_rollouts(run_id: str, **kwargs):
    """core's incremental reader of a run's rollouts.jsonl (RunRollouts)."""
    from hermes_rl.core.readers.rollouts import RunRollouts

    return RunRollouts(run_dir(run_id), **kwargs)


def step_time_of(rows: list[dict]) -> dict | None:
    """Where the rows' recent steps spent their time (core.runs.progress): its `text` names the dominant phase."""
    from hermes_rl.core.runs.progress import step_time_of

    return step_time_of(rows)


def profile_names() -> list[str]:
    """Built-in profiles first, then those in $HERMES_HOME/rl/profiles/ (derived ones included)."""
    from hermes_rl.core.envs.profiles import list_profiles

    return list_profiles()


def profile_from_run(run_id: str, name: str):
    """A new profile NAME with the values run RUN trained with (core.runs.profile_of_run)."""
    from hermes_rl.core.runs.profile_of_run import profile_from_run

    return profile_from_run(run_id, name)


def queued_sweep_runs() -> int:
    """How many sweep runs wait for a place under the local-run limit (one stat when none does)."""

    if not sweep_queue_flag().exists():
        return 0
    from hermes_rl.core.runs.sweeps import queued_count

    return queued_count()


def sweep_status(sweep_id: str) -> dict:
    from hermes_rl.core.runs.sweeps import sweep_status

    return sweep_status(sweep_id)


def compare_runs(run_ids: list[str]) -> dict:
    from hermes_rl.core.runs.compare import compare_runs

    return compare_runs(run_ids)


def run_config_rows(run_id: str) -> list[tuple[str, object, bool]]:
    """A run's resolved training config as (dotted key, value, locked by its profile), read-only."""
    from hermes_rl.core.envs.profiles import LOCKED_FIELDS
    from hermes_rl.core.runs.compare import config_values

    return [(key, value, key.split(".")[-1] in LOCKED_FIELDS) for key, value in config_values(run_id).items()]


def metric_keys(rows) -> list[str]:
    """Every metric key in the rows, headline metrics first."""
    from hermes_rl.core.readers.metrics import metric_keys

    return metric_keys(rows)


def recent_metric_points(rows, width: int) -> dict[str, list[tuple[int, float]]]:
    from hermes_rl.core.readers.metrics import recent_points

    return recent_points(rows, width)


def metric_series(rows, key: str) -> list[tuple[int, float]]:
    from hermes_rl.core.readers.metrics import metric_series

    return metric_series(rows, key)


# -- keys and inference ---------------------------------------------------------------------
def keys_present() -> dict[str, bool]:
    return secrets.keys_present()


class InferenceTrial(Protocol):
    """What the dashboard uses of core's inference trial (core/runs/trial.py)."""

    def events(self) -> Iterator[dict]: ...

    def cancel(self) -> None: ...


def prepare_inference_test(
    env_name: str | None, num_steps: int, group_size: int, models=None, base_url=None, checkpoint: str | None = None
) -> InferenceTrial:
    """An InferenceTrial ready to run (its .events() yields started/model_started/progress/model_result/summary);
    with `checkpoint` ("RUN" or "RUN@STEP") against that run's saved checkpoint, on its own environment
    unless `env_name` is given."""
    from hermes_rl.core import runs
    from hermes_rl.core.runs import sampling
    from hermes_rl.core.runs.trial import InferenceTrial

    runs.keep_runs_warm()  # as for a run: the processes of the tests after this one fork from a warm base
    chosen = sampling.find_checkpoint(*sampling.parse_checkpoint_ref(checkpoint)) if checkpoint else None
    return InferenceTrial.prepare(num_steps, group_size, models, base_url, env_name=env_name, checkpoint=chosen)


def write_report(run_id: str) -> str:
    """The run's HTML report written to its folder (core.runs.export); its path."""
    from hermes_rl.core.runs import export

    return str(export.write_report(run_id))


def scored_completions(rollouts_path: str, limit: int = 10_000) -> list[dict]:
    from hermes_rl.core.runs import sampling

    return sampling.scored_completions(rollouts_path, limit)


def prompt_history(run_id: str, prompt: str, **kwargs) -> dict:
    """One prompt's groups across training (core.readers.prompt_history)."""
    from hermes_rl.core.readers.prompt_history import prompt_history as history

    return history(run_id, prompt, **kwargs)
