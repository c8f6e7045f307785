"""Fixture: a valid environment whose config has one field of every kind the editor handles."""

import enum
from typing import List, Literal, Optional, Tuple

from pydantic import Field

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig


class Difficulty(enum.Enum):
    EASY = "easy"
    HARD = "hard"


class BasicConfig(BaseEnvConfig):
    max_operand: int = Field(default=9, ge=1, le=99, description="Largest operand in a problem")
    temperature: float = Field(default=0.7, gt=0.0, description="Sampling temperature")
    shuffle: bool = Field(default=True, description="Shuffle the dataset")
    prompt_prefix: str = Field(default="Solve:", description="Text before each problem")
    answer_format: Literal["plain", "boxed"] = Field(default="plain", description="How answers are written")
    difficulty: Difficulty = Field(default=Difficulty.EASY, description="Problem difficulty")
    seed: Optional[int] = Field(default=None, description="Random seed (none: random)")
    stop_words: List[str] = Field(default_factory=lambda: ["\n"], description="Stop sequences")


class BasicEnv(BaseEnv):
    """Adds small numbers; a fixture for discovery and config tests.

    Second docstring line is not the description.
    """

    name = "fixture_basic"
    env_config_cls = BasicConfig

    @classmethod
    def config_init(cls) -> Tuple[BasicConfig, List[APIServerConfig]]:
        print("noise on stdout from config_init")  # must not break the probe's JSON
        return BasicConfig(group_size=4, steps_per_eval=25, use_wandb=False), [
            APIServerConfig(model_name="fixture-model", base_url="http://127.0.0.1:1/v1", api_key="not-a-secret")
        ]
