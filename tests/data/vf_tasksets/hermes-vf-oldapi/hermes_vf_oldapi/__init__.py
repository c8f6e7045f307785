"""An old-API verifiers environment (load_environment, verifiers <= 0.3): its import fails under verifiers 0.4,
whose `verifiers.envs` is gone."""

from verifiers.envs.singleturn_env import SingleTurnEnv


def load_environment(**kwargs):
    return SingleTurnEnv(**kwargs)
