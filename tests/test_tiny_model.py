"""The locally built tiny model: a real HF folder, the server's engine matches transformers and
peft exactly, and ensure_model is idempotent and race-safe. Also the server CLI's input checks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(300)


def test_model_folder_loads_offline_with_transformers(tiny_model_dir):
    from transformers import AutoTokenizer

    from hermes_rl.dataplane.tiny_model import BUILD_VERSION, read_marker

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # HF_HUB_OFFLINE=1: local files only
    for digit in "0123456789":
        assert len(tokenizer.encode(digit, add_special_tokens=False)) == 1
    assert [tokenizer.decode([t]) for t in tokenizer.encode("1234", add_special_tokens=False)] == list("1234")
    gsm8k = (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?\n#### 72"
    )
    assert tokenizer.decode(tokenizer.encode(gsm8k, add_special_tokens=False)) == gsm8k
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Q: 1+2="}], tokenize=False, add_generation_prompt=True, return_dict=False
    )
    assert chat == "<|user|>\nQ: 1+2=\n<|assistant|>\n"
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["vocab_size"] == len(tokenizer)
    marker = read_marker(tiny_model_dir)
    assert marker["version"] == BUILD_VERSION
    # Warm-started with the off-by-one habit: greedy answers are wrong (RL has all the room to raise
    # eval accuracy), yet a quarter of sampled answers are right (GRPO has a signal from the first step).
    warm = marker["warm_start"]
    assert warm["greedy_correct"] <= 0.2
    assert 0.15 <= warm["p_correct_digit"] <= 0.35
    assert 0.15 <= warm["toy_score_t1"] <= 0.4


def test_engine_and_lora_match_transformers_and_peft(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    from hermes_rl.dataplane.tinker_local.checkpoints import peft_config, peft_state_dict
    from hermes_rl.dataplane.tinker_local.engine import LORA_ALPHA, CausalLM
    from hermes_rl.dataplane.tinker_local.model_state import TrainModel

    lm = CausalLM(tiny_model_dir)
    ids = torch.randint(0, lm.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(17).expand(2, 17)
    reference = LlamaForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        assert torch.allclose(lm.forward(ids, positions), reference(input_ids=ids).logits, atol=1e-5)

    rank = 4
    adapter = lm.new_adapter(rank, lm.lora_modules(True, True, True), seed=1)
    generator = torch.Generator().manual_seed(2)
    adapter = {name: (a, torch.randn(b.shape, generator=generator) * 0.05) for name, (a, b) in adapter.items()}
    model = TrainModel("m", "s", str(tiny_model_dir), rank, {}, 1, adapter)
    save_file(peft_state_dict(adapter), str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps(peft_config(str(tiny_model_dir), model)))
    with torch.no_grad():
        ours = lm.forward(ids, positions, adapter, LORA_ALPHA / rank)
        theirs = PeftModel.from_pretrained(reference, tmp_path).eval()(input_ids=ids).logits
        assert not torch.allclose(ours, lm.forward(ids, positions), atol=1e-3)  # the adapter matters
        assert torch.allclose(ours, theirs, atol=1e-5)


def test_ensure_model_is_idempotent_and_safe_when_processes_race(tmp_path, monkeypatch):
    import hermes_rl.dataplane.tiny_model as tiny

    builds = []

    def fake_build(folder: Path, progress=None, recipe=None) -> dict:
        builds.append(folder)
        time.sleep(0.3)  # long enough for every racer to arrive while the build runs
        (folder / "weights.bin").write_text("w")
        marker = {"version": tiny.BUILD_VERSION}
        (folder / tiny.MARKER_NAME).write_text(json.dumps(marker))
        return marker

    monkeypatch.setattr(tiny, "build_into", fake_build)
    target = tmp_path / "models" / "tiny-toy"
    results: list[Path] = []
    racers = [threading.Thread(target=lambda: results.append(tiny.ensure_model(target))) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert results == [target.resolve()] * 4
    assert len(builds) == 1 and tiny.is_complete(target)
    assert tiny.ensure_model(target) == target.resolve() and len(builds) == 1  # idempotent
    assert sorted(p.name for p in target.parent.iterdir()) == [".tiny-toy.lock", "tiny-toy"]  # no temp leftovers

    # An outdated build (older marker version) is replaced, never half-overwritten.
    (target / tiny.MARKER_NAME).write_text(json.dumps({"version": tiny.BUILD_VERSION - 1}))
    (target / "stale.txt").write_text("old")
    tiny.ensure_model(target)
    assert len(builds) == 2 and tiny.is_complete(target) and not (target / "stale.txt").exists()


def test_builder_cli_reports_an_existing_model_quickly(tiny_model_dir):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.tiny_model", "--out", str(tiny_model_dir)],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},  # rich draws nothing at all at a width of 0
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "already built" in done.stderr, (done.stdout, done.stderr)
    assert time.monotonic() - started < 20


def _server(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.tinker_local", *args],
        cwd=ROOT,
        env={**os.environ, "TINKER_LOCAL_API_KEY": "tml-local-" + "0" * 32},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_server_cli_rejects_bad_input_clearly(tiny_model_dir, tmp_path):
    common = ["--checkpoint-dir", str(tmp_path / "ck")]
    refused = _server("--host", "0.0.0.0", "--port", "0", "--model-dir", str(tiny_model_dir), *common)
    assert refused.returncode == 2 and "loopback only" in refused.stderr

    missing = _server("--port", "0", "--model-dir", str(tmp_path / "nope"), *common)
    assert missing.returncode == 2 and "python -m hermes_rl.dataplane.models --out" in missing.stderr

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (broken / name).write_bytes((tiny_model_dir / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    corrupt = _server("--port", "0", "--model-dir", str(broken), *common)
    assert corrupt.returncode == 1 and "could not load the model" in corrupt.stderr  # exits, never serves half

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = _server("--port", str(port), "--model-dir", str(tiny_model_dir), *common)
    assert busy.returncode == 2 and f"port {port}" in busy.stderr and "already in use" in busy.stderr
