"""reasoning-gym's procedural tasks (chain_sum, gcd, count_bits, ~100 more), generated offline, with a curriculum.

Any task by name, or a weighted mix ('chain_sum:2,gcd:1'); items come from `reasoning_gym.create_dataset`
with a seed, answers are scored by the task's own `score_answer`. The reward is correctness, weighted
1 - format_credit, plus format_credit when the reply has the asked format; both parts are logged apart
(train/reward_correctness, train/reward_format) so an audit can tell format from correctness. The
curriculum raises a task's difficulty level when its recent correctness passes curriculum_up and lowers it
when it falls to curriculum_down (curriculum/level). Greedy eval on held-out items (never trained on) at
level 0, before the first step and every steps_per_eval steps. docs/reasoning_gym.md.
Run: `python environments/reasoning_gym_env.py serve --config CONFIG_YAML`; `... tasks` lists the tasks.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import sys
from typing import Literal

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, EvalHandlingEnum, ScoredDataGroup
from pydantic import Field, field_validator, model_validator

from hermes_rl.environments import env_metrics
from hermes_rl.environments import reasoning_gym_tasks as tasks

log = logging.getLogger("reasoning_gym")
FIT_SAMPLE = 32  # items of a level whose answers are measured before the curriculum moves to it
FIT_SHARE = 0.9  # of them whose answer must fit a reply within the token limit
FIT_SLACK = 2  # tokens a reply takes beyond the bare answer (a leading space, a marker): no level needs a reply exact
EVAL_REPLIES_LOGGED = 4  # per eval, in the env's log


def default_model_dir() -> str:
    from hermes_rl.core.base.paths import models_dir
    from hermes_rl.core.envs.profiles import LOCAL_MODEL_NAME

    return str(models_dir() / LOCAL_MODEL_NAME)


class ReasoningGymConfig(BaseEnvConfig):
    task: str = Field(
        default="chain_sum",
        description="reasoning-gym task, or a weighted mix 'chain_sum:2,gcd:1' (`reasoning_gym_env.py tasks`)",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the generated train and eval items (same seed, same items)")
    dataset_size: int = Field(default=2000, ge=8, le=1_000_000, description="Items generated per task and level")
    eval_size: int = Field(default=32, ge=1, le=1000, description="Held-out items (level 0) in each greedy eval")
    answer_format: Literal["first_line", "answer_tag"] = Field(
        default="first_line", description="first_line: the answer alone on one line; answer_tag: <answer>…</answer>"
    )
    format_credit: float = Field(
        default=0.1, ge=0.0, lt=1.0, description="Share of the reward for the asked format (the rest: correctness)"
    )
    partial_credit: bool = Field(
        default=True,
        description="Reward reasoning-gym's partial scores (most tasks: the answer inside a longer reply, by length);"
        " false: only a full score earns the correctness part",
    )
    max_completion_tokens: int = Field(default=16, ge=1, le=4096, description="Tokens the policy may generate")
    temperature: float = Field(default=1.0, gt=0.0, le=2.0, description="Sampling temperature for training rollouts")
    # Level 0 of the curated tasks, as easy as SmolLM2-135M needs (docs/reasoning_gym.md).
    chain_sum_max_terms: int = Field(default=2, ge=2, le=12, description="chain_sum: most terms (level 0)")
    chain_sum_max_digits: int = Field(default=1, ge=1, le=10, description="chain_sum: most digits per term (level 0)")
    count_bits_max_n: int = Field(default=63, ge=2, description="count_bits: largest number (level 0)")
    gcd_max_value: int = Field(default=12, ge=2, description="gcd: largest number (level 0)")
    spell_backward_max_word_len: int = Field(default=4, ge=3, le=10, description="spell_backward: longest word")
    letter_counting_max_words: int = Field(default=2, ge=1, le=15, description="letter_counting: most words")
    word_sequence_reversal_max_words: int = Field(
        default=2, ge=2, le=25, description="word_sequence_reversal: most words to reverse (level 0)"
    )
    task_params: str = Field(
        default="",
        description='JSON {task: {parameter: value}} over the fields above, any task ({"gcd": {"max_numbers": 3}})',
    )
    balance_answers: bool = Field(
        default=True,
        description="Spread each dataset's answers evenly, so always giving the most common one is not rewarded",
    )
    curriculum: bool = Field(default=True, description="Move each task's difficulty level with its recent correctness")
    curriculum_up: float = Field(default=0.7, gt=0.0, le=1.0, description="Mean correctness that raises the level")
    curriculum_down: float = Field(default=0.2, ge=0.0, lt=1.0, description="Mean correctness that lowers it")
    curriculum_window: int = Field(default=8, ge=1, le=10_000, description="Groups the mean is taken over")
    curriculum_max_level: int = Field(default=10, ge=0, le=100, description="Highest level")
    env_metrics_path: str | None = Field(default=None, description="Where env metrics go (set by hermes-rl)")

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        tasks.parse_mix(value)  # ValueError names the unknown task
        return value

    @field_validator("task_params")
    @classmethod
    def _params_json(cls, value: str) -> str:
        if value.strip():
            data = json.loads(value)
            if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
                raise ValueError("task_params must be a JSON object {task: {parameter: value}}")
        return value

    @model_validator(mode="after")
    def _generator_takes_the_params(self) -> ReasoningGymConfig:
        """Each task's level-0 parameters as reasoning-gym's own generator config checks them: a setting it
        refuses is named at `config --set` and `start` (hermes-rl runs these validators there), not a run
        that fails a minute later."""
        for task in tasks.parse_mix(self.task):
            tasks.check_params(task, self.base_params(task))
        return self

    def base_params(self, task: str) -> dict:
        """The task's level-0 generator parameters: the typed fields, then task_params over them."""
        typed = {
            "chain_sum": {
                "min_terms": 2,
                "max_terms": self.chain_sum_max_terms,
                "min_digits": 1,
                "max_digits": self.chain_sum_max_digits,
            },
            "count_bits": {"min_n": 1, "max_n": self.count_bits_max_n},
            "gcd": {"min_value": 1, "max_value": self.gcd_max_value},
            "spell_backward": {"min_word_len": 3, "max_word_len": self.spell_backward_max_word_len},
            "letter_counting": {"min_words": 1, "max_words": self.letter_counting_max_words},
            "word_sequence_reversal": {"min_words": 2, "max_words": self.word_sequence_reversal_max_words},
        }.get(task, {})
        extra = json.loads(self.task_params).get(task, {}) if self.task_params.strip() else {}
        return {**typed, **extra}


