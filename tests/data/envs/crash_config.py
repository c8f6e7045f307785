"""Fixture: config_init raises (the caller gets a clear error naming the file)."""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class CrashEnv(BaseEnv):
    name = "fixture_crash"

    @classmethod
    def config_init(cls) -> "tuple[BaseEnvConfig, list]":
        raise RuntimeError("dataset gsm8k_missing.jsonl not found")
