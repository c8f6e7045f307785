"""What readers show of a process record's job, in the same words for every launcher: where it runs,
whether its record says it still runs, and the fields a view of it carries."""

from __future__ import annotations

from collections.abc import Mapping

from .base import job_of
from .registry import find


def where_of(proc: Mapping) -> str:
    """Where a process record runs, in the same words for every launcher: "local" here, else its
    launcher's line for its job ("node3 RUNNING", "PENDING"); "" before it has one."""
    launcher = find(proc.get("launcher") or "local")
    if launcher is None:
        return str(proc.get("launcher"))
    return launcher.where(job_of(proc) or {})


def recorded_job_running(proc: Mapping) -> bool:
    """Whether run.json records `proc` as a job its launcher last saw live. A job has no pid here to
    check, so its record (kept fresh by the supervisor's tracker) is what says it runs."""
    job = job_of(proc)
    launcher = find(proc.get("launcher") or "local")
    return job is not None and launcher is not None and launcher.job_running(job)


def job_view(proc: Mapping) -> dict:
    """What a reader shows of a process record's job, the same for every launcher: `job` (None for a
    process here), `job_id`, `node`, `where`, and the fields its launcher kept from earlier versions
    (Slurm: `slurm_state`); old run.json files (job_id, slurm_state) read the same."""
    job = job_of(proc)
    launcher = find(proc.get("launcher") or "local")
    legacy = launcher.view_fields(job) if launcher is not None and job is not None else {}
    return {
        "job": job,
        "job_id": job.get("id") if job else None,
        "node": job.get("node") if job else None,
        "where": where_of(proc),
        **legacy,
    }
