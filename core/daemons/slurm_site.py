"""A site's Slurm settings and the checks a Slurm run gets before anything starts.

$HERMES_HOME/rl/slurm.yaml holds what every Slurm run on this site needs (account, QoS, GPUs, node
features, time limit and grace signal, the setup lines a worker runs before it starts), in the keys of a
run's `slurm:` section (launchers.SlurmSettings); what a start gives wins over it, except the commands
(setup, wrapper, python), which come from this file only. `preflight` asks the
cluster, before the run's first process starts, whether the partition exists (sinfo) and a worker job
with these settings would be accepted (`sbatch --test-only`), so a site problem is one clear error at
start, not a worker job refused after run-api and the trainer are up.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..base.errors import BadInput
from ..base.fsutil import read_yaml, write_regular_text
from ..base.paths import rl_dir
from .launchers import LauncherError, settings_over_site, slurm_call, slurm_settings

SITE_FILE = "slurm.yaml"


def site_file() -> Path:
    return rl_dir() / SITE_FILE


def site_settings() -> dict:
    """The site's `slurm:` defaults ({} without the file); BadInput naming the file when it is wrong."""
    path = site_file()
    data = read_yaml(path, what="Slurm site settings")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{path} must be a mapping of slurm settings (account: …, qos: …)")
    try:
        slurm_settings(data)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc.message}", hint=exc.hint) from None
    return data


def with_site_settings(given: dict | None) -> dict:
    """A start's `slurm:` settings over the site's; BadInput for a command (setup, wrapper, python) the
    start gives that the site's file does not say (launchers.settings_over_site)."""
    return settings_over_site("slurm", site_settings(), given, site_file=str(site_file()))


def preflight(data: dict) -> None:
    """BadInput, in Slurm's words, when the cluster would refuse a worker job with these settings: no
    Slurm commands, an unknown partition, or a job `sbatch --test-only` refuses (account, QoS, GRES,
    constraint, time limit)."""
    settings = slurm_settings(data)
    if settings.partition:
        _check_partition(settings.partition)
    with tempfile.TemporaryDirectory(prefix="hermes-slurm-") as folder:
        script = Path(folder) / "preflight.sbatch"
        write_regular_text(script, settings.script(["true"], ""))
        argv = ["sbatch", "--test-only", "--nodes=1", "--ntasks=1", *settings.sbatch_options(), str(script)]
        done = _call(argv)
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise BadInput(
            f"Slurm would not accept a worker job with these settings: {detail}",
            hint=f"fix the run's slurm settings or {site_file()}; `sbatch --test-only` says the same",
        )


def _check_partition(partition: str) -> None:
    done = _call(["sinfo", "--noheader", f"--partition={partition}", "--format=%P"])
    listed = {line.strip().rstrip("*") for line in done.stdout.splitlines() if line.strip()}
    if done.returncode != 0 or partition not in listed:
        known = _call(["sinfo", "--noheader", "--format=%P"]).stdout.split()
        raise BadInput(
            f"Slurm partition {partition!r} does not exist on this cluster",
            hint="partitions: " + (", ".join(p.rstrip("*") for p in known) or "none listed"),
        )


def _call(argv: list[str]):
    try:
        return slurm_call(argv)
    except LauncherError as exc:
        raise BadInput(f"cannot check the Slurm settings: {exc}") from None
