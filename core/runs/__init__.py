"""The client run API (docs/CORE_API.md): launch, list, inspect, stop and read the results of runs.

Every client (dashboard, agent tools, CLI) calls this package as `runs.get_run(...)`; none holds a
run's only copy of anything. A run's truth is its folder ($HERMES_HOME/rl/runs/<id>/) written by its
supervisor; clients read it and signal the supervisor. A run whose supervisor is gone without a final
state is reported `lost`, with whatever of its processes survived, and can still be stopped.

   store      reading run folders: list_runs, get_run, run_events, lost detection
   start      launch (any pipeline), start_run (the real training run), resume_run (continue an ended
              run from its saved state), the supervisor's start
   control    stop_run (stop_not_done: what a stop left alive), restart_process
   results    get_results: final metrics, history sample, checkpoint
   runconfig  the run's configuration (config.yaml) as data
   training   the real training run's process specs
"""

from __future__ import annotations

from ..base.errors import Conflict, NotFound
from ..base.stall import stall_threshold
from .control import STOP_WAIT_S, restart_process, still_alive, stop_not_done, stop_run
from .results import get_results
from .start import launch, resume_run, start_run
from .store import get_run, refresh_runs, run_events
from .store import list_runs as _list_runs
from .sweeps import kick_queue
from .training import keep_runs_warm


def list_runs(
    *,
    stall_after_s: float | None = None,
    status: str | list[str] | None = None,
    environment: str | None = None,
    sweep: str | None = None,
    text: str | None = None,
):
    """store.list_runs (filters included), and a waiting sweep queue advanced (sweeps.kick_queue): every
    client that lists runs sees free slots, so a sweep whose creating command was killed goes on."""
    kick_queue()
    return _list_runs(stall_after_s=stall_after_s, status=status, environment=environment, sweep=sweep, text=text)


__all__ = [
    "Conflict",
    "NotFound",  # what the API raises for a finished or unknown run, besides BadInput
    "get_results",
    "get_run",
    "keep_runs_warm",
    "launch",
    "list_runs",
    "refresh_runs",
    "restart_process",
    "resume_run",
    "run_events",
    "stall_threshold",
    "start_run",
    "STOP_WAIT_S",
    "still_alive",
    "stop_not_done",
    "stop_run",
]
