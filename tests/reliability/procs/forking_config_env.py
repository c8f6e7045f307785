"""An environment whose config_init() starts a daemon (double fork, setsid) that keeps the probe's
stdout and stderr open for five minutes: the probe must return at once and leave nothing running."""

import os
import time

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from atroposlib.envs.server_handling.server_baseline import APIServerConfig


class ForkingConfig(BaseEnvConfig):
    pass


class ForkingEnv(BaseEnv):
    name = "forking_config"
    env_config_cls = ForkingConfig

    @classmethod
    def config_init(cls):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                pid_file = os.environ.get("FORKING_CONFIG_PID_FILE")
                if pid_file:
                    with open(pid_file, "a") as handle:
                        handle.write(f"{os.getpid()}\n")
                time.sleep(300)  # stdout and stderr stay open: the pipes never reach EOF
            os._exit(0)
        env = ForkingConfig(tokenizer_name="unset", group_size=2, use_wandb=False, total_steps=1)
        return env, [APIServerConfig(model_name="unset", base_url="http://127.0.0.1:9/v1", api_key="x")]

    async def setup(self):
        pass

    async def get_next_item(self):
        return None

    async def collect_trajectories(self, item):
        return None, []

    async def evaluate(self, *args, **kwargs):
        return None
