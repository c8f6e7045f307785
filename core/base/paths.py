"""Where everything lives under $HERMES_HOME, and the guards that keep paths inside it."""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from pathlib import Path

from .errors import BadInput
from .names import is_name

RUN_ID_RE = re.compile(r"^[0-9a-f]{8}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}$")  # an environment id: name[@qualifier]
PROCESS_NAME_RE = re.compile(r"^[a-z0-9_-]{1,32}$")
# The folder holding the package folders (core/, tui/, environments/, dataplane/): a source checkout's root.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def hermes_home() -> Path:
    """$HERMES_HOME (default ~/.hermes) as one canonical absolute path. However a client spells it (a
    symlink, `..`, a path relative to its working folder), every path derived from it, every marker
    written from it and every comparison made on it names the same folder the same way."""
    raw = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
    return Path(os.path.realpath(os.path.expanduser(raw)))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same file or folder: by file identity (device and inode) when both
    exist, else by their canonical absolute paths (a folder that is gone is still known by name)."""
    try:
        first, second = os.stat(a), os.stat(b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def rl_dir() -> Path:
    return hermes_home() / "rl"


PROBE_CACHE_ENV = "HERMES_RL_PROBE_CACHE_DIR"


def probe_cache_dir() -> Path:
    """Where config probe results are kept: $HERMES_RL_PROBE_CACHE_DIR, else $HERMES_HOME/rl/cache. A
    result is keyed by the environment's path and valid while its files and the installed packages are
    unchanged, so several homes on one machine (and every test of a test run) can share one folder."""
    raw = os.environ.get(PROBE_CACHE_ENV)
    return Path(os.path.realpath(os.path.expanduser(raw))) if raw else rl_dir() / "cache"


def runs_dir() -> Path:
    return rl_dir() / "runs"


def drafts_dir() -> Path:
    return rl_dir() / "drafts"


def profiles_dir() -> Path:
    return rl_dir() / "profiles"


def models_dir() -> Path:
    return rl_dir() / "models"


def user_environments_dir() -> Path:
    return rl_dir() / "environments"


def current_selection_file() -> Path:
    return rl_dir() / "current.yaml"


def logs_dir() -> Path:
    return hermes_home() / "logs" / "rl_training"


def inference_trials_dir() -> Path:
    return logs_dir() / "inference_trials"


def older_inference_tests_dir() -> Path:
    """Where hermes-rl 0.1 kept the trials' folders; core.runs.trial moves them into inference_trials_dir."""
    return logs_dir() / "inference_tests"


def cli_command() -> str:
    """How the user runs hermes-rl from where they are: `hermes-rl` when that name on PATH is this
    installation's, else this installation's script, relative to the working directory when under it
    (`.venv/bin/hermes-rl` in a clone whose venv is not activated)."""
    script = Path(sys.prefix) / "bin" / "hermes-rl"
    found = shutil.which("hermes-rl")
    if not script.exists() or (found and Path(found).resolve() == script.resolve()):
        return "hermes-rl"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def validate_run_id(run_id: object) -> str:
    """Reject anything but 8 lowercase hex characters before it touches a path."""
    if not (isinstance(run_id, str) and is_name(RUN_ID_RE, run_id)):  # isinstance: for the type checker
        shown = repr(run_id)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        raise BadInput(
            f"invalid run id {shown}",
            hint="a run id is 8 lowercase hex characters, e.g. 3fa2c91b; see `hermes-rl runs`",
        )
    return run_id


def validate_env_name(name: object) -> str:
    if not (isinstance(name, str) and is_name(ENV_NAME_RE, name)):
        shown = repr(name)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        raise BadInput(f"invalid environment name {shown}", hint="see `hermes-rl envs` for the available names")
    return name


