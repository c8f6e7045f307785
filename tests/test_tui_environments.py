"""The dashboard's environments pane: same-named environments are distinct rows (their ids), the one a
bare name means is the plain one, bases are marked, and choosing a row selects that very environment."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from hermes_rl.core.base.paths import current_selection_file
from hermes_rl.tui.app import HermesDashboard
from tests.fixtures_layouts import write_env
from tests.fixtures_tui import wait_for


@pytest.fixture
def same_named(tmp_path, monkeypatch, user_envs):
    import hermes_rl.core.envs.discovery as discovery

    project = tmp_path / "project" / "environments"
    project.mkdir(parents=True)
    monkeypatch.setattr(discovery, "PROJECT_ROOT", project.parent)
    extra = tmp_path / "lab"
    write_env(user_envs / "mine.py", "MineEnv", "dup")
    write_env(extra / "theirs.py", "TheirsEnv", "dup")
    (extra / "plumbing.py").write_text(
        "from atroposlib.envs.base import BaseEnv\n\n\nclass Plumbing(BaseEnv):\n    name = 'plumbing'\n"
    )
    monkeypatch.setenv("HERMES_RL_ENV_PATH", str(extra))
    monkeypatch.delenv("HERMES_RL_TINKER_ATROPOS", raising=False)
    discovery.clear_cache()
    return extra


@pytest.mark.timeout(120)
def test_duplicates_are_distinct_rows_and_the_chosen_row_is_selected(same_named):
    async def scenario():
        app = HermesDashboard()
        async with app.run_test(size=(160, 48)) as pilot:
            pane = app.query_one("#environments")
            await wait_for(pilot, lambda: len(pane.environments) == 3, what="environments listed")
            options = pane.option_list
            labels = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
            ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
            assert sorted(ids) == ["dup", "dup@lab", "plumbing@lab"]  # an extra root's environments: name@ROOT
            assert any(label.strip().startswith("dup@lab") for label in labels)
            assert any("plumbing" in label and "base" in label for label in labels)
            await pilot.press("1")
            options.highlighted = ids.index("dup@lab")
            await pilot.press("enter")
            await wait_for(
                pilot,
                lambda: (
                    current_selection_file().exists()
                    and yaml.safe_load(current_selection_file().read_text()).get("environment") == "dup@lab"
                ),
                what="dup@lab selected",
            )

    asyncio.run(scenario())
