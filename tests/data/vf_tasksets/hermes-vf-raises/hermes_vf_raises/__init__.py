"""A taskset whose reward function raises (hermes-rl's tests)."""

import verifiers.v1 as vf


class RaisesTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def always_fails(self, trace: vf.Trace) -> float:
        raise ValueError("this reward always fails")


class RaisesTaskset(vf.Taskset[RaisesTask, vf.TasksetConfig]):
    """Every reward raises."""

    def load(self):
        for i in range(10):
            yield RaisesTask(vf.TaskData(prompt=f"Say {i}."), self.config.task)


__all__ = ["RaisesTask", "RaisesTaskset"]
