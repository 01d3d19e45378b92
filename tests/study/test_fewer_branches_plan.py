"""Fewer cool-down branches (`StudySpec.branch_checks`): which branches a study trains, the
compute saved, the report's plan of the branches it predicts, and the fields it refuses."""

from __future__ import annotations

import pytest

from mnmt.study.loading import preset
from mnmt.study.spec import (
    StudyError,
    branch_check_runs,
    branch_runs,
    expand,
    stop_savings,
    with_branches,
)

FEWER = preset("default").replace(branch_checks=True)


def test_one_branch_per_size_is_trained_the_middle_one_of_the_checked_experiment():
    runs = expand(FEWER)
    trained = [b.run_id for r in runs for b in branch_runs(FEWER, r)]
    assert trained == ["micro-1_p0.50_s0_cd1200", "micro-2_p0.50_s0_cd1200",
                       "micro-3_p0.50_s0_cd1200", "mini-1_p0.50_s0_cd1200",
                       "mini-1_p0.50_s1_cd1200", "mini-1_p0.50_s2_cd1200"]
    assert len(branch_check_runs(FEWER)) == 6 and branch_check_runs(preset("default")) == set()
    # the default study is unchanged: every design run keeps its three branches
    default = preset("default")
    assert sum(len(branch_runs(default, r)) for r in expand(default)) == 3 * 22


def test_the_compute_saved_is_the_branches_not_trained():
    runs = expand(FEWER)
    saved = stop_savings(FEWER, runs)
    not_trained = sum(v[0] for v in saved.values())
    all_branches = [b for b in with_branches(preset("default"), runs) if b.parent]
    kept = [b for b in with_branches(FEWER, runs) if b.parent]
    assert not_trained == sum(b.cooldown_steps for b in all_branches) - sum(
        b.cooldown_steps for b in kept) > 0
    assert sum(v[0] for v in stop_savings(preset("default"), runs).values()) == 0


def test_fewer_branches_need_branches_to_leave_out():
    with pytest.raises(StudyError, match="branch_checks"):
        preset("default").replace(branch_checks=True, cooldown_branches=())
    with pytest.raises(StudyError, match="branch_checks"):
        preset("default").replace(branch_checks=1)
