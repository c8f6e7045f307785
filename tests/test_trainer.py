"""The trainer: config validation, GRPO maths, and (with the local Tinker server) the real loop pieces."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hermes_rl.dataplane.trainer import grpo
from hermes_rl.dataplane.trainer.settings import ConfigError, load_settings

ROOT = Path(__file__).resolve().parent.parent


def base_config(tmp_path: Path, **changes) -> dict:
    config = {
        "env": {
            "group_size": 4,
            "batch_size": 8,
            "total_steps": 3,
            "max_token_length": 32,
            "rollout_server_url": "http://127.0.0.1:9",
            "tokenizer_name": "m",
        },
        "openai": [{"base_url": "http://127.0.0.1:8123/v1", "model_name": "m"}],
        "tinker": {"base_model": "m", "lora_rank": 4, "learning_rate": 1e-3},
        "backend": {"kind": "local", "base_url": "http://127.0.0.1:8124"},
        "hermes": {"run_dir": str(tmp_path)},
    }
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        target = config[section][0] if isinstance(config[section], list) else config[section]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return config


def write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_settings_read_the_run_config(tmp_path):
    s = load_settings(write(tmp_path, base_config(tmp_path)))
    assert (s.backend, s.base_url, s.inference_port) == ("local", "http://127.0.0.1:8124", 8123)
    assert (s.batch_size, s.group_size) == (8, 4)
    assert s.metrics_path == tmp_path / "metrics.jsonl"
    assert s.results_path == tmp_path / "results.json"
    assert (s.beta1, s.beta2, s.learning_rate) == (0.9, 0.95, 1e-3)
    assert s.wandb_mode == "offline"  # no WANDB_API_KEY in tests
    assert (s.loss_fn, s.loss_fn_config) == ("importance_sampling", {})


def test_settings_read_the_resume_point(tmp_path):
    config = base_config(tmp_path)
    config["hermes"]["resume"] = {"parent_run_id": "0badc0de", "state_path": "tinker://m:train:0/weights/s", "step": 2}
    s = load_settings(write(tmp_path, config))
    assert (s.resume_state, s.resume_step) == ("tinker://m:train:0/weights/s", 2)
    config["hermes"]["resume"]["step"] = 3  # == total_steps: nothing left to train
    with pytest.raises(ConfigError, match=r"hermes\.resume\.step \(3\) must be below env\.total_steps \(3\)"):
        load_settings(write(tmp_path, config))


def test_settings_choose_the_policy_loss_and_its_parameters(tmp_path):
    config = base_config(tmp_path, tinker__loss_fn="ppo", tinker__loss_fn_config={"clip_high_threshold": 1.28})
    s = load_settings(write(tmp_path, config))
    assert (s.loss_fn, s.loss_fn_config) == ("ppo", {"clip_high_threshold": 1.28})


@pytest.mark.parametrize(
    "change, words",
    [
        ({"env__batch_size": 6}, "multiple of env.group_size"),
        ({"env__group_size": "four"}, "env.group_size must be a number"),
        ({"tinker__learning_rate": None}, "tinker.learning_rate is missing"),
        ({"backend__base_url": None}, "backend.base_url is missing"),
        ({"openai__base_url": "http://127.0.0.1/v1"}, "must name a port"),
        ({"env__total_steps": 0}, "env.total_steps must be >= 1"),
        ({"backend__kind": "gpu"}, "backend.kind"),
        ({"tinker__loss_fn": "gspo"}, "tinker.loss_fn must be one of 'importance_sampling', 'ppo', 'cispo' or 'dro'"),
        ({"tinker__loss_fn_config": {"beta": "high"}}, "tinker.loss_fn_config.beta must be a number"),
    ],
)
def test_bad_values_name_the_key(tmp_path, change, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_settings(write(tmp_path, base_config(tmp_path, **change)))


def test_trainer_rejects_a_bad_config_with_exit_2_and_a_clear_log(tmp_path):
    path = write(tmp_path, base_config(tmp_path, env__batch_size=6))
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "config rejected" in proc.stderr and "env.batch_size (6)" in proc.stderr
    assert not (tmp_path / "results.json").exists()


def test_cloud_profile_without_key_fails_fast(tmp_path, monkeypatch):
    config = base_config(tmp_path, backend__kind="tinker", backend__base_url=None)
    path = write(tmp_path, config)
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 3
    assert "TINKER_API_KEY is not set" in proc.stderr


def test_cloud_profile_with_malformed_key_fails_fast_without_echoing_it(tmp_path):
    path = write(tmp_path, base_config(tmp_path, backend__kind="tinker", backend__base_url=None))
    env = {**os.environ, "TINKER_API_KEY": "sk-not-a-tinker-key-SECRET123"}
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 3
    assert "start with 'tml-'" in proc.stderr
    assert "SECRET123" not in proc.stderr + proc.stdout


def group(scores, prompt_len=3, completion_len=2, with_logprobs=True):
    tokens, masks, lps = [], [], []
    for i, _ in enumerate(scores):
        seq = list(range(10, 10 + prompt_len)) + [50 + i] * completion_len
        tokens.append(seq)
        masks.append([-100] * prompt_len + seq[prompt_len:])
        lps.append([1.0] * prompt_len + [-0.5] * completion_len)
    data = {"tokens": tokens, "masks": masks, "scores": list(scores)}
    if with_logprobs:
        data["inference_logprobs"] = lps
    return data


def test_grpo_advantages_are_reward_minus_group_mean_without_std_scaling():
    sequences, stats = grpo.build_sequences([group([1.0, 0.0, 0.5, 0.5])], max_length=100)
    assert [s.advantage for s in sequences] == [0.5, -0.5, 0.0, 0.0]
    seq = sequences[0]
    # next-token targets; prompt positions carry no advantage and no sampler logprob
    assert seq.target_tokens == [11, 12, 50, 50]
    assert seq.advantages == [0.0, 0.0, 0.5, 0.5]
    assert seq.sampling_logprobs == [0.0, 0.0, -0.5, -0.5]
    assert stats.rewards == [1.0, 0.0, 0.5, 0.5]


def test_grpo_drops_groups_without_signal_but_counts_their_reward():
    sequences, stats = grpo.build_sequences([group([1.0, 1.0]), group([0.0, 1.0])], max_length=100)
    assert len(sequences) == 2 and stats.groups_dropped == 1
    assert stats.rewards == [1.0, 1.0, 0.0, 1.0]


def test_grpo_skips_sequences_longer_than_the_trainer_limit():
    sequences, stats = grpo.build_sequences([group([1.0, 0.0], prompt_len=30)], max_length=20)
    assert sequences == [] and stats.sequences_dropped == 2


def test_step_statistics_importance_sampling_loss():
    sequences, _ = grpo.build_sequences([group([1.0, 0.0])], max_length=100)
    # training logprobs equal to the sampler's: ratio 1, loss = -mean(advantage) over completion tokens = 0
    same = [[0.0, 0.0, -0.5, -0.5]] * 2
    stats = grpo.step_statistics(sequences, same)
    assert stats["train/loss"] == pytest.approx(0.0)
    assert stats["logprobs/diff"] == pytest.approx(0.0)
    higher = [[0.0, 0.0, -0.25, -0.25]] * 2
    stats = grpo.step_statistics(sequences, higher)
    assert stats["logprobs/diff"] == pytest.approx(0.25)
    assert stats["train/loss"] == pytest.approx(-(math.exp(0.25) * 0.5 - math.exp(0.25) * 0.5) / 4)


def test_folder_tokenizer_matches_transformers(tiny_model_dir):
    """The trainer reads the local model's tokenizer without transformers (start-up time); it must
    agree with what the environments use (transformers) token for token."""
    from transformers import AutoTokenizer

    from hermes_rl.dataplane.trainer.tokenizer import load_tokenizer

    ours, theirs = load_tokenizer(str(tiny_model_dir)), AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for text in ["Q: 3+4=\nA:", " 7\n", "Maya has 12 apples. How many?"]:
        ids = ours.encode(text)
        assert ids == theirs.encode(text)
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, return_dict=False
    )


def test_inference_server_speaks_sglang_and_openai_with_logprobs(tinker_local, tiny_model_dir):
    """The trainer's inference server over a real sampling client from the local Tinker server,
    driven by the real clients environments use: atroposlib's SGLang server (/generate, what the
    managed server calls) and the OpenAI SDK (/v1/completions, /v1/chat/completions)."""
    import asyncio

    import aiohttp
    import openai
    import tinker
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.sglang_server import SGLangServer

    from hermes_rl.core.daemons.pipeline import free_ports
    from hermes_rl.dataplane.trainer.inference import Policy, start_server
    from hermes_rl.dataplane.trainer.tokenizer import load_tokenizer

    model = str(tiny_model_dir)
    port = free_ports(["inference"])["inference"]
    base = f"http://127.0.0.1:{port}"

    async def scenario():
        service = tinker.ServiceClient()
        training = await service.create_lora_training_client(base_model=model, rank=4)
        policy = Policy(load_tokenizer(model), model)
        runner = await start_server(policy, "127.0.0.1", port)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/health") as resp:
                    assert resp.status == 503  # no policy yet: not ready
                policy.set_client(await training.save_weights_and_get_sampling_client(), 3)
                async with http.get(f"{base}/health") as resp:
                    assert resp.status == 200 and (await resp.json())["step"] == 3
                async with http.post(f"{base}/v1/completions", json={"prompt": "hi", "n": "two"}) as resp:
                    assert resp.status == 400 and "n must be a positive integer" in (await resp.text())

            server = SGLangServer(
                APIServerConfig(
                    model_name=model,
                    tokenizer_name=model,
                    base_url=f"{base}/v1",
                    api_key="x",
                    server_type="sglang",
                    health_check=False,
                )
            )
            prompt_tokens, outputs, logprobs, finish = await server.tokens_and_logprobs_completion(
                prompt="Q: 2+3=\nA:", n=4, max_tokens=4, temperature=1.0, stop=["\n"]
            )
            assert len(outputs) == len(logprobs) == len(finish) == 4
            assert prompt_tokens == policy.tokenizer.encode("Q: 2+3=\nA:")
            for toks, lps in zip(outputs, logprobs):
                assert 1 <= len(toks) <= 4 and len(lps) == len(toks) and all(lp <= 0.0 for lp in lps)

            client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="x")
            completion = await client.completions.create(
                model=model, prompt="Q: 1+1=\nA:", n=3, max_tokens=3, temperature=0.0, logprobs=1
            )
            assert len(completion.choices) == 3
            assert len(completion.choices[0].logprobs.token_logprobs) == len(completion.choices[0].logprobs.tokens)
            chat = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "2+2?"}], max_tokens=3, logprobs=True
            )
            assert chat.choices[0].message.role == "assistant"
            assert chat.choices[0].logprobs.content and chat.choices[0].logprobs.content[0].logprob <= 0.0
            await client.close()
        finally:
            await runner.cleanup()
            await service.close("success")

    asyncio.run(scenario())


@pytest.mark.timeout(240)
def test_trainer_registers_serves_and_stops_cleanly_on_sigterm(tinker_local, tiny_model_dir, tmp_path):
    """Real run-api + local Tinker server: the trainer registers (so run-api lets environments in),
    becomes healthy, and on SIGTERM exits 0 without results.json (a stop, not a completion)."""
    import signal
    import time
    import urllib.request

    from hermes_rl.core.daemons.pipeline import free_ports

    ports = free_ports(["api", "inference"])
    config = base_config(
        tmp_path,
        env__total_steps=50,
        backend__base_url=tinker_local.url,
        tinker__base_model=str(tiny_model_dir),
        env__tokenizer_name=str(tiny_model_dir),
    )
    config["env"]["rollout_server_url"] = f"http://127.0.0.1:{ports['api']}"
    config["openai"][0]["base_url"] = f"http://127.0.0.1:{ports['inference']}/v1"
    config["env"]["use_wandb"] = False
    path = write(tmp_path, config)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TINKER_API_KEY", None)  # the trainer sends the server's credential, TINKER_LOCAL_API_KEY, itself
    api_argv = [sys.executable, "-m", "atroposlib.cli.run_api", "--host", "127.0.0.1", "--port", str(ports["api"])]
    api = subprocess.Popen(
        api_argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    log_path = tmp_path / "trainer.log"
    trainer = None
    try:

        def get(url):
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return resp.status, json.loads(resp.read() or b"null")
            except Exception as exc:
                return getattr(exc, "code", None), None

        deadline = time.time() + 60
        while get(f"http://127.0.0.1:{ports['api']}/status")[0] != 200:
            assert time.time() < deadline, "run-api did not start"
            time.sleep(0.3)
        with open(log_path, "w") as log:
            trainer = subprocess.Popen(
                [sys.executable, "-m", "hermes_rl.dataplane.trainer", "--config", str(path)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.time() + 120
        while get(f"http://127.0.0.1:{ports['inference']}/health")[0] != 200:
            assert trainer.poll() is None, log_path.read_text()
            assert time.time() < deadline, log_path.read_text()
            time.sleep(0.3)
        # registered with run-api, which now accepts environments
        req = urllib.request.Request(
            f"http://127.0.0.1:{ports['api']}/register-env",
            method="POST",
            data=json.dumps({"max_token_length": 32, "desired_name": "t", "weight": 1.0, "group_size": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["status"] == "success"
        assert get(f"http://127.0.0.1:{ports['api']}/info")[1]["batch_size"] == 8
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=30) == 0
        assert "stopped by SIGTERM" in log_path.read_text()
        assert not (tmp_path / "results.json").exists()
        assert "tml-" not in " ".join(trainer.args)
    finally:
        for proc in (trainer, api):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
