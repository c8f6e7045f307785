"""Run an environment file (`python -m hermes_rl.dataplane.env_launch FILE serve --config ...`) with
W&B made harmless (dataplane/wandb_fallback): if `wandb.init` fails (W&B unreachable, a bad key, its own
timeout), the run goes on logging to W&B offline, with one warning line, instead of the environment
crashing and being restarted into the same failure; and with transformers 5's chat templates returning
token ids where atroposlib 0.4 expects them (compat.chat_template_returns_ids); and, once it has
registered with run-api, its env_id noted in the run folder's env_ids.jsonl beside the process and
environment names (run-api's batches name environments only by that id); and with the run's policy
server given to an environment whose config_init names several (one_policy_server); and with an
environment owed a share of each batch counting only its own queued groups
(count_own_groups_with_a_share); with an error the environment raises while it makes or scores an item
located and counted (locate_environment_errors): atroposlib logs only its message, once per item; and
with the trainer's inference server going away after the last step logged as the run's end, not as an
error (TrainerFinished); and with the run's endpoint key (endpoint_key). Everything else is the file run as
`python FILE ...` (a file in a package as its package module, core.envs.envload)."""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_rl.core.base.fsutil import append_jsonl, leave_no_temporary_folders_on_sigterm
from hermes_rl.core.base.secrets import ENDPOINT_KEY_ENV, ENDPOINT_KEY_PLACEHOLDER
from hermes_rl.core.daemons.procscan import MARKER, PROCESS_MARKER
from hermes_rl.core.envs.envload import run_environment

from .compat import chat_template_returns_ids
from .wandb_fallback import finish_wandb_on_sigterm, install_wandb_fallback

ENV_IDS_FILE = "env_ids.jsonl"
RUN_DIR_VAR = "HERMES_RL_RUN_DIR"  # core.daemons.procscan.MARKER: every process of a run is started with it


def record_registrations() -> None:
    """Wrap BaseEnv.register_env so that each registration appends {time, env_id, process, environment}
    to <run>/env_ids.jsonl (a restarted worker registers again, under a new id)."""

    folder = os.environ.get(MARKER)
    if not folder:
        return
    try:
        from atroposlib.envs.base import BaseEnv  # noqa: PLC0415 - atroposlib (torch): optional
    except ImportError:
        return
    original = BaseEnv.register_env

    async def register_env(self):
        await original(self)

        row = {
            "time": time.time(),
            "env_id": getattr(self, "env_id", None),
            "process": os.environ.get(PROCESS_MARKER),
            "environment": getattr(self, "name", None) or type(self).__name__,
        }
        try:
            append_jsonl(Path(folder) / ENV_IDS_FILE, row)
        except OSError:
            pass  # only the per-environment views miss it; training goes on

    BaseEnv.register_env = register_env


class ServerRolesError(SystemExit):
    """An environment whose config_init names servers for different models: it cannot train on one policy."""


def one_policy_server() -> None:
    """Give the run's policy server to an environment whose config_init returns several server configs.

    atroposlib 0.4 merges the run's `openai` settings into the environment's defaults only when there is
    one: with several (replicas of one model on ports 9004–9007, as textworld and diplomacy ship), the
    environment keeps calling its own servers, never the policy, and waits on them silently. Replicas of
    one model become one server, which the run's settings then replace (one warning line says so); servers
    for different models (a teacher beside the student) are different roles that one policy cannot play,
    so the process ends naming them."""
    try:
        from atroposlib.envs.base import BaseEnv  # noqa: PLC0415 - atroposlib (torch): optional
        from atroposlib.envs.server_handling.server_baseline import APIServerConfig  # noqa: PLC0415 - same
    except ImportError:
        return
    original_cli = BaseEnv.cli.__func__

    def cli(cls):
        config_init = cls.config_init

        def one_server():
            result = config_init()
            if not (isinstance(result, tuple) and len(result) == 2):
                return result  # atroposlib says what is wrong with it
            env_config, servers = result
            if not (isinstance(servers, list) and len(servers) > 1):
                return result
            if not all(isinstance(s, APIServerConfig) for s in servers):
                return result
            models = sorted({str(s.model_name) for s in servers})
            where = ", ".join(str(s.base_url) for s in servers)
            if len(models) > 1:
                raise ServerRolesError(
                    f"ServerRolesError: {cls.__name__}.config_init() names servers for {len(models)} different models "
                    f"({', '.join(models)} at {where}); a run serves one policy, so this environment cannot "
                    "train here (atroposlib merges the run's server only into an environment with one)"
                )
            sys.stderr.write(
                f"hermes-rl: {cls.__name__}.config_init() names {len(servers)} servers of {models[0]} ({where}); "
                "the run's policy server replaces them\n"
            )
            return env_config, servers[:1]

        cls.config_init = staticmethod(one_server)
        return original_cli(cls)

    BaseEnv.cli = classmethod(cli)


