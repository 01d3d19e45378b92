"""A study stopped early (`StudySpec.stop_fraction`): which runs stop, which are checks, what
each trains (runs, branches, groups, TrainConfig), the compute saved, and the output directory
that accepts another stop."""

from __future__ import annotations

import json

import pytest

from mnmt.study import lock, stages
from mnmt.study.loading import preset
from mnmt.study.runner import StudyData, make_train_config, run_complete
from mnmt.study.spec import (
    StudyError,
    branch_runs,
    expand,
    group_runs,
    stop_check_runs,
    stop_savings,
    stopped_runs,
    with_branches,
)

STOPPED = preset("default").replace(stop_fraction=0.6)


def test_default_checks_are_one_experiment_per_size_with_all_its_seeds():
    checks = stop_check_runs(STOPPED)
    assert checks == ["micro-1_p0.50_s0", "micro-2_p0.50_s0", "micro-3_p0.50_s0",
                      "mini-1_p0.50_s0", "mini-1_p0.50_s1", "mini-1_p0.50_s2"]
    runs = expand(STOPPED)
    stopped = stopped_runs(STOPPED)
    design = {r.run_id for r in runs if not r.heldout}
    assert stopped == design - set(checks) and len(stopped) == 16
    assert not any(r.run_id in stopped for r in runs if r.heldout)  # held out: to the end
    assert stopped_runs(preset("default")) == frozenset()
    everything = STOPPED.replace(stop_checks=("all",))
    assert stopped_runs(everything) == frozenset()


def test_a_stopped_run_trains_to_its_stop_and_keeps_only_the_branches_before_it():
    runs = {r.run_id: r for r in expand(STOPPED)}
    stopped, check = runs["micro-1_p0.30_s0"], runs["micro-1_p0.50_s0"]
    assert STOPPED.run_steps(stopped) == (0, 1200)   # ⌈0.6 · 2000⌉, its schedule 2000 steps
    assert STOPPED.run_steps(check) == (0, 2000)
    assert [b.branch_step for b in branch_runs(STOPPED, stopped)] == [900, 1200]
    assert [b.branch_step for b in branch_runs(STOPPED, check)] == [900, 1200, 1500]
    # branches train their own cool-down in full, stopped parent or not
    assert all(STOPPED.run_steps(b) == preset("default").run_steps(b)
               for b in branch_runs(STOPPED, stopped))
    data = StudyData(vocabulary_path="v.model", tasks={"en-de": "t1", "en-zh": "t2"},
                     irreducible_loss={})
    config = make_train_config(STOPPED, stopped, data, "runs/x", mixture_name="m")
    assert (config.train_steps, config.stop_step, config.cooldown_steps) == (2000, 1200, 400)
    assert make_train_config(STOPPED, check, data, "runs/y", mixture_name="m").stop_step == 0
    # a group trains runs of one stop: the checks of a size apart from its stopped runs
    for group in group_runs(STOPPED, list(runs.values())):
        assert len({STOPPED.stop_step_for(r) for r in group}) == 1


def test_compute_saved_counts_the_steps_after_each_stop_and_the_branches_dropped():
    runs = expand(STOPPED)
    savings = stop_savings(STOPPED, runs)
    full = sum(b - a for r in with_branches(preset("default"), runs)
               for a, b in [preset("default").run_steps(r)])
    kept = sum(b - a for r in with_branches(STOPPED, runs) for a, b in [STOPPED.run_steps(r)])
    assert sum(v[1] for v in savings.values()) == full
    assert sum(v[0] for v in savings.values()) == full - kept
    cd1500 = 1667 - 1500  # the dropped branch's cool-down: 10 % of its 1,667 steps
    assert savings["micro-1"][0] == 4 * (800 + cd1500)  # 4 stopped mixtures of micro-1


def test_bad_stop_settings_name_their_field():
    with pytest.raises(StudyError, match="StudySpec.stop_fraction"):
        STOPPED.replace(stop_fraction=0.0)
    with pytest.raises(StudyError, match="StudySpec.stop_fraction"):
        STOPPED.replace(stop_fraction=1.5)
    with pytest.raises(StudyError, match="StudySpec.stop_checks: 'all' stands alone"):
        STOPPED.replace(stop_checks=("all", "micro-1_p0.50_s0"))
    spec = STOPPED.replace(stop_checks=("micro-1_p0.55_s0",))
    with pytest.raises(StudyError, match="'micro-1_p0.55_s0' is not a design run"):
        stopped_runs(spec)


def test_the_output_directory_accepts_another_stop_but_no_other_change(tmp_path):
    try:
        stages.prepare_out_dir(tmp_path, STOPPED)
        lock.release_all()
        full = preset("default")
        stages.prepare_out_dir(tmp_path, full)  # the same study, now trained to the end
        lock.release_all()
        assert json.loads((tmp_path / "study.json").read_text())["stop_fraction"] == 1.0
        with pytest.raises(stages.UsageError, match="fields differ: stop_fraction, train_steps"):
            stages.prepare_out_dir(tmp_path, STOPPED.replace(train_steps=1000))
    finally:
        lock.release_all()


def test_a_stopped_run_is_complete_until_the_study_asks_for_its_end(tmp_path):
    run = next(r for r in expand(STOPPED) if r.run_id == "micro-1_p0.30_s0")
    d = tmp_path / run.run_id
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"status": "stopped", "final_step": 1200}))
    assert run_complete(STOPPED, run, tmp_path)
    assert not run_complete(preset("default"), run, tmp_path)
    (d / "run.json").write_text(json.dumps({"status": "stopped", "final_step": 900}))
    assert not run_complete(STOPPED, run, tmp_path)
