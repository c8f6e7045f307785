"""The project installs as one namespace, hermes_rl: nothing it ships can shadow a user's own
`environments`, `core` or `tui` package."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("core", "tui", "environments", "dataplane")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_hermes_rl():
    setuptools = _pyproject()["tool"]["setuptools"]
    on_disk = set()
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            on_disk.add(".".join(("hermes_rl", *parts)))
    data_only = {p for p in setuptools["packages"] if p not in on_disk}  # folders of package data
    for package in data_only:
        folder = ROOT.joinpath(*package.split(".")[1:])
        assert folder.is_dir() and not list(folder.glob("*.py")), package
    assert set(setuptools["packages"]) - data_only == on_disk
    assert setuptools["package-dir"] == {f"hermes_rl.{f}": f for f in FOLDERS}


def test_wheel_has_no_top_level_name_but_hermes_rl(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # Every shipped file is configured: no page of setuptools warnings at install (`is absent from the
    # packages configuration`).
    assert "absent from" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-2000:]
    wheel = next(tmp_path.glob("hermes_rl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"hermes_rl"}
    assert "hermes_rl/core/daemons/supervisor.py" in names
    assert "hermes_rl/tui/app.tcss" in names
    assert "hermes_rl/environments/data/gsm8k_sample.jsonl" in names
    assert {"hermes_rl/core/clients/plugin.yaml", "hermes_rl/core/clients/skills/training/SKILL.md"} <= set(names)


def test_installed_package_needs_no_project_folder_on_the_path(tmp_path):
    """From an unrelated folder, with nothing of ours on sys.path, every program starts from the install."""
    code = (
        "import sys, hermes_rl.core.daemons.supervisor, hermes_rl.dataplane.trainer, hermes_rl.tui.launcher; "
        f"print(any(p.rstrip('/') == {str(ROOT)!r} for p in sys.path))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    for name in FOLDERS:  # our folder names are free for the user's own packages
        probe = subprocess.run(
            [sys.executable, "-c", f"import {name}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr
