"""Single-digit addition a tiny model learns on CPU in minutes (the local profile's default).

Prompts and scores come from environments/toy_task.py, which the local model builder shares, so
format and reward always agree. Greedy accuracy is evaluated before the first step and every
`steps_per_eval` steps after it (eval/percent_correct in env_metrics.jsonl).
Run: `python environments/toy_addition.py serve --config CONFIG_YAML`.
"""

from __future__ import annotations

import asyncio
import logging
import random

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, EvalHandlingEnum, ScoredDataGroup
from pydantic import Field

from hermes_rl.environments import env_metrics, toy_task

log = logging.getLogger("toy_addition")


def default_model_dir() -> str:
    """The locally built tiny model (its tokenizer lives in the same folder)."""
    from hermes_rl.core.base.paths import models_dir
    from hermes_rl.core.envs.profiles import LOCAL_MODEL_NAME

    return str(models_dir() / LOCAL_MODEL_NAME)


class ToyAdditionConfig(BaseEnvConfig):
    max_operand: int = Field(default=4, ge=1, le=9, description="Operands are drawn from 0..max_operand")
    max_completion_tokens: int = Field(default=6, ge=1, le=64, description="Tokens the policy may generate per answer")
    temperature: float = Field(default=1.0, gt=0.0, le=2.0, description="Sampling temperature for training rollouts")
    eval_size: int = Field(default=25, ge=1, le=100, description="Problems in each greedy evaluation")
    near_miss_credit: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Reward for a wrong number next to the answer (less further away)"
    )
    chat: bool = Field(
        default=False,
        description="Ask in the tokenizer's chat template (instruct models): only the number alone is right",
    )
    wordy_credit: float = Field(
        default=0.25, ge=0.0, lt=1.0, description="With chat: reward for the right number among other words"
    )
    chat_examples: int = Field(
        default=0,
        ge=0,
        le=len(toy_task.CHAT_EXAMPLES),
        description="With chat: worked sums the conversation opens with (a question, the number alone as the answer)",
    )
    env_metrics_path: str | None = Field(default=None, description="Where env metrics go (set by hermes-rl)")


