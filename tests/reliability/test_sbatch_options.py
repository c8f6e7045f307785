"""sbatch options are parsed as sbatch parses them (getopt: unique prefixes, attached values): only an
allowlist of options, spelled in full with the value attached, reaches sbatch, so none can replace the
job name, comment or log hermes-rl relies on, block sbatch (`--wait`) or run extra workers (`--array`).
And an sbatch that does not answer is a submission of unknown outcome: the worker is found by name,
never submitted again."""

from __future__ import annotations

import os
import stat

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.daemons.launchers import LauncherError
from hermes_rl.core.daemons.launchers import slurm as launchers
from hermes_rl.core.daemons.launchers.slurm import SlurmSettings, SlurmTracker, slurm_settings

pytestmark = [pytest.mark.reliability]


@pytest.mark.parametrize(
    "option",
    [
        "--comm=x",
        "--comment=x",
        "--out=/tmp/log",
        "-o/tmp/log",
        "-Jname",
        "--job-name=x",
        "-W",
        "--wait",
        "--array=1-3",
        "-a1-3",
        "--acc=proj",
        "--chdir=/",
        "-D/",
        "--export=NONE",
        "--parsable",
        "--wrap=id",
        "--account",
        "-A",
        "--test-only",
        "-H",
    ],
)
def test_options_outside_the_allowlist_or_abbreviated_are_refused(option):
    with pytest.raises(BadInput):
        slurm_settings({"sbatch_args": [option]})


@pytest.mark.parametrize(
    "option",
    [
        "--account=proj",
        "-Aproj",
        "--qos=high",
        "--gres=gpu:1",
        "-Cv100",
        "--signal=B:USR1@120",
        "--exclusive",
        "--mem-per-cpu=2G",
        "--time=10",
    ],
)
def test_allowed_options_pass_as_written(option):
    assert slurm_settings({"sbatch_args": [option]}).sbatch_args == [option]


def _tool(folder, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _tracker(tmp_path, monkeypatch, squeue: str) -> tuple[SlurmTracker, dict, object]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    submissions = tmp_path / "submissions"
    # an sbatch that queues the job and then never answers (a controller that lost its reply)
    _tool(bin_dir, "sbatch", f'echo submitted >> "{submissions}"\nexec sleep 30\n')
    _tool(bin_dir, "squeue", squeue)
    monkeypatch.setattr(launchers, "SLURM_CALL_TIMEOUT_S", 1.0)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return SlurmTracker("abcd1234", tmp_path / "run"), env, submissions


def _submit(tracker, env, tmp_path):
    (tmp_path / "run").mkdir(exist_ok=True)
    return tracker.submit(
        "env", ["true"], cwd=str(tmp_path), env=env, log=tmp_path / "env.log", settings=SlurmSettings()
    )


def test_an_sbatch_timeout_adopts_the_job_it_queued(tmp_path, monkeypatch):
    tracker, env, submissions = _tracker(tmp_path, monkeypatch, 'echo "4242|hermes-rl:abcd1234"\n')
    job = _submit(tracker, env, tmp_path)
    assert job.job_id == "4242"
    assert submissions.read_text().count("submitted") == 1


def test_an_sbatch_timeout_with_squeue_down_is_unknown_and_not_retried(tmp_path, monkeypatch):
    tracker, env, submissions = _tracker(tmp_path, monkeypatch, "exit 1\n")
    with pytest.raises(LauncherError) as failed:
        _submit(tracker, env, tmp_path)
    assert failed.value.retry is False and "not submitted again" in str(failed.value)
    assert submissions.read_text().count("submitted") == 1
