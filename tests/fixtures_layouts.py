"""Folder layouts users bring, written fresh for each test: an Atropos-style clone (nested folders,
packages importing siblings and `environments.*`), a tinker-atropos-style checkout (configs/ relative
to its root, its own package), and environments that cannot run (a missing package, an offline dataset)."""

from __future__ import annotations

from pathlib import Path

import pytest

# A complete environment: config_init gives real atroposlib configs (the probe reads them).
RUNNABLE = '''"""{doc}"""
{imports}
from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig


class {cls}(BaseEnv):
    name = "{name}"

    @classmethod
    def config_init(cls):
        config = BaseEnvConfig(tokenizer_name="tok", group_size={group_size})
        return config, [APIServerConfig(model_name="m", base_url="http://127.0.0.1:9/v1", api_key="x")]

    async def setup(self):
        {setup}

    async def get_next_item(self):
        return None

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    {cls}.cli()
'''


def write_env(path: Path, cls: str, name: str, *, doc: str = "", imports: str = "", group_size="3", setup="pass"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        RUNNABLE.format(
            doc=doc or f"{name} fixture.", imports=imports, cls=cls, name=name, group_size=group_size, setup=setup
        )
    )
    return path


@pytest.fixture
def atropos_clone(tmp_path, monkeypatch) -> Path:
    """clone/environments/ on HERMES_RL_ENV_PATH, in the shapes the public Atropos tree has."""
    clone = tmp_path / "clone"
    envs = clone / "environments"
    # three folders deep, a loose script
    write_env(envs / "games" / "board" / "chess" / "chess_env.py", "ChessEnv", "chess_deep")
    # a package whose environment imports a sibling module and an environments.* module of its own
    (envs / "shared").mkdir(parents=True)
    (envs / "shared" / "scoring.py").write_text("def bonus():\n    return 4\n")
    (envs / "puzzles" / "helpers.py").parent.mkdir(parents=True)
    (envs / "puzzles" / "helpers.py").write_text("def group_size():\n    return 2\n")
    write_env(
        envs / "puzzles" / "puzzle_env.py",
        "PuzzleEnv",
        "puzzle",
        imports="from helpers import group_size\nfrom environments.shared.scoring import bonus\n",
        group_size="group_size() + bonus()",
    )
    # an abstract base (no get_next_item/evaluate, no name) with two subclasses in other files
    (envs / "family").mkdir()
    (envs / "family" / "family_base.py").write_text(
        '"""Shared plumbing."""\nfrom atroposlib.envs.base import BaseEnv as AtroposBase\n\n\n'
        "class FamilyBase(AtroposBase):\n    def helper(self):\n        return 1\n"
    )
    for i in (1, 2):
        (envs / "family" / f"member{i}.py").write_text(
            f"from family_base import FamilyBase\n\n\nclass Member{i}Env(FamilyBase):\n"
            f"    name = 'member{i}'\n\n    async def get_next_item(self):\n        return None\n\n"
            "    async def evaluate(self, *a, **k):\n        return None\n"
        )
    # what must never be scanned
    for skipped in (".git/hooks", "__pycache__", "node_modules/pkg", "tools/venv_x/lib/site-packages/x"):
        write_env(envs / skipped / "hidden_env.py", "HiddenEnv", "must_not_be_found")
    (envs / "tools" / "venv_x" / "pyvenv.cfg").write_text("home = /usr\n")
    (envs / "games" / "loop").symlink_to(envs / "games", target_is_directory=True)  # a symlink loop
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(envs))
    monkeypatch.delenv("HERMES_RL_TINKER_ATROPOS", raising=False)
    return clone


CHECKOUT_SETTINGS = '''"""Settings of a checkout, read from a YAML file given relative to the checkout root."""
import yaml


class Settings:
    def __init__(self, data):
        self.group_size = int(data["group_size"])

    @classmethod
    def from_yaml(cls, path):
        with open(path) as handle:
            return cls(yaml.safe_load(handle))
'''


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A tinker-atropos-style checkout: its environments read configs/default.yaml relative to the
    checkout root and import the checkout's own package; one of them is named like the project's gsm8k."""
    root = tmp_path / "tinker-atropos"
    package = root / "tinker_atropos"
    (package / "environments").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(CHECKOUT_SETTINGS)
    (root / "configs").mkdir()
    (root / "configs" / "default.yaml").write_text("group_size: 7\n")
    write_env(
        package / "environments" / "gsm8k_tinker.py",
        "GSM8kTinkerEnv",
        "gsm8k",
        imports='from tinker_atropos.settings import Settings\n\nSETTINGS = "configs/default.yaml"\n',
        group_size="Settings.from_yaml(SETTINGS).group_size",
    )
    monkeypatch.setenv("HERMES_RL_TINKER_ATROPOS", str(root))
    monkeypatch.delenv("HERMES_RL_ENV_PATH", raising=False)
    return root


# A runnable environment of a checkout: reads its settings relative to the checkout root at import,
# imports the checkout's package, and trains like the project's toy task.
CHECKOUT_TOY = '''"""Toy addition, as a checkout would ship it."""
from tinker_atropos.settings import Settings

from hermes_rl.environments.toy_addition import ToyAdditionEnv

SETTINGS = Settings.from_yaml("configs/default.yaml")


class ToyCheckoutEnv(ToyAdditionEnv):
    name = "toy_checkout"


if __name__ == "__main__":
    ToyCheckoutEnv.cli()
'''

# Gets past every import, then needs a dataset from the hub (offline on the local profile).
CHECKOUT_DATASET = '''"""Needs a dataset from the hub."""
from datasets import load_dataset
from tinker_atropos.settings import Settings

from hermes_rl.environments.toy_addition import ToyAdditionEnv

SETTINGS = Settings.from_yaml("configs/default.yaml")


class HubDatasetEnv(ToyAdditionEnv):
    name = "hub_dataset"

    async def setup(self):
        self.train = load_dataset("hermes-rl-fixture/gsm8k-like", split="train")


if __name__ == "__main__":
    HubDatasetEnv.cli()
'''


@pytest.fixture
def runnable_checkout(checkout) -> Path:
    environments = checkout / "tinker_atropos" / "environments"
    (environments / "toy_checkout.py").write_text(CHECKOUT_TOY)
    (environments / "hub_dataset.py").write_text(CHECKOUT_DATASET)
    return checkout
