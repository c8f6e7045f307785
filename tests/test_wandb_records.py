"""A hermes-rl run's W&B runs read as one after `wandb sync`: an environment process, stopped by SIGTERM
as the supervisor stops it, ends its W&B run with an exit record (not "crashed"), and every process's
W&B run that names no group joins the group of its hermes-rl run (the run id). Checked on the offline
files W&B writes, read back record by record."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "abcd1234"

LOGGING_ENV = """
import time, wandb
wandb.init(project="hermes-rl-test", mode="offline", dir=".")  # as atroposlib does: its own group, None
wandb.log({"train/percent_correct": 0.5})
print("up", flush=True)
time.sleep(120)
"""


def wandb_records(path: Path):
    """The records of a .wandb file: W&B's log format (a 7-byte file header, then 32 KiB blocks of
    chunks, each with a 7-byte header: CRC, length, type FULL/FIRST/MIDDLE/LAST) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B data file"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:  # the rest of the block is padding
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.mark.timeout(120)
def test_a_stopped_environments_wandb_run_ends_and_joins_its_runs_group(tmp_path):
    (tmp_path / "logging_env.py").write_text(LOGGING_ENV)
    run_folder = tmp_path / "runs" / RUN_ID
    run_folder.mkdir(parents=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "HERMES_RL_RUN_DIR": str(run_folder),
    }
    env.pop("WANDB_RUN_GROUP", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_rl.dataplane.env_launch", str(tmp_path / "logging_env.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout.readline().split() == ["up"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == -signal.SIGTERM  # still ends by SIGTERM, as the supervisor reports it
    finally:
        proc.kill()
        proc.wait()
    (data_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    records = list(wandb_records(data_file))
    kinds = [r.WhichOneof("record_type") for r in records]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_group == RUN_ID
    assert "exit" in kinds, kinds
    (ended,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert ended.exit_code == 0
