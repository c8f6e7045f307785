"""Say a digit: what only verifiers' own runtime does (hermes-rl's tests) — a reward that takes the runtime, a
metric, an intercept that rewrites a response, a stop hook."""

import random

import verifiers.v1 as vf
from pydantic import Field


class FeaturesConfig(vf.TasksetConfig):
    max_digit: int = Field(default=3, ge=0, le=9, description="Digits are drawn from 0..max_digit")


class FeaturesData(vf.TaskData):
    answer: str


class FeaturesTask(vf.Task[FeaturesData, vf.State, vf.TaskConfig]):
    @vf.stop
    def one_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.intercept
    def mark_answer(self, response: vf.Response) -> vf.Response | None:
        # every reply, as the trace records it, is marked: [right] when it holds the answer, else [seen]
        content = response.message.content or ""
        mark = "[right]" if self.data.answer in content else "[seen]"
        return response.model_copy(update={"message": vf.AssistantMessage(content=f"{content} {mark}")})

    @vf.reward(weight=1.0)
    async def marked_in_the_box(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        # the runtime runs a program in the seat's box: a reward the old bridge skipped (it had no runtime)
        echoed = await runtime.run(["echo", trace.last_reply], {})
        return 1.0 if echoed.exit_code == 0 and "[right]" in echoed.stdout else 0.0

    @vf.metric
    async def marked(self, trace: vf.Trace) -> float:
        # 1 when the intercept rewrote the reply the trace holds
        return float(trace.last_reply.endswith(("[right]", "[seen]")))


class FeaturesTaskset(vf.Taskset[FeaturesTask, FeaturesConfig]):
    """Say a digit; the reward reads the intercept's marker through the runtime."""

    def load(self):
        rng = random.Random(0)
        for _ in range(50):
            digit = str(rng.randint(0, self.config.max_digit))
            yield FeaturesTask(FeaturesData(prompt=f"Say the digit {digit}.", answer=digit), self.config.task)


__all__ = ["FeaturesConfig", "FeaturesData", "FeaturesTask", "FeaturesTaskset"]