def endpoint_key() -> None:
    """Servers whose api_key is the run config's placeholder (core.base.secrets.ENDPOINT_KEY_PLACEHOLDER) get
    the run's endpoint key from this process's environment, where the supervisor put it: config.yaml never
    holds the key, and the trainer's inference server refuses a client without it."""
    try:
        from atroposlib.envs.server_handling.server_manager import ServerManager  # noqa: PLC0415 - atroposlib (torch): optional
    except ImportError:
        return
    key = os.environ.get(ENDPOINT_KEY_ENV)
    original_init = ServerManager.__init__

    def init(self, configs, *args, **kwargs):
        if key and isinstance(configs, list):
            configs = [
                c.model_copy(update={"api_key": key}) if getattr(c, "api_key", None) == ENDPOINT_KEY_PLACEHOLDER else c
                for c in configs
            ]
        elif key and getattr(configs, "api_key", None) == ENDPOINT_KEY_PLACEHOLDER:
            configs = configs.model_copy(update={"api_key": key})
        original_init(self, configs, *args, **kwargs)

    ServerManager.__init__ = init


def count_own_groups_with_a_share() -> None:
    """An environment owed a share of every batch (min_batch_allocation) counts its own queued groups, not
    every environment's, in BaseEnv.env_manager's rules. Its end rule (current step + queued groups' batches
    past total_steps) otherwise counts a mixed-in environment's groups as its own and ends early; run-api
    then keeps waiting for this environment's share of the last batches, and the run hangs."""
    try:
        from atroposlib.envs.base import BaseEnv  # noqa: PLC0415 - atroposlib (torch): optional
    except ImportError:
        return
    original = BaseEnv.get_status

    async def get_status(self):
        await original(self)
        status = getattr(self, "status_dict", None)
        if getattr(self.config, "min_batch_allocation", None) is not None and isinstance(status, dict):
            if isinstance(status.get("self_queue_size"), int):
                status["queue_size"] = status["self_queue_size"]

    BaseEnv.get_status = get_status


REPEAT_FIRST_S = 1.0  # a repeated error's first count line comes this long after the error's first line
REPEAT_EVERY_S = 60.0  # and the later ones twice as long apart each time, up to this


