"""Cool-down branches (mnmt.training.branches): points, configs, schedules and training.

The central property: a branch leaving a run at step b is, step for step, the run trained for
D_b = b + c_b steps with the same schedule — same rows and values as that run after step b.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import rows_by_key, run_child, write_child_spec

from mnmt.training import branches, run_files


def test_points_resolve_to_steps_before_the_runs_own_cooldown(make_config):
    config = make_config(train_steps=1000, cooldown_steps=400,
                         branches={"points": (0.25, 0.5, 300)})
    assert branches.branch_steps(config) == [250, 300, 500]
    # c_b = b·f/(1 − f) with the run's own share f = 0.4: the branch cools down over 40 % of D_b
    assert [branches.branch_cooldown(config, b) for b in (250, 500)] == [167, 333]
    with pytest.raises(branches.BranchError, match=r"branch step 600 .* outside \[1, 600\)"):
        branches.branch_steps(config.updated(branches={"points": (0.6,)}))
    with pytest.raises(branches.BranchError, match="expected a fraction in"):
        branches.branch_steps(config.updated(branches={"points": (1.5,)}))
    with pytest.raises(branches.BranchError, match="cool-down share in .0, 1.*cooldown_steps 0"):
        branches.branch_steps(config.updated(cooldown_steps=0))
    # without a cool-down of its own, a run branches with an explicit share
    plain = config.updated(cooldown_steps=0, branches={"points": (0.5,), "cooldown_fraction": 0.2})
    assert branches.branch_cooldown(plain, 500) == 125


def test_branch_configs_name_their_parent_and_train_to_their_budget(make_config):
    config = make_config("parent", train_steps=1000, cooldown_steps=400, run_id="mini-1_p0.50_s0",
                         branches={"points": (0.25,)}, decode={"steps": (100, 300, 900)})
    (branch,) = branches.branch_configs(config)
    assert branch.model_dir == config.model_dir + "_cd250"
    assert branch.run_id == "mini-1_p0.50_s0_cd250"
    assert (branch.train_steps, branch.cooldown_steps) == (417, 167)
    assert (branch.branches.parent_dir, branch.branches.parent_step) == (config.model_dir, 250)
    assert branch.branches.points == () and branches.branch_configs(branch) == []
    assert branch.decode.steps == (300,)
    assert branches.is_branch(branch) and not branches.is_branch(config)


def test_gin_bound_points_do_not_reach_the_branches(make_config):
    import gin

    with gin.unlock_config():
        gin.bind_parameter("BranchConfig.points", (0.25, 0.5))
    try:
        from mnmt.training.config import BranchConfig

        parent = make_config(train_steps=1000, cooldown_steps=400, branches=BranchConfig())
        children = branches.branch_configs(parent)
    finally:
        gin.clear_config()
    assert [c.branches.parent_step for c in children] == [250, 500]
    assert all(c.branches.points == () and branches.branch_steps(c) == [] for c in children)


@pytest.mark.parametrize("decay", ["rsqrt", "constant"])
def test_a_branch_schedule_is_the_parents_until_b_and_a_full_runs_throughout(make_config, decay):
    from mnmt.training.optimizer import schedule_for

    parent = make_config(train_steps=1000, cooldown_steps=400, decay=decay, warmup_steps=50,
                         branches={"points": (0.5,)})
    (branch,) = branches.branch_configs(parent)
    full = parent.updated(train_steps=branch.train_steps, cooldown_steps=branch.cooldown_steps,
                          branches={"points": ()})
    steps = np.arange(0, branch.train_steps + 1)
    lr_parent, lr_branch, lr_full = (np.asarray(schedule_for(c)(steps))
                                     for c in (parent, branch, full))
    np.testing.assert_array_equal(lr_branch[:500], lr_parent[:500])
    np.testing.assert_array_equal(lr_branch, lr_full)
    assert lr_branch[501] < lr_parent[501] and lr_branch[-1] == 0.0


def test_one_minus_sqrt_cooldown_shape():
    from mnmt.training.optimizer import rsqrt_schedule

    lr = rsqrt_schedule(1.0, 10, total_steps=100, cooldown_steps=40, decay="constant",
                        cooldown_shape="1-sqrt")
    linear = rsqrt_schedule(1.0, 10, total_steps=100, cooldown_steps=40, decay="constant")
    # x = share of the cool-down done: (count − 60) / 40; 1 − √x against 1 − x
    for count, x in ((60, 0.0), (70, 0.25), (90, 0.75), (100, 1.0)):
        assert float(lr(count)) == pytest.approx(1 - np.sqrt(x), abs=1e-6)
        assert float(linear(count)) == pytest.approx(1 - x, abs=1e-6)
    with pytest.raises(ValueError, match="cooldown_shape must be one of"):
        rsqrt_schedule(1.0, 10, total_steps=100, cooldown_steps=40, cooldown_shape="cosine")


def _branch_rows_match_full_run(branch_dir, full_dir, b, rtol=1e-5):
    """The branch's rows are the full run's rows after step b (same keys, values, tokens)."""
    got = run_files.read_metrics(branch_dir)
    want = [r for r in run_files.read_metrics(full_dir) if r["step"] > b]
    assert all(r["step"] > b for r in got)
    assert sorted(rows_by_key(got)) == sorted(rows_by_key(want))
    ref = rows_by_key(want)
    for key, value in rows_by_key(got).items():
        assert value == pytest.approx(ref[key], rel=rtol, abs=1e-7), key
    assert {(r["step"], r["metric"]): r["tokens"] for r in got} == \
        {(r["step"], r["metric"]): r["tokens"] for r in want}


def test_a_trained_branch_is_the_run_trained_for_its_budget(make_config):
    from mnmt.training.trainer import train

    # 12 steps, cool-down 4 (f = 1/3); the branch at 4 cools down 2 steps: D_b = 6
    parent = make_config("parent", cooldown_steps=4, decay="constant",
                         branches={"points": (4,)}, checkpoint={"period": 100, "keep": 1})
    summary = train(parent)
    assert summary.status == "finished"
    (branch,) = summary.branches
    assert (branch.status, branch.final_step) == ("finished", 6)
    # the branch point's checkpoint is kept beside the newest one (keep=1)
    steps = sorted(p.name for p in (Path(parent.model_dir) / "checkpoints").iterdir()
                   if p.name.startswith("step_"))
    assert steps == ["step_12", "step_4"]
    meta = json.loads((Path(branch.model_dir) / "run.json").read_text())
    assert meta["branch"] == {"parent": "parent", "step": 4, "cooldown_steps": 2}
    assert meta["run_id"] == "parent_cd4" and meta["training"]["steps"] == 6
    assert json.loads((Path(parent.model_dir) / "run.json").read_text())[
        "branch_steps"] == [4]
    full = train(make_config("full", train_steps=6, cooldown_steps=2, decay="constant",
                             checkpoint={"period": 100}))
    assert full.status == "finished"
    _branch_rows_match_full_run(branch.model_dir, full.model_dir, 4)
    # finished branches are skipped on a second call
    again = train(parent)
    assert again.message == "already finished" and again.branches[0].message == "already finished"


def test_a_branch_without_its_parents_checkpoint_is_refused(make_config):
    from mnmt.training.trainer import train_group

    parent = make_config("parent", cooldown_steps=4, branches={"points": (4,)})
    (branch,) = branches.branch_configs(parent)
    with pytest.raises(ValueError, match=r"checkpoint step 4 of its parent.*train the parent"):
        train_group([branch])


@pytest.mark.slow
def test_sigkill_inside_a_branch_then_resume_matches_the_full_run(make_config, tiny_data,
                                                                  tmp_path):
    from mnmt.training.trainer import train

    parent = make_config("parent", cooldown_steps=4, decay="constant",
                         branches={"points": (4,)}, checkpoint={"period": 1})
    train(parent.updated(branches={"points": (4,)}))  # parent and its branch: the reference
    reference = parent.model_dir + "_cd4"
    # a second parent, copied before its branch ran; the branch dies at its step 5
    killed = make_config("killed", cooldown_steps=4, decay="constant",
                         branches={"points": (4,)}, checkpoint={"period": 1})
    from mnmt.training.trainer import train_group

    train_group([killed])  # the parent only
    spec = write_child_spec(killed, tiny_data, tmp_path, kill_at=5)
    died = run_child(spec)
    assert died.returncode != 0
    assert not (Path(killed.model_dir + "_cd4") / "run.json").read_text().count(
        '"finished"')
    resumed = run_child(write_child_spec(killed, tiny_data, tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    _branch_rows_match_full_run(killed.model_dir + "_cd4", reference, 4, rtol=1e-6)


@pytest.mark.slow  # ≈ 40 s; the fast suite keeps the single run's branch = full run identity
def test_grouped_runs_branch_as_a_group(make_config, tiny_data):
    from mnmt.data import mixtures
    from mnmt.training.trainer import train_with_branches

    other = mixtures.register_weighted_mixture(
        "branch_test_p30", dict(zip(tiny_data["tasks"].values(), (0.3, 0.7), strict=True)))
    kw = dict(cooldown_steps=4, branches={"points": (4,)}, checkpoint={"period": 100})
    a = make_config("a", **kw)
    b = make_config("b", seed=1, inputs={"mixture_or_task_name": other}, **kw)
    summaries = train_with_branches([a, b])
    assert [s.run_id for s in summaries] == ["a", "b", "a_cd4", "b_cd4"]
    assert all(s.status == "finished" for s in summaries)
    alone = train_with_branches([make_config("b_alone", seed=1,
                                             inputs={"mixture_or_task_name": other}, **kw)])
    _branch_rows_match_full_run(summaries[3].model_dir, alone[1].model_dir, 4, rtol=1e-4)