class ToyAdditionEnv(BaseEnv):
    """Single-digit addition: reward 1 for the right answer, 0 otherwise (near_miss_credit can grade misses)."""

    name = "toy_addition"
    env_config_cls = ToyAdditionConfig

    def __init__(self, config: ToyAdditionConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.rng = random.Random()
        self.correct_buffer: list[float] = []
        self.score_buffer: list[float] = []
        # The reward by part (env_metrics.jsonl `reward/<part>`, read by the audit): the exact answer, and
        # the partial credit (wordy_credit with chat, else near_miss_credit) when the config pays any.
        self.partial_name = "wordy" if config.chat else "near_miss"
        self.component_buffer: dict[str, list[float]] = {}
        self.metrics_path = env_metrics.resolve_path(config.env_metrics_path)
        self.inference_url = server_configs[0].base_url if isinstance(server_configs, list) and server_configs else None
        self.baseline_eval: asyncio.Task | None = None

    @classmethod
    def config_init(cls) -> tuple[ToyAdditionConfig, list[APIServerConfig]]:
        model = default_model_dir()
        config = ToyAdditionConfig(
            tokenizer_name=model,
            group_size=8,
            batch_size=16,
            use_wandb=True,  # offline into the run folder without WANDB_API_KEY
            rollout_server_url="http://127.0.0.1:8000",
            total_steps=800,
            max_token_length=512,
            steps_per_eval=25,
            eval_handling=EvalHandlingEnum.NONE,
            max_batches_offpolicy=2,
            max_num_workers_per_node=8,
            # all-equal groups still count towards reward/mean; the trainer skips them for the update
            ensure_scores_are_not_same=False,
            wandb_name="toy_addition",
            min_items_sent_before_logging=0,
        )
        # A LIST, or atroposlib ignores --openai.* and the YAML openai section.
        servers = [
            APIServerConfig(
                model_name=model,
                base_url="http://127.0.0.1:8001/v1",
                api_key="x",
                server_type="sglang",
                num_requests_for_eval=32,
                timeout=120,
                health_check=False,
            )
        ]
        return config, servers

    async def env_manager(self):
        # atroposlib returns once run-api has handed out total_steps; stay up (idle) until the
        # supervisor stops us, so an early clean exit is never mistaken for a dead environment.
        await super().env_manager()
        log.info("toy_addition: all steps handed out; idle until stopped")
        await asyncio.Event().wait()

    async def setup(self):
        log.info("toy_addition: operands 0..%d, group_size %d", self.config.max_operand, self.config.group_size)

    async def get_next_item(self):
        # atroposlib first evaluates after steps_per_eval steps; the accuracy before any training is
        # the baseline people compare against. The first item is asked for once the servers answer.
        if self.baseline_eval is None:
            self.baseline_eval = asyncio.create_task(self.evaluate())
        a, b = self.rng.randint(0, self.config.max_operand), self.rng.randint(0, self.config.max_operand)
        return {"prompt": self.prompt(a, b), "answer": a + b}

    def prompt(self, a: int, b: int) -> str:
        if not self.config.chat:
            return toy_task.PROMPT_TEMPLATE.format(a=a, b=b)
        conversation = []
        for x, y in toy_task.CHAT_EXAMPLES[: self.config.chat_examples]:
            conversation.append({"role": "user", "content": toy_task.CHAT_QUESTION.format(a=x, b=y)})
            conversation.append({"role": "assistant", "content": str(x + y)})
        conversation.append({"role": "user", "content": toy_task.CHAT_QUESTION.format(a=a, b=b)})
        return self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)

    def score(self, text: str, answer: int) -> float:
        if self.config.chat:
            return toy_task.score_reply(text, answer, self.config.wordy_credit)
        return toy_task.score(text, answer, self.config.max_operand, self.config.near_miss_credit)

    async def collect_trajectories(self, item):
        # One request with n=group_size: the whole group is one round trip to the trainer.
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.completion(
                prompt=item["prompt"],
                n=self.config.group_size,
                max_tokens=self.config.max_completion_tokens,
                temperature=self.config.temperature,
                stop=[toy_task.STOP],
            )
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[])
        for node in nodes:
            text = (
                node.full_text[len(item["prompt"]) :]
                if node.full_text.startswith(item["prompt"])
                else self.tokenizer.decode([t for t, m in zip(node.tokens, node.masked_tokens) if m != -100])
            )
            score = self.score(text, item["answer"])
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(score)
            self.correct_buffer.append(1.0 if score == 1.0 else 0.0)
            self.score_buffer.append(score)
            self.component_buffer.setdefault("exact", []).append(1.0 if score == 1.0 else 0.0)
            self.component_buffer.setdefault(self.partial_name, []).append(score if 0.0 < score < 1.0 else 0.0)
        if len(group["tokens"]) != self.config.group_size:
            return None, []
        group["group_overrides"] = {"expected": str(item["answer"])}  # rollouts.jsonl shows it (the audit reads it)
        return group, []

    async def evaluate(self, *args, **kwargs):
        top = self.config.max_operand
        problems = [(a, b) for a in range(top + 1) for b in range(top + 1)]
        self.rng.shuffle(problems)
        problems = problems[: self.config.eval_size]

        async def one(a: int, b: int) -> float:
            completion = await self.server.completion(
                prompt=self.prompt(a, b),
                n=1,
                max_tokens=self.config.max_completion_tokens,
                temperature=0.0,
                stop=[toy_task.STOP],
                split="eval",
            )
            return 1.0 if self.score(completion.choices[0].text, a + b) == 1.0 else 0.0

        # The step whose weights answer: asked before the requests (training goes on meanwhile).
        step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
        try:
            results = await asyncio.gather(*(one(a, b) for a, b in problems))
        except Exception as exc:  # an eval failure is logged, never fatal to training
            log.warning("evaluation failed: %s", exc)
            return
        env_metrics.append(
            self.metrics_path, step, {"eval/percent_correct": sum(results) / len(results)}, environment=self.name
        )

    async def wandb_log(self, wandb_metrics: dict | None = None):
        wandb_metrics = dict(wandb_metrics or {})
        if self.correct_buffer:
            wandb_metrics["train/percent_correct"] = sum(self.correct_buffer) / len(self.correct_buffer)
            wandb_metrics["train/score_mean"] = sum(self.score_buffer) / len(self.score_buffer)
            partial = self.config.wordy_credit if self.config.chat else self.config.near_miss_credit
            for name, values in self.component_buffer.items():
                if values and (name == "exact" or partial > 0):
                    wandb_metrics[f"reward/{name}"] = sum(values) / len(values)
            self.component_buffer = {}
            step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
            env_metrics.append(self.metrics_path, step, wandb_metrics, environment=self.name)
            self.correct_buffer, self.score_buffer = [], []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # atroposlib logs its status dict ten times a second at INFO: keep its warnings only.
    for noisy in ("atroposlib", "atroposlib.envs.base", "httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ToyAdditionEnv.cli()
