"""Where a run's process runs: the launcher contract (base), the registry by name (registry, which also
loads launchers published under the `hermes_rl.launchers` entry-point group), one module per launcher
(local, slurm, ray, skypilot), and what readers show of a job (views). Callers ask the registry and talk to the
handle `start` returns.
"""

from .base import (
    Handle,
    Launcher,
    LauncherError,
    command_field,
    command_keys,
    event_fields,
    job_of,
    job_record,
    settings_over_site,
)
from .registry import ENTRY_POINT_GROUP, find, get, names, register, unregister, without_commands
from .views import job_view, recorded_job_running, where_of

__all__ = [
    "ENTRY_POINT_GROUP",
    "Handle",
    "Launcher",
    "LauncherError",
    "command_field",
    "command_keys",
    "event_fields",
    "find",
    "get",
    "job_of",
    "job_record",
    "job_view",
    "recorded_job_running",
    "names",
    "register",
    "settings_over_site",
    "unregister",
    "where_of",
    "without_commands",
]
