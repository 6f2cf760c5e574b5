"""Whether the ranks of a failed or stopped cell ended at the same torch.distributed call."""

from __future__ import annotations

from gpugeek_jupyter.jobs.watch import in_step


def test_ranks_with_the_same_numbers_on_every_group_they_share_are_in_step() -> None:
    assert in_step([{"0": 7}, {"0": 7}])
    assert in_step([{"0": 7, "1": 3}, {"0": 7, "2": 5}])  # subgroups of a mesh: each rank holds its own
    assert in_step([{}, {}])  # no group was ever made


def test_a_call_one_rank_made_and_another_did_not_is_out_of_step() -> None:
    assert not in_step([{"0": 8}, {"0": 7}])  # an all_reduce in flight on rank 0, never called on rank 1
    assert not in_step([{"0": 7, "1": 4}, {"0": 7, "1": 3}])
    assert not in_step([{"0": 7}, None])  # torch could not say: the group is rebuilt
