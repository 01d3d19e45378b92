"""Early stop (`TrainConfig.stop_step`): a run stopped at step S is the full run's first S steps
(same schedule, same rows), logs the planned rates of the rest, and resumes to the end as if it
had never stopped."""

from __future__ import annotations

import pytest
from run_helpers import rows_by_key

from mnmt.training import branches, run_files


def _keys(rows, metric=None):
    return {(r["step"], r["task"], r["eval_set"], r["metric"]) for r in rows
            if metric is None or r["metric"] == metric}


def test_a_stopped_run_is_a_prefix_of_the_full_run_and_resumes_to_it(make_config):
    from mnmt.training.trainer import train

    full_cfg = make_config("full", cooldown_steps=4)
    full = train(full_cfg)
    stopped_cfg = make_config("stopped", cooldown_steps=4, stop_step=7)  # off the log grid
    first = train(stopped_cfg)
    assert (first.status, first.final_step) == ("stopped", 7)
    meta = run_files.read_run_json(stopped_cfg.model_dir)
    assert meta["status"] == "stopped" and meta["training"]["stop_step"] == 7
    a = rows_by_key(run_files.read_metrics(full_cfg.model_dir))
    rows = run_files.read_metrics(stopped_cfg.model_dir)
    b = rows_by_key(rows)
    trained = {k for k in b if k[3] != "planned_learning_rate"}
    assert max(k[0] for k in trained) == 7
    # every row the full run has up to the stop, with the same value; the only extra rows are
    # the evaluation at the stop and the planned rates
    shared = {k for k in a if k[0] <= 7}
    assert shared <= trained and trained - shared == {k for k in trained if k[0] == 7}
    for k in shared:
        assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-7), k
    planned = {k[0]: v for k, v in b.items() if k[3] == "planned_learning_rate"}
    logged = {k[0]: v for k, v in a.items() if k[3] == "learning_rate" and k[0] > 7}
    assert sorted(planned) == sorted(logged) == [8, 10, 12]
    assert planned == pytest.approx(logged, rel=1e-6)
    assert planned[12] < planned[8]  # the cool-down of the full schedule, not a 7-step one
    # asked again with the same stop: nothing to do
    assert train(stopped_cfg).status == "stopped"
    assert run_files.read_metrics(stopped_cfg.model_dir) == rows
    # resumed without the stop: the full run (its rows, values and the end's losses)
    done = train(make_config("stopped", cooldown_steps=4))
    assert (done.status, done.final_step) == ("finished", 12)
    c = rows_by_key(run_files.read_metrics(full_cfg.model_dir.replace("full", "stopped")))
    assert set(a) <= set(c)
    for k in a:
        assert c[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k
    assert done.final_eval == pytest.approx(full.final_eval, rel=1e-4)


def test_a_stopped_run_has_no_branch_after_its_stop(make_config):
    config = make_config(train_steps=1000, cooldown_steps=200, branches={"points": (0.3, 0.6)},
                         stop_step=450)
    assert [c.branches.parent_step for c in branches.branch_configs(config)] == [300]
    assert all(c.stop_step == 0 for c in branches.branch_configs(config))
    assert len(branches.branch_configs(config.updated(stop_step=600))) == 2


def test_a_stopped_run_is_probed_at_its_stop_and_resumes_the_probe_curve(make_config):
    """With probes on, a run stopped off the probe grid (step 7 of 12, probes every 3) ends its
    probe curve at the stop, like its loss rows; resumed to the end it keeps that row and adds
    the later ones."""
    from mnmt.training.trainer import train

    probes = {"probe_every": 3, "probe_examples": 8}
    stopped = make_config("probed", cooldown_steps=4, stop_step=7, eval=probes)
    assert train(stopped).status == "stopped"

    def probe_steps():
        return sorted({k[0] for k in _keys(run_files.read_metrics(stopped.model_dir),
                                           "probe_loss")})

    assert probe_steps() == [3, 6, 7]
    assert train(make_config("probed", cooldown_steps=4, eval=probes)).status == "finished"
    assert probe_steps() == [3, 6, 7, 9, 12]
