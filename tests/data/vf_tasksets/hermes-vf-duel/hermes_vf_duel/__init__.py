"""Two seats say a digit in turn; the higher digit wins (a zero-sum reward from the Env's finalize). On even
deals the second seat plays every other hand, forfeiting the others without a turn of its own
(hermes-rl's tests: every seat trains; a seat with no sampled tokens never does)."""

from itertools import count

import verifiers.v1 as vf
from pydantic import Field


class DuelConfig(vf.TasksetConfig):
    pass


class DuelTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    pass


class DuelEnvConfig(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig()
    second: vf.AgentConfig = vf.AgentConfig()
    bonus: float = Field(default=0.0, ge=0.0, le=1.0, description="Added to the winner's reward")


_HANDS = count()  # the even deals' hands, in the order they are played (one process plays them all)


def _digit(text: str) -> int | None:
    found = [c for c in text if c.isdigit()]
    return int(found[0]) if found else None


class DuelEnv(vf.Env[DuelEnvConfig]):
    async def run(self, task, agents):
        prompt = "Say one digit; the higher digit wins."
        async with (
            agents.first.interaction(vf.Task(vf.TaskData(idx=task.data.idx, prompt=None))) as first,
            agents.second.interaction(vf.Task(vf.TaskData(idx=task.data.idx, prompt=None))) as second,
        ):
            said = (await first.turn(prompt)).last_reply or ""
            # odd deals: the second seat always plays; even ones: every other hand played (some hands of a deal)
            if task.data.idx % 2 or next(_HANDS) % 2:
                await second.turn(f"{prompt} The other player said: {said[:20]}")

    async def finalize(self, task, episode):
        first, second = (next(t for t in episode.traces if t.agent.name == n) for n in ("first", "second"))
        a = _digit(first.last_reply or "")
        b = _digit(second.last_reply or "") if second.num_turns else None
        net = 1.0 if b is None else -1.0 if a is None else float((a > b) - (a < b))
        win = self.config.bonus
        first.record_reward("won", net + (win if net > 0 else 0.0))
        second.record_reward("won", -net + (win if net < 0 else 0.0))
        for trace in (first, second):
            trace.record_metric("forfeit", float(trace.num_turns == 0))


class DuelTaskset(vf.Taskset[DuelTask, DuelConfig]):
    """Two seats, one digit each; higher wins."""

    def load(self):
        return [DuelTask(vf.TaskData(idx=i, prompt=None)) for i in range(20)]


__all__ = ["DuelConfig", "DuelEnv", "DuelEnvConfig", "DuelTask", "DuelTaskset"]
