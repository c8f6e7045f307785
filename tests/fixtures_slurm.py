"""A one-node Slurm cluster on this machine for the Slurm launcher's tests (scripts/slurm_local.sh
installs and starts it: once per test session, shared by the xdist workers; their jobs are told apart
by the run id in each job's name and comment). A test that needs it is skipped, with the reason, where
it cannot be started (not root, no apt-get, daemons that do not come up)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

SETUP = ROOT / "scripts" / "slurm_local.sh"
SETUP_TIMEOUT_S = 600  # a fresh machine installs slurm-wlm and munge first


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The node's name once `srun -n1 hostname` answers."""
    if shutil.which("bash") is None:
        pytest.skip("no Slurm cluster: bash is missing")
    try:
        done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"no Slurm cluster: {SETUP.name} did not finish within {SETUP_TIMEOUT_S}s")
    if done.returncode != 0:
        reason = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        pytest.skip(f"no Slurm cluster: {reason}")
    node = subprocess.run(["srun", "-n1", "-t", "1", "hostname", "-s"], capture_output=True, text=True, timeout=60)
    return node.stdout.strip()


def squeue_jobs(run_id: str) -> dict[str, str]:
    """{job id: state} of every job squeue lists for the run (by the comment the launcher sets)."""
    done = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k"], capture_output=True, text=True, timeout=30, check=True)
    rows = [line.split("|") for line in done.stdout.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 3 and row[2] == f"hermes-rl:{run_id}"}
