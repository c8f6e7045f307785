"""Settings are checked against what will use them, before start: an environment's own config class
(its validators) is asked at `config --set` and at every start path (start, estimate, sweep) about the
values the run would use. reasoning-gym's task names and its generators' parameters are checked by
reasoning-gym itself, with "did you mean", instead of a run that fails a minute later with an
anonymous pydantic error."""

from __future__ import annotations

import json

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.envs import drafts
from hermes_rl.core.runs import cost

pytestmark = [pytest.mark.reliability]

ENV = "reasoning_gym"


@pytest.fixture
def warm_probes():
    """Probes and checks in forks of one process that imported atroposlib (as a long-lived client does)."""
    from hermes_rl.core.envs import probe

    was_warm = probe._warm_server is not None  # the test worker's own (conftest): left as it was
    probe.keep_warm(True)
    yield
    if not was_warm:
        probe.keep_warm(False)


def test_reasoning_gym_settings_are_checked_by_reasoning_gym_before_start(hermes_home, warm_probes):
    with pytest.raises(BadInput, match=r"task: unknown reasoning-gym task 'chain_sun' \(did you mean chain_sum"):
        drafts.set_fields({"task": "chain_sun"}, ENV, "local")
    # every start path resolves its values the same way (here the estimate, which starts nothing)
    params = json.dumps({"gcd": {"max_numbrs": 3}})
    with pytest.raises(BadInput, match=r"gcd has no parameter 'max_numbrs' \(did you mean max_numbers\?"):
        cost.estimate_start(ENV, "local", {"task": "gcd", "task_params": params})