class ReasoningGymEnv(BaseEnv):
    """reasoning-gym procedural reasoning tasks (offline, seeded), own scorer, format credit, curriculum."""

    name = "reasoning_gym"
    env_config_cls = ReasoningGymConfig

    def __init__(self, config: ReasoningGymConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.mix = tasks.parse_mix(config.task)
        self.rng = random.Random(config.seed)
        self.metrics_path = env_metrics.resolve_path(config.env_metrics_path)
        self.inference_url = server_configs[0].base_url if isinstance(server_configs, list) and server_configs else None
        self.curricula = {
            name: tasks.Curriculum(
                up=config.curriculum_up,
                down=config.curriculum_down,
                window=config.curriculum_window,
                top=tasks.max_level(name, config.base_params(name), config.curriculum_max_level)
                if config.curriculum
                else 0,
            )
            for name in self.mix
        }
        for name, curriculum in self.curricula.items():  # never a level whose answers a reply cannot hold
            curriculum.fits = functools.partial(self.answers_fit, name)
        self.datasets: dict[tuple[str, int], object] = {}
        self.cursor: dict[tuple[str, int], int] = {}
        self.eval_items: list[tuple[str, dict, object]] = []  # (task, entry, its dataset)
        self.eval_questions: set[str] = set()
        self.buffers: dict[str, list[float]] = {"score": [], "correct": [], "format": [], "reward": []}
        self.baseline_eval: asyncio.Task | None = None
        self.constant_baseline = 0.0  # eval/constant_answer_baseline, set with the eval items

    @classmethod
    def config_init(cls) -> tuple[ReasoningGymConfig, list[APIServerConfig]]:
        model = default_model_dir()
        config = ReasoningGymConfig(
            tokenizer_name=model,
            group_size=8,
            batch_size=16,
            use_wandb=True,  # offline into the run folder without WANDB_API_KEY
            rollout_server_url="http://127.0.0.1:8000",
            total_steps=200,
            max_token_length=320,
            steps_per_eval=20,
            eval_handling=EvalHandlingEnum.NONE,
            max_batches_offpolicy=2,
            # all-equal groups still count towards reward/mean; the trainer skips them for the update
            ensure_scores_are_not_same=False,
            wandb_name="reasoning_gym",
            min_items_sent_before_logging=0,
        )
        # A LIST, or atroposlib ignores --openai.* and the YAML openai section.
        servers = [
            APIServerConfig(
                model_name=model,
                base_url="http://127.0.0.1:8001/v1",
                api_key="x",
                server_type="sglang",
                num_requests_for_eval=16,
                timeout=600,
                health_check=False,
            )
        ]
        return config, servers

    def dataset(self, task: str, level: int):
        key = (task, level)
        if key not in self.datasets:
            params = tasks.params_at(task, self.config.base_params(task), level)
            seed = tasks.task_seed(self.config.seed, task, level)
            self.datasets[key] = tasks.make_dataset(
                task, params, self.config.dataset_size, seed, balance=self.config.balance_answers
            )
            log.info("reasoning_gym: %s level %d: %s", task, level, params)
        return self.datasets[key]

    async def setup(self):
        # Held-out eval items: level 0 of each task (its share of eval_size by weight), a seed of their own;
        # training skips every question among them.
        total = sum(self.mix.values())
        for task, weight in self.mix.items():
            count = max(1, round(self.config.eval_size * weight / total))
            params = self.config.base_params(task)
            seed = tasks.task_seed(self.config.seed, task, 0, "eval")
            # the task's own answer distribution: eval measures the task, and logs what a constant answer scores
            held = tasks.make_dataset(task, params, count, seed)
            for entry in held:
                self.eval_items.append((task, entry, held))
                self.eval_questions.add(entry["question"])
        self.constant_baseline = tasks.constant_answer_share(entry for _, entry, _ in self.eval_items)
        log.info(
            "reasoning_gym: mix %s, %d held-out eval items (always one answer would score %.2f)",
            self.mix,
            len(self.eval_items),
            self.constant_baseline,
        )

    def next_entry(self, task: str, level: int) -> dict:
        data = self.dataset(task, level)
        start = self.cursor.get((task, level), 0)
        for offset in range(len(data)):
            entry = data[(start + offset) % len(data)]
            if entry["question"] not in self.eval_questions:
                self.cursor[(task, level)] = start + offset + 1
                return entry
        # Every generated question is an eval one (a tiny task space): train on them rather than stall.
        log.warning("reasoning_gym: %s level %d has no question outside the eval set", task, level)
        self.cursor[(task, level)] = start + 1
        return data[start % len(data)]

    async def get_next_item(self):
        # The accuracy before any training is the baseline: evaluate once the servers answer.
        if self.baseline_eval is None:
            self.baseline_eval = asyncio.create_task(self.evaluate())
        task = self.rng.choices(list(self.mix), weights=list(self.mix.values()))[0]
        level = self.curricula[task].level
        return {"task": task, "level": level, "entry": self.next_entry(task, level)}

    def prompt_for(self, question: str) -> str:
        text = f"{question}\n{tasks.INSTRUCTIONS[self.config.answer_format]}"
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": text}]
            # transformers 5 returns a dict unless return_dict=False
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, return_dict=False
            )
        return f"Q: {text}\nA:"

    def completion_budget(self, prompt: str) -> int:
        room = self.config.max_token_length - len(self.tokenizer.encode(prompt, add_special_tokens=True)) - 1
        return max(1, min(self.config.max_completion_tokens, room))

    def answer_tokens(self, answer) -> int:
        """Tokens a reply needs to state this answer in the asked format, with the stop that ends it."""
        text = f"{answer}\n" if self.config.answer_format == "first_line" else f"<answer>{answer}</answer>\n"
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def answers_fit(self, task: str, level: int) -> bool:
        """Whether replies within the token limit can hold this level's answers: at least FIT_SHARE of a sample
        of its items' answers, with FIT_SLACK tokens to spare, fit their prompt's completion budget
        (max_completion_tokens, and max_token_length past the prompt). A curriculum stops below a level that
        fails (logged once)."""
        data = self.dataset(task, level)
        sample = [data[i] for i in range(min(FIT_SAMPLE, len(data)))]
        if not sample:
            return True
        budget = self.completion_budget
        needs = [(self.answer_tokens(e["answer"]), budget(self.prompt_for(e["question"]))) for e in sample]
        share = sum(need + FIT_SLACK <= room for need, room in needs) / len(needs)
        if share >= FIT_SHARE:
            return True
        longest, room = max(needs)
        log.warning(
            "reasoning_gym: curriculum %s stays at level %d: level %d's answers need up to %d tokens and only %.0f %% "
            "fit a reply of %d with %d to spare (max_completion_tokens %d, max_token_length %d); raise them to let "
            "it climb",
            task,
            level - 1,
            level,
            longest,
            100 * share,
            room,
            FIT_SLACK,
            self.config.max_completion_tokens,
            self.config.max_token_length,
        )
        return False

    def reward(self, dataset, entry: dict, reply: str) -> tuple[float, float, bool]:
        """(reward, reasoning-gym's score, format ok)."""
        score, formatted = tasks.score_reply(dataset, entry, reply, self.config.answer_format)
        earned = score if self.config.partial_credit or score >= 1.0 else 0.0
        credit = self.config.format_credit
        return (1.0 - credit) * earned + credit * float(formatted), score, formatted

    async def collect_trajectories(self, item):
        task, level, entry = item["task"], item["level"], item["entry"]
        prompt = self.prompt_for(entry["question"])
        stop = ["\n"] if self.config.answer_format == "first_line" else ["</answer>\n"]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.completion(
                prompt=prompt,
                n=self.config.group_size,
                max_tokens=self.completion_budget(prompt),
                temperature=self.config.temperature,
                stop=stop,
            )
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[])
        scores, cut = [], 0
        for node in nodes:
            cut += (node.metadata or {}).get("finish_reason") == "length"
            text = node.full_text[len(prompt) :] if node.full_text.startswith(prompt) else node.full_text
            reward, score, formatted = self.reward(self.dataset(task, level), entry, text)
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(reward)
            scores.append(score)
            self.buffers["score"].append(score)
            self.buffers["correct"].append(1.0 if score == 1.0 else 0.0)
            self.buffers["format"].append(float(formatted))
            self.buffers["reward"].append(reward)
        if len(group["tokens"]) != self.config.group_size:
            return None, []
        group["group_overrides"] = {"expected": str(entry["answer"])}  # rollouts.jsonl shows it (the audit reads it)
        # The curriculum follows correctness only: format credit alone never makes a task harder.
        curriculum = self.curricula[task]
        move = curriculum.record(sum(scores) / len(scores), cut / len(nodes))
        if move < 0 and curriculum.cut_level == level:
            log.warning(
                "reasoning_gym: curriculum %s back to level %d, now its top: %.0f %% of level %d's replies were cut "
                "at the token limit (max_completion_tokens %d, max_token_length %d); raise them to let it climb",
                task,
                curriculum.level,
                100 * (curriculum.cut_share or 0.0),
                level,
                self.config.max_completion_tokens,
                self.config.max_token_length,
            )
        elif move:
            log.info("reasoning_gym: curriculum %s -> level %d", task, curriculum.level)
        return group, []

    async def evaluate(self, *args, **kwargs):
        if not self.eval_items:
            return
        stop = ["\n"] if self.config.answer_format == "first_line" else ["</answer>\n"]

        async def one(entry: dict, dataset) -> tuple[float, bool, str]:
            prompt = self.prompt_for(entry["question"])
            completion = await self.server.completion(
                prompt=prompt,
                n=1,
                max_tokens=self.completion_budget(prompt),
                temperature=0.0,
                stop=stop,
                split="eval",
            )
            reply = completion.choices[0].text
            _, score, formatted = self.reward(dataset, entry, reply)
            return score, formatted, reply

        # The step whose weights answer: asked before the requests (training goes on meanwhile).
        step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
        try:
            results = await asyncio.gather(*(one(entry, dataset) for _, entry, dataset in self.eval_items))
        except Exception as exc:  # an eval failure is logged, never fatal to training
            log.warning("evaluation failed: %s", exc)
            return
        # What the greedy policy answers, in the env log: the figures alone do not say why eval is low.
        for (_, entry, _), (score, _, reply) in list(zip(self.eval_items, results))[:EVAL_REPLIES_LOGGED]:
            log.info(
                "eval step %s: %r -> %r (expected %r, score %.2f)",
                step,
                " ".join(entry["question"].split())[:120],
                reply,
                entry["answer"],
                score,
            )
        metrics = {
            "eval/percent_correct": sum(s == 1.0 for s, _, _ in results) / len(results),
            "eval/answer_score": sum(s for s, _, _ in results) / len(results),
            "eval/format_rate": sum(f for _, f, _ in results) / len(results),
            # what a policy that always gives the eval items' most common answer would score: the bar to pass
            "eval/constant_answer_baseline": self.constant_baseline,
        }
        if len(self.mix) > 1:
            for name in self.mix:
                mine = [s for (task, _, _), (s, _, _) in zip(self.eval_items, results) if task == name]
                metrics[f"eval/{name}/percent_correct"] = sum(s == 1.0 for s in mine) / len(mine)
        env_metrics.append(self.metrics_path, step, metrics, environment=self.name)

    def curriculum_metrics(self) -> dict:
        levels = {name: c.level for name, c in self.curricula.items()}
        out = {"curriculum/level": sum(levels.values()) / len(levels)}
        if len(levels) > 1:
            out.update({f"curriculum/{name}/level": level for name, level in levels.items()})
        return out

    async def env_manager(self):
        # Stay up (idle) after the last step is handed out, until the supervisor stops us.
        await super().env_manager()
        log.info("reasoning_gym: all steps handed out; idle until stopped")
        await asyncio.Event().wait()

    async def wandb_log(self, wandb_metrics: dict | None = None):
        wandb_metrics = dict(wandb_metrics or {})
        b = self.buffers
        if b["reward"]:
            n, credit = len(b["reward"]), self.config.format_credit
            wandb_metrics.update(
                {
                    "train/percent_correct": sum(b["correct"]) / n,
                    "train/answer_score": sum(b["score"]) / n,
                    "train/format_rate": sum(b["format"]) / n,
                    "train/reward_correctness": (1.0 - credit) * sum(b["score"]) / n,
                    "train/reward_format": credit * sum(b["format"]) / n,
                    **self.curriculum_metrics(),
                }
            )
            step = await asyncio.to_thread(env_metrics.trainer_step, self.inference_url, self.curr_step)
            env_metrics.append(self.metrics_path, step, wandb_metrics, environment=self.name)
            self.buffers = {key: [] for key in b}
        await super().wandb_log(wandb_metrics)


def print_tasks() -> None:
    """`reasoning_gym_env.py tasks`: every task with its description, * where a curriculum ladder is curated."""
    for name, description in tasks.task_descriptions().items():
        mark = "*" if name in tasks.GROWTH else " "
        print(f"{mark} {name:32s} {description}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["tasks"]:
        print_tasks()
        sys.exit(0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # atroposlib logs its status dict ten times a second at INFO: keep its warnings only.
    for noisy in ("atroposlib", "atroposlib.envs.base", "httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ReasoningGymEnv.cli()
