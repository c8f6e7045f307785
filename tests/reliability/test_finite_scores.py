"""Numbers from environments are finite, or the group is dropped with a line that says why: the trainer
is the boundary where every environment kind's scores (Atropos environments through run-api, and
whatever serves them) enter training. One NaN score made every advantage of its step NaN."""

from __future__ import annotations

import math

import pytest

from hermes_rl.dataplane.trainer import grpo

pytestmark = [pytest.mark.reliability]


def _group(scores: list) -> dict:
    tokens = [[10, 11, 12, 50 + i, 60] for i in range(len(scores))]
    masks = [[-100, -100, -100, 50 + i, 60] for i in range(len(scores))]
    return {"tokens": tokens, "masks": masks, "scores": scores}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "0.5", True, None])
def test_a_group_with_a_score_that_is_not_a_finite_number_is_dropped_and_counted(bad):
    sequences, stats = grpo.build_sequences([_group([1.0, bad]), _group([1.0, 0.0])], max_length=100)
    assert stats.groups_not_finite == 1 and stats.groups_dropped == 1
    assert len(sequences) == 2  # the good group trains
    assert all(math.isfinite(a) for seq in sequences for a in seq.advantages)
    assert all(math.isfinite(r) for r in stats.rewards) and all(math.isfinite(a) for a in stats.advantages)