# The local Tinker server's checkpoint layout (its checkpoint folder, then <model id>/<kind>/<name>):
# one rule for the server that writes checkpoints and for `resume`, which finds them from a tinker:// path.
CHECKPOINT_KINDS = ("weights", "sampler_weights", "external_weights")
CHECKPOINT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def checkpoint_subpath(model_id: str, kind: str, name: str) -> str:
    """<model id, made path-safe>/<kind>/<name>: where a checkpoint lives under a checkpoint folder."""
    safe_model = re.sub(r"[^A-Za-z0-9._-]", "_", model_id).lstrip(".") or "_"
    return f"{safe_model}/{kind}/{name}"


def tinker_checkpoint_subpath(tinker_path: object) -> str:
    """checkpoint_subpath of a tinker://MODEL_ID/KIND/NAME path; BadInput for anything else."""
    text = tinker_path if isinstance(tinker_path, str) else ""
    parts = text[len("tinker://") :].split("/") if text.startswith("tinker://") else []
    if len(parts) != 3 or not parts[0] or parts[1] not in CHECKPOINT_KINDS or not is_name(CHECKPOINT_NAME_RE, parts[2]):
        raise BadInput(f"{str(tinker_path)[:80]!r} is not a tinker://MODEL_ID/weights/NAME checkpoint path")
    return checkpoint_subpath(*parts)


def run_dir(run_id: str) -> Path:
    return runs_dir() / validate_run_id(run_id)


def process_log_path(process_name: str, run_id: str) -> Path:
    """The seed's layout: logs/rl_training/{name}_{run_id}.log."""
    if not is_name(PROCESS_NAME_RE, process_name):
        raise BadInput(f"invalid process name {process_name!r}")
    return logs_dir() / f"{process_name}_{validate_run_id(run_id)}.log"


def make_private_dirs(path: str | os.PathLike) -> None:
    """Create a folder and each missing parent 0700 ($HERMES_HOME included: mkdir(parents=True) makes
    the parents with the umask's mode, 0755 under the usual 022, readable by every user)."""
    missing = []
    folder = Path(path)
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        os.chmod(folder, 0o700)  # the umask may have taken bits off mkdir's mode; never added any


def ensure_private_dir(path: Path) -> Path:
    """Create a folder (and parents) readable only by the owner."""
    make_private_dirs(path)
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    return path


def sweeps_dir() -> Path:
    return rl_dir() / "sweeps"


def sweep_queue_flag() -> Path:
    """Present while some sweep has runs waiting for a slot: a supervisor that ends looks for it
    (one stat) before starting `python -m hermes_rl.core.runs.sweeps start-queued`."""
    return sweeps_dir() / "queued"


def saved_checkpoint_folder(run_folder: Path, tinker_path: object, recorded: object = None) -> Path:
    """The folder of a run's saved checkpoint, derived from its tinker:// path inside the run's own folder
    (checkpoints/<model>/<kind>/<name>) — never a path a state file names, which could point into another
    home or any folder. BadInput when it is missing, reached through a symlink, holds anything but plain
    files and folders, or is not the folder `recorded` (the local_path the trainer wrote) names."""
    relative = "checkpoints/" + tinker_checkpoint_subpath(tinker_path)
    shown = f"the saved checkpoint {str(tinker_path)[:80]}"
    current = Path(run_folder)
    for part in relative.split("/"):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            raise BadInput(f"{shown} is not in {Path(run_folder) / 'checkpoints'}") from None
        if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
            raise BadInput(f"{shown}: {current} is {'a symlink' if stat.S_ISLNK(mode) else 'not a folder'}")
    for root, dirs, files in os.walk(current):
        for name in dirs + files:
            mode = os.lstat(os.path.join(root, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                what = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
                raise BadInput(
                    f"{shown} holds {os.path.join(root, name)}, {what}", hint="a checkpoint holds plain files"
                )
    if isinstance(recorded, str) and os.path.lexists(recorded) and not same_file(recorded, current):
        raise BadInput(f"{shown} is not the checkpoint its local_path names ({recorded[:120]})")
    return current
