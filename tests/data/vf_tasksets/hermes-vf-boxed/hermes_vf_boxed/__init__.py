"""A taskset whose tasks need a container (hermes-rl's tests: listed, refused at start)."""

import verifiers.v1 as vf


class BoxedTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    NEEDS_CONTAINER = True


class BoxedTaskset(vf.Taskset[BoxedTask, vf.TasksetConfig]):
    """Runs commands in a sandbox."""

    def load(self):
        yield BoxedTask(vf.TaskData(prompt="ls"), self.config.task)


__all__ = ["BoxedTask", "BoxedTaskset"]
