"""GSM8K grade-school math, scored with math-verify (as the tinker-atropos seed environment).

Loads `datasets.load_dataset("gsm8k", "main")`; when the hub cannot be reached (HF_HUB_OFFLINE=1,
no network, any load error) it falls back to the small bundled sample in
environments/data/gsm8k_sample.jsonl and says so in the log.
Run: `python environments/gsm8k.py serve --config CONFIG_YAML`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from pathlib import Path

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, EvalHandlingEnum, ScoredDataGroup
from pydantic import Field

from hermes_rl.environments import env_metrics

log = logging.getLogger("gsm8k")

SAMPLE_PATH = Path(__file__).resolve().parent / "data" / "gsm8k_sample.jsonl"
SYSTEM_PROMPT = (
    "You are a deep thinking AI, you may use extremely long chains of thought to deeply consider the "
    "problem and deliberate with yourself via systematic reasoning processes to help come to a correct "
    "solution prior to answering. You should enclose your thoughts and internal monologue inside "
    "<think> </think> tags, and then provide your solution or response to the problem.\n\n"
    "You are allocated a maximum of 2048 tokens, please strive to use less.\n\n"
    "You will then provide your answer like this: \\boxed{your answer here}\n"
    "It is important that you provide your answer in the correct format.\n"
    "If you do not, you will not get credit for your answer.\n"
    "So please end your answer with \\boxed{your answer here}"
)


def gold_answer(answer_field: str) -> str:
    """GSM8K answers end with '#### 42'; commas are thousands separators."""
    return answer_field.split("#")[-1].strip().replace(",", "")


def load_problems(seed: int = 42) -> tuple[list[dict], list[dict], str]:
    """(train, test, source). Each item: {"question", "gold_answer"}."""
    try:
        if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
            raise ConnectionError("HF_HUB_OFFLINE=1")
        from datasets import load_dataset

        train = load_dataset("gsm8k", "main", split="train").shuffle(seed=seed)
        test = load_dataset("gsm8k", "main", split="test").shuffle(seed=seed)
        to_items = lambda rows: [{"question": r["question"], "gold_answer": gold_answer(r["answer"])} for r in rows]  # noqa: E731
        return to_items(train), to_items(test), "huggingface gsm8k/main"
    except Exception as exc:
        rows = [json.loads(line) for line in SAMPLE_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
        items = [{"question": r["question"], "gold_answer": gold_answer(r["answer"])} for r in rows]
        random.Random(seed).shuffle(items)
        cut = max(1, len(items) // 5)
        log.warning(
            "gsm8k: the hub is not reachable (%s); using the bundled offline sample %s (%d problems)",
            str(exc).splitlines()[0][:200],
            SAMPLE_PATH.name,
            len(items),
        )
        return items[cut:], items[:cut], f"bundled sample ({len(items)} problems)"


def score_answer(completion: str, gold: str) -> float:
    """1.0 when math-verify finds the gold answer in the completion's text after </think>, else 0.0."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    gold_parsed = parse(
        "\\boxed{" + gold + "}", extraction_mode="first_match", extraction_config=[LatexExtractionConfig()]
    )
    if not gold_parsed:
        return 0.0
    answer_parsed = parse(
        completion.split("</think>")[-1],
        extraction_config=[
            LatexExtractionConfig(
                normalization_config=NormalizationConfig(
                    nits=False,
                    malformed_operators=False,
                    basic_latex=True,
                    equations=True,
                    boxed="all",
                    units=True,
                ),
                boxed_match_priority=0,
                try_extract_without_anchor=False,
            )
        ],
        extraction_mode="first_match",
    )
    try:
        return 1.0 if verify(answer_parsed, gold_parsed) else 0.0
    except Exception:
        return 0.0


class GSM8kConfig(BaseEnvConfig):
    temperature: float = Field(default=1.0, gt=0.0, le=2.0, description="Sampling temperature for training rollouts")
    eval_size: int = Field(default=64, ge=1, description="Test problems per evaluation (the bundled sample has fewer)")
    env_metrics_path: str | None = Field(default=None, description="Where env metrics go (set by hermes-rl)")


