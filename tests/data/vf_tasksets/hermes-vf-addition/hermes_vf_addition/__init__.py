"""Single-digit addition as a verifiers v1 taskset: environments/toy_addition's chat task, for
bench/bench_verifiers.py (the same prompts and reward served both ways)."""

import random
import re

import verifiers.v1 as vf
from pydantic import Field

QUESTION = "What is {a} + {b}? Answer with the number only."  # environments/toy_task.py's CHAT_QUESTION


class AdditionConfig(vf.TasksetConfig):
    max_operand: int = Field(default=4, ge=1, le=9, description="Operands are drawn from 0..max_operand")
    wordy_credit: float = Field(default=0.25, ge=0.0, lt=1.0, description="Reward for the right number among words")


class AdditionData(vf.TaskData):
    answer: int


class AdditionTask(vf.Task[AdditionData, vf.State, vf.TaskConfig]):
    wordy_credit: float = 0.25

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        # environments/toy_task.py's score_reply
        reply = trace.last_reply
        text = reply.strip().removesuffix(".").strip()
        if text == str(self.data.answer):
            return 1.0
        numbers = re.findall(r"-?\d+", reply)
        return self.wordy_credit if numbers and int(numbers[-1]) == self.data.answer else 0.0


class AdditionTaskset(vf.Taskset[AdditionTask, AdditionConfig]):
    """Single-digit addition: 1 for the number alone, wordy_credit for it among other words."""

    INFINITE = True

    def load(self):
        rng = random.Random()
        while True:
            a, b = rng.randint(0, self.config.max_operand), rng.randint(0, self.config.max_operand)
            task = AdditionTask(AdditionData(prompt=QUESTION.format(a=a, b=b), answer=a + b), self.config.task)
            task.wordy_credit = self.config.wordy_credit
            yield task


__all__ = ["AdditionConfig", "AdditionData", "AdditionTask", "AdditionTaskset"]