def _where(exc: BaseException, step: str) -> str:
    """`at FILE:LINE[ in FUNCTION]` of an exception: the innermost frame of the environment's own code (not
    an installed package's, nor Python's), else the innermost frame. FILE is the file's name (the first
    traceback has the whole path): a run's reason quotes the first 120 characters of the line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    libraries = tuple(p for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "purelib", "platlib")} if p)
    own = [f for f in frames if not f.filename.startswith(libraries) and "site-packages" not in f.filename]
    chosen = own or frames
    if not chosen:
        return "at an unknown place"
    frame = chosen[-1]
    path = frame.filename.split("site-packages/")[-1] if not own else os.path.basename(frame.filename)
    return f"at {path}:{frame.lineno}" + (f" in {frame.name}" if frame.name != step else "")


class ErrorCounter:
    """The errors an environment raises while it makes (collect_trajectories) or scores (postprocess_histories)
    items, logged in atroposlib's words with where they were raised: the first of each (same step, type,
    file and line) with its traceback, its repeats as one line saying how many it stands for (`Error in STEP
    (×N since the last line) at …`, which the supervisor's log watch counts as N), REPEAT_FIRST_S after the
    first, then twice as long each time, at most every_s apart: a run's reason names the error within
    seconds, and an hour of it is about 70 lines, not one per item."""

    def __init__(self, log: logging.Logger | None = None, every_s: float = REPEAT_EVERY_S):
        self.log = log or logging.getLogger()  # the root logger, as atroposlib's own line per item
        self.every_s = every_s
        self.seen: dict[tuple[str, str], list] = {}  # (step, where) -> [repeats not logged, last line's time, wait]

    def record(self, step: str, exc: BaseException) -> None:
        where = f"{_where(exc, step)}: {type(exc).__name__}"
        known = self.seen.get((step, where))
        now = time.monotonic()
        if known is None:
            self.seen[(step, where)] = [0, now, min(REPEAT_FIRST_S, self.every_s)]
            self.log.error("Error in %s %s: %s", step, where, exc, exc_info=exc)  # its one traceback
            return
        known[0] += 1
        if now - known[1] >= known[2]:
            # the count first: a log reader keeps a line's first few hundred characters
            self.log.error("Error in %s (×%d since the last line) %s: %s", step, known[0], where, exc)
            known[0], known[1], known[2] = 0, now, min(2 * known[2], self.every_s)


def locate_environment_errors(counter: ErrorCounter | None = None) -> None:
    """Wrap each environment's collect_trajectories and postprocess_histories (its own, whatever class
    defines them) so that an error they raise is logged located and counted (ErrorCounter), then handled
    as atroposlib's handle_env handles it: the item yields nothing. atroposlib's own line per item, which
    names no file or line, is then not written."""
    try:
        from atroposlib.envs.base import BaseEnv  # noqa: PLC0415 - atroposlib (torch): optional
    except ImportError:
        return
    errors = counter or ErrorCounter()
    original = BaseEnv.handle_env

    def wrap(env, name: str, failed: Callable[[], Any]) -> None:
        inner = getattr(env, name)

        async def located(*args, **kwargs):
            try:
                return await inner(*args, **kwargs)
            except Exception as exc:  # what atroposlib's handle_env catches, counted here instead
                errors.record(name, exc)
                return failed()

        setattr(env, name, located)

    async def handle_env(self, item_uuid):
        if not getattr(self, "_hermes_rl_located", False):
            self._hermes_rl_located = True
            wrap(self, "collect_trajectories", lambda: (None, []))  # what atroposlib's own except leaves
            wrap(self, "postprocess_histories", lambda: None)
        return await original(self, item_uuid)

    BaseEnv.handle_env = handle_env


COLLECT_ERROR = "Error in collect_trajectories"  # atroposlib 0.4's BaseEnv.handle_env line, and ErrorCounter's


class TrainerFinished(logging.Filter):
    """Once the trainer has finished (results.json is in the run folder: the last step is done), an
    environment still sampling loses the trainer's inference server as it shuts down. That is the run's
    normal end, not an error: the line is kept, as INFO saying so, so a clean end reads clean."""

    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.results = Path(run_dir) / "results.json"

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage() if record.levelno >= logging.ERROR else ""
        if message.startswith(COLLECT_ERROR) and self.results.exists():
            detail = message[len(COLLECT_ERROR) :].lstrip(": ")
            record.msg, record.args = f"the trainer has finished: a rollout in flight was dropped ({detail})", ()
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def quiet_end_of_run() -> None:
    run_dir = os.environ.get(RUN_DIR_VAR)
    if run_dir:
        logging.getLogger().addFilter(TrainerFinished(run_dir))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m hermes_rl.dataplane.env_launch ENV_FILE [ARGS...]")
    leave_no_temporary_folders_on_sigterm()  # an environment is stopped with SIGTERM
    install_wandb_fallback()
    finish_wandb_on_sigterm()  # before the folders go: its W&B run ends with an exit record
    try:
        chat_template_returns_ids()  # every environment imports atroposlib, which imports transformers
    except ImportError:
        pass
    record_registrations()
    quiet_end_of_run()
    one_policy_server()
    endpoint_key()
    count_own_groups_with_a_share()
    locate_environment_errors()
    env_file = sys.argv[1]
    sys.argv = sys.argv[1:]
    run_environment(env_file)  # loaded as the config probe loads it: relative imports behave the same


if __name__ == "__main__":
    main()