class GSM8kEnv(BaseEnv):
    """Grade-school math word problems, answers checked with math-verify."""

    name = "gsm8k"
    env_config_cls = GSM8kConfig

    def __init__(self, config: GSM8kConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.correct_buffer: list[float] = []
        self.metrics_path = env_metrics.resolve_path(config.env_metrics_path)
        self.inference_url = server_configs[0].base_url if isinstance(server_configs, list) and server_configs else None
        self.train: list[dict] = []
        self.test: list[dict] = []
        self.iter = 0

    @classmethod
    def config_init(cls) -> tuple[GSM8kConfig, list[APIServerConfig]]:
        config = GSM8kConfig(
            tokenizer_name="Qwen/Qwen3-8B",
            group_size=16,
            batch_size=128,
            use_wandb=False,
            rollout_server_url="http://127.0.0.1:8000",
            total_steps=2500,
            max_token_length=8192,
            steps_per_eval=100,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            wandb_name="gsm8k",
            # Groups where every answer scores the same still go to the trainer: reward/mean stays
            # honest and a weak model (the local tiny one scores ~0) shows steps instead of a stall;
            # the trainer skips such groups for the update, so no compute is spent on them.
            ensure_scores_are_not_same=False,
        )
        # A LIST, or atroposlib ignores --openai.* and the YAML openai section.
        servers = [
            APIServerConfig(
                model_name="Qwen/Qwen3-8B",
                base_url="http://127.0.0.1:8001/v1",
                api_key="x",
                server_type="sglang",
                num_requests_for_eval=256,
                timeout=1200,
                health_check=False,
            )
        ]
        return config, servers

    async def setup(self):
        self.train, self.test, source = await asyncio.to_thread(load_problems)
        log.info("gsm8k: %d train / %d test problems from %s", len(self.train), len(self.test), source)

    def prompt_for(self, question: str) -> str:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        if getattr(self.tokenizer, "chat_template", None):
            # transformers 5 returns a dict unless return_dict=False
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, return_dict=False
            )
        return f"{SYSTEM_PROMPT}\n\nQuestion: {question}\nAnswer:"

    def completion_budget(self, prompt: str) -> int:
        prompt_len = len(self.tokenizer.encode(prompt, add_special_tokens=True))
        return max(1, self.config.max_token_length - prompt_len - 1)

    async def get_next_item(self):
        item = self.train[self.iter % len(self.train)]
        self.iter += 1
        return item

    async def collect_trajectories(self, item):
        prompt = self.prompt_for(item["question"])
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.completion(
                prompt=prompt,
                n=self.config.group_size,
                max_tokens=self.completion_budget(prompt),
                temperature=self.config.temperature,
            )
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[])
        for node in nodes:
            text = node.full_text[len(prompt) :] if node.full_text.startswith(prompt) else node.full_text
            reward = score_answer(text, item["gold_answer"])  # main thread: math-verify uses signal.alarm
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(reward)
            self.correct_buffer.append(reward)
        if len(group["tokens"]) != self.config.group_size:
            return None, []
        group["group_overrides"] = {
            "expected": str(item["gold_answer"])
        }  # rollouts.jsonl shows it (the audit reads it)
        return group, []

    async def evaluate(self, *args, **kwargs):
        problems = self.test[: self.config.eval_size]
        if not problems:
            return

        async def one(item: dict) -> float:
            prompt = self.prompt_for(item["question"])
            completion = await self.server.completion(
                prompt=prompt, n=1, max_tokens=self.completion_budget(prompt), temperature=0.0, split="eval"
            )
            return score_answer(completion.choices[0].text, item["gold_answer"])  # main thread (signal.alarm)

        try:
            results = await asyncio.gather(*(one(item) for item in problems))
        except Exception as exc:  # an eval failure is logged, never fatal to training
            log.warning("evaluation failed: %s", exc)
            return
        step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
        env_metrics.append(
            self.metrics_path, step, {"eval/percent_correct": sum(results) / len(results)}, environment=self.name
        )

    async def env_manager(self):
        # Stay up (idle) after the last step is handed out, until the supervisor stops us.
        await super().env_manager()
        log.info("gsm8k: all steps handed out; idle until stopped")
        await asyncio.Event().wait()

    async def wandb_log(self, wandb_metrics: dict | None = None):
        wandb_metrics = dict(wandb_metrics or {})
        if self.correct_buffer:
            wandb_metrics["train/percent_correct"] = sum(self.correct_buffer) / len(self.correct_buffer)
            step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
            env_metrics.append(self.metrics_path, step, wandb_metrics, environment=self.name)
            self.correct_buffer = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # atroposlib logs its status dict ten times a second at INFO: keep its warnings only.
    for noisy in ("atroposlib", "atroposlib.envs.base", "httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    GSM8kEnv.cli()
