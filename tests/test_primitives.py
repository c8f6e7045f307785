"""paths, fsutil and secrets: the guards every client relies on."""

from __future__ import annotations

import io
import json
import logging
import os
import stat

import pytest

from hermes_rl.core.base import fsutil, paths, secrets
from hermes_rl.core.base.errors import BadInput


@pytest.mark.parametrize(
    "bad",
    [
        "../../etc",
        "/etc/passwd",
        "ABCDEF12",
        "abc",
        "a" * 10_000,
        "3fa2c91g",
        "3fa2c91b/..",
        "ünïcødé",
        None,
        12345678,
        "",
    ],
)
def test_run_ids_that_escape_or_are_malformed_are_rejected(bad):
    with pytest.raises(BadInput) as info:
        paths.run_dir(bad)
    assert "8 lowercase hex" in info.value.hint
    assert len(str(info.value)) < 300


def test_valid_run_id_stays_inside_runs_dir(hermes_home):
    assert paths.run_dir("3fa2c91b") == hermes_home / "rl" / "runs" / "3fa2c91b"


def test_atomic_write_is_private_and_complete(tmp_path):
    target = tmp_path / "state" / "run.json"
    fsutil.atomic_write_json(target, {"status": "running", "n": list(range(1000))})
    assert json.loads(target.read_text())["status"] == "running"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


def test_jsonl_reader_skips_partial_garbage_and_non_finite(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        b'{"step": 1, "reward/mean": 0.5}\n'
        b"garbage \xff\xfe\n"
        b"[1, 2]\n"
        b'{"step": 2, "reward/mean": NaN, "train/loss": Infinity}\n'
        b'{"step": 3, "rew'
    )
    rows = fsutil.read_jsonl(path)
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[1]["reward/mean"] is None and rows[1]["train/loss"] is None
    # the partial line is picked up once the writer finishes it
    with open(path, "ab") as handle:
        handle.write(b'ard/mean": 0.9}\n')
    assert [row["step"] for row in fsutil.read_jsonl(path)] == [1, 2, 3]


def test_env_file_is_read_and_environment_wins(hermes_home, monkeypatch):
    (hermes_home / ".env").write_text(
        "# keys\nTINKER_API_KEY=tml-from-file\nexport WANDB_API_KEY='wb-from-file'\nnot a line\n"
    )
    assert secrets.get_key("TINKER_API_KEY") == "tml-from-file"
    assert secrets.get_key("WANDB_API_KEY") == "wb-from-file"
    monkeypatch.setenv("TINKER_API_KEY", "tml-from-env")
    assert secrets.get_key("TINKER_API_KEY") == "tml-from-env"
    assert secrets.keys_present() == {"TINKER_API_KEY": True, "WANDB_API_KEY": True, "OPENROUTER_API_KEY": False}
    assert "tml-from-env" not in secrets.redact("key tml-from-env and wb-from-file")
    assert "wb-from-file" not in secrets.redact("key tml-from-env and wb-from-file")


def test_env_file_follows_dotenv_syntax_and_skips_bad_lines_quietly(hermes_home, caplog):
    (hermes_home / ".env").write_text(
        'TINKER_API_KEY="quoted value"  # a comment\nnot a line\nWANDB_API_KEY=${HOME}\nOPENROUTER_API_KEY\n'
    )
    (hermes_home / ".env").chmod(0o600)  # a private .env: the only warning would be about bad lines
    with caplog.at_level(logging.WARNING):
        assert secrets.read_env_file() == {"TINKER_API_KEY": "quoted value", "WANDB_API_KEY": "${HOME}"}
    assert not caplog.records
    # Only our reads are quiet: a host process's own python-dotenv reads still warn about bad lines.
    from dotenv import dotenv_values

    with caplog.at_level(logging.WARNING):
        dotenv_values(stream=io.StringIO("not a line\n"))
    assert any("could not parse" in record.getMessage() for record in caplog.records)
