"""Sampling any saved checkpoint: a real local run on the tiny model, live and then stopped, whose checkpoints
answer a prompt and are scored by the run's environment (`hermes-rl sample`), the run's files untouched;
and the clear errors for a step never saved, a run with no checkpoint, a cloud run without its key."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from hermes_rl.core import runs
from hermes_rl.core.base.fsutil import atomic_write_json, read_jsonl
from hermes_rl.core.base.paths import run_dir
from hermes_rl.core.clients import cli
from hermes_rl.core.runs import sampling
from tests.fixtures_model import use_tiny_model
from tests.fixtures_tui import write_run

pytestmark = pytest.mark.usefixtures("run_processes_cleanup")


def _files(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.mark.slow
@pytest.mark.timeout(900)  # one run and three served checkpoints: 6.5 min at a load average of 9 on 2 cores
def test_a_live_then_stopped_runs_checkpoints_answer_prompts_and_are_scored(tiny_model_dir, capsys):
    use_tiny_model(tiny_model_dir, total_steps=2000)  # far more than the test lets it train
    run_id = runs.start_run("toy_addition", "local", {"save_checkpoint_interval": 2, "use_wandb": False})["run_id"]
    deadline = time.time() + 300
    while ((runs.get_run(run_id, sample=False).get("last_metric") or {}).get("step") or 0) < 4:
        assert runs.get_run(run_id, sample=False)["status"] in ("starting", "running")
        assert time.time() < deadline, "the run reached no step 4"
        time.sleep(0.2)

    # While the run trains on, its step-2 checkpoint answers a prompt.
    # toy_addition asks in raw text (chat: false): the prompt goes as it is, without --raw, and says so.
    assert cli.main(["sample", run_id, "--step", "2", "--prompt", "Q: 3+1=\nA:", "--n", "2", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["prompt_format"] == "raw" and "raw text" in answer["prompt_format_why"]
    assert answer["checkpoint"]["step"] == 2 and answer["checkpoint"]["status"] == "running"
    assert len(answer["completions"]) == 2 and all(c["text"].strip() for c in answer["completions"])
    assert runs.get_run(run_id, sample=False)["status"] == "running"  # undisturbed
    assert runs.stop_run(run_id, wait=30)["status"] == "stopped"

    saved = sampling.list_checkpoints(run_id)
    steps = [c["step"] for c in saved]
    assert steps[:2] == [2, 4] and steps == sorted(steps), saved
    assert saved[-1]["name"].startswith(("stop-", "step-")) and all(c["local_path"] for c in saved)
    assert len(read_jsonl(run_dir(run_id) / "checkpoints.jsonl")) == len(saved)
    before = _files(run_dir(run_id) / "checkpoints")

    code = cli.main(["sample", run_id, "--env", "--groups", "1", "--group-size", "4", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    assert summary["environment"] == "toy_addition" and summary["target"]["kind"] == "checkpoint"
    assert summary["target"]["checkpoint"]["step"] == steps[-1]
    scored = summary["completions"]
    assert len(scored) == 4 and all(0.0 <= c["score"] <= 1.0 for c in scored) and all(c["text"] for c in scored)
    assert _files(run_dir(run_id) / "checkpoints") == before  # the run's checkpoints were only read

    assert cli.main(["sample", run_id, "--step", "3", "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert "saved no checkpoint at step 3" in err and f"its saved steps: {', '.join(map(str, steps))}" in err

    # The dashboard's inference test, aimed at the same stopped run's step-4 checkpoint.
    asyncio.run(_dashboard_samples(f"{run_id}@4"))


async def _dashboard_samples(checkpoint: str) -> None:
    from textual.widgets import DataTable, Input, RichLog

    from hermes_rl.tui.app import HermesDashboard
    from hermes_rl.tui.panes.inference import InferenceScreen
    from tests.fixtures_tui import wait_for

    app = HermesDashboard()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("t")
        screen = app.screen
        assert isinstance(screen, InferenceScreen)
        screen.query_one("#inf-steps", Input).value = "1"
        screen.query_one("#inf-group", Input).value = "2"
        screen.query_one("#inf-checkpoint", Input).value = checkpoint
        await pilot.press("ctrl+r")
        table = screen.query_one(DataTable)

        def status() -> str:
            return str(table.get_cell_at((0, 1))) if table.row_count else ""

        await wait_for(pilot, lambda: status() in ("done", "failed"), timeout=240, what="the checkpoint's result")
        log = "\n".join(str(line.text) for line in screen.query_one(RichLog).lines)
        assert status() == "done", log
        assert "checkpoint @ step 4" in str(table.get_cell_at((0, 0)))
        assert "best · reward" in log


def test_a_run_without_checkpoints_is_a_clear_not_found(hermes_home, capsys):
    write_run("a1b2c3d4", status="failed", steps=3)
    assert cli.main(["sample", "a1b2c3d4", "--prompt", "hi"]) == 1
    assert "run a1b2c3d4 has saved no checkpoint yet" in capsys.readouterr().err


def test_an_older_runs_newest_save_comes_from_trainer_state(hermes_home):
    write_run("a1b2c3d4", status="stopped", steps=7)
    atomic_write_json(
        run_dir("a1b2c3d4") / "trainer_state.json",
        {"state_path": "tinker://m-1/weights/stop-000007", "step": 7, "backend": "tinker", "local_path": None},
    )
    (found,) = sampling.list_checkpoints("a1b2c3d4")
    assert found["step"] == 7 and found["name"] == "stop-000007" and found["local_path"] is None


def test_a_cloud_runs_checkpoint_needs_the_tinker_key(hermes_home, capsys):
    write_run("a1b2c3d4", status="completed", steps=7, profile="tinker")
    (run_dir("a1b2c3d4") / "config.yaml").write_text("backend: {kind: tinker}\ntinker: {base_model: Qwen/Qwen3-8B}\n")
    (run_dir("a1b2c3d4") / "checkpoints.jsonl").write_text(
        json.dumps({"name": "final", "state_path": "tinker://m-1/weights/final", "step": 7, "backend": "tinker"}) + "\n"
    )
    assert cli.main(["sample", "a1b2c3d4", "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert "checkpoints are on Tinker cloud: TINKER_API_KEY is not set" in err


def test_list_shows_each_saved_step_and_where_it_is(hermes_home, capsys):
    write_run("a1b2c3d4", status="completed", steps=6)
    with open(run_dir("a1b2c3d4") / "checkpoints.jsonl", "w") as handle:
        for step, name in ((3, "step-000003"), (6, "final")):
            folder = run_dir("a1b2c3d4") / "checkpoints" / "m-1" / "weights" / name
            folder.mkdir(parents=True)
            (folder / "adapter_model.safetensors").write_bytes(b"weights")
            row = {"name": name, "step": step, "state_path": f"tinker://m-1/weights/{name}", "local_path": str(folder)}
            handle.write(json.dumps(row | {"backend": "local"}) + "\n")
    assert cli.main(["sample", "a1b2c3d4", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["3", "6"] and lines[1].split()[2] == "final"
    assert lines[0].endswith("checkpoints/m-1/weights/step-000003")


def test_a_prompt_goes_as_the_run_asked_and_raw_to_a_model_without_a_chat_template(hermes_home, tmp_path):
    """`sample --prompt` needs no --raw where a chat template would make noise: a run whose environment asked
    in raw text, or a model with no template; the answer says which form was sent."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    write_run("a1b2c3d4", status="completed", steps=6)
    folder = run_dir("a1b2c3d4") / "checkpoints" / "m-1" / "weights" / "final"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    row = {"name": "final", "step": 6, "state_path": "tinker://m-1/weights/final", "local_path": str(folder)}
    (run_dir("a1b2c3d4") / "checkpoints.jsonl").write_text(json.dumps(row | {"backend": "local"}) + "\n")

    def checkpoint(chat: str) -> dict:
        (run_dir("a1b2c3d4") / "config.yaml").write_text(
            f"backend: {{kind: local, model_dir: {model}}}\nenv: {{group_size: 4{chat}}}\n"
        )
        return sampling.find_checkpoint("a1b2c3d4")

    assert sampling.prompt_format(checkpoint("")) == (False, "the model has no chat template")
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    assert sampling.prompt_format(checkpoint(""))[0] is True
    raw, why = sampling.prompt_format(checkpoint(", chat: false"))
    assert raw is False and "asked in raw text (chat: false)" in why
    assert sampling.prompt_format(checkpoint(", chat: false"), chat=True)[0] is True  # --chat
    assert sampling.prompt_format(checkpoint(", chat: true"))[0] is True
