"""Guess a number in a few turns: a multi-turn verifiers v1 taskset (its Env plays the user)."""

import random

import verifiers.v1 as vf
from pydantic import Field


class GuessConfig(vf.TasksetConfig):
    top: int = Field(default=3, ge=1, le=9, description="The secret number is in 0..top")
    turns: int = Field(default=3, ge=1, le=10, description="Guesses allowed per episode")


class GuessData(vf.TaskData):
    secret: int
    turns: int


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    pass


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    """Answers each guess with higher/lower until it is right or the turns run out."""

    async def run(self, task, agents):
        secret = task.data.secret
        solved = 0.0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            for turn in range(task.data.turns):
                if segment.terminated:
                    break
                reply = segment.last_reply.strip()
                if reply == str(secret):
                    solved = 1.0 / (turn + 1)
                    break
                hint = (
                    "higher" if reply.isdigit() and int(reply) < secret else "lower" if reply.isdigit() else "a number"
                )
                segment = await interaction.turn(f"No. Try {hint}.")
        interaction.trace.record_reward("solved", solved, 1.0)


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    """Guess the secret number; the environment says higher or lower."""

    def load(self):
        rng = random.Random(0)
        for _ in range(100):
            secret = rng.randint(0, self.config.top)
            prompt = f"Guess my number from 0 to {self.config.top}. Answer with the number only."
            yield GuessTask(GuessData(prompt=prompt, secret=secret, turns=self.config.turns), self.config.task)


__all__ = ["GuessConfig", "GuessData", "GuessEnv", "GuessEnvConfig", "GuessTask", "GuessTaskset"]
