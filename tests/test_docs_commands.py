"""The docs agree with the CLI: every `hermes-rl` command in a shell block of README.md and docs/*.md is one
the command line accepts, and those that run offline without a run, a key or a file of the reader's own run
in a scratch home as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from hermes_rl.core.clients.cli import main
from hermes_rl.core.clients.cli.parser import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# What runs in a scratch home: commands that read or set the environments and drafts, nothing that starts a
# run; lines naming the reader's own files or venvs (~/…, my_env, a taskset installed elsewhere) are parsed only.
RUNNABLE = ("envs", "select", "config", "runs")
# kuhn-poker: installed from verifiers' repository (docs/verifiers.md says how)
READERS_OWN = ("~", "my_env", "my-taskset", "hermes-vf-", "RUN", "kuhn-poker")


def documented_commands() -> list[tuple[str, str]]:
    """(file name, command line) for each `hermes-rl …` line of a fenced shell block, continuations joined
    and trailing comments dropped, in document order."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", path.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip().removeprefix("$ ")
                if line.startswith("hermes-rl "):
                    found.append((path.name, line))
    return found


def test_every_documented_command_is_accepted_by_the_command_line(capsys):
    commands = documented_commands()
    assert len(commands) >= 20, commands  # the parse found the blocks
    rejected = []
    for name, line in commands:
        try:
            build_parser().parse_args(shlex.split(line)[1:])
        except SystemExit as exc:
            if exc.code:
                rejected.append(f"{name}: {line}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert not rejected, "\n".join(rejected)


def test_the_documented_commands_that_run_offline_succeed_in_a_scratch_home(hermes_home, monkeypatch, capsys):
    for var in ("HERMES_RL_ENV_PATH", "HERMES_RL_ENV_PYTHON", "TINKER_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    runnable, elsewhere = [], set()  # files whose selection is the reader's own: their config lines too
    for name, line in documented_commands():
        command = shlex.split(line)[1]
        if any(word in line for word in READERS_OWN):
            elsewhere |= {name} if command == "select" else set()
        elif command in RUNNABLE and not (command == "config" and name in elsewhere):
            runnable.append((name, line))
    assert any(line == "hermes-rl config --set group_size=16" for _, line in runnable), runnable
    for name, line in runnable:  # the CLI's entry point in this process: a subprocess each would cost seconds
        code = main(shlex.split(line)[1:])
        err = capsys.readouterr().err
        assert code == 0, f"{name}: {line}: {err.strip()[-500:]}"


@pytest.mark.parametrize("page", ["docs/verifiers.md", "docs/migrating.md"])
def test_a_taskset_the_docs_use_is_said_where_it_comes_from(page):
    text = (ROOT / page).read_text()
    if "hermes-vf-digits" in text:
        assert "tests/data/vf_tasksets/hermes-vf-digits" in text or "docs/verifiers.md" in text
    assert "pip install ./my-taskset" not in text  # vf-init writes environments/my_taskset/
