"""Say a digit back: a single-turn verifiers v1 taskset with two reward functions (hermes-rl's tests)."""

import random

import verifiers.v1 as vf
from pydantic import Field


class DigitsConfig(vf.TasksetConfig):
    max_digit: int = Field(default=4, ge=0, le=9, description="Digits are drawn from 0..max_digit")
    num_tasks: int = Field(default=50, ge=1, le=10000, description="Tasks in the taskset")


class DigitsData(vf.TaskData):
    answer: str


class DigitsTask(vf.Task[DigitsData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == self.data.answer else 0.0

    @vf.reward(weight=0.25)
    async def contains(self, trace: vf.Trace) -> float:
        return 1.0 if self.data.answer in trace.last_reply else 0.0


class DigitsTaskset(vf.Taskset[DigitsTask, DigitsConfig]):
    """Repeat one digit: reward 1 for exactly it, a quarter more for containing it."""

    def load(self):
        rng = random.Random(0)
        for _ in range(self.config.num_tasks):
            digit = str(rng.randint(0, self.config.max_digit))
            yield DigitsTask(DigitsData(prompt=f"Say the digit {digit}.", answer=digit), self.config.task)


__all__ = ["DigitsConfig", "DigitsData", "DigitsTask", "DigitsTaskset"]
