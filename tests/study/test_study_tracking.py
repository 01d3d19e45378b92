"""`TrackingConfig` bound for a study (`mnmt-study --gin TrackingConfig.profile_steps=(10,12)`)
reaches every run's TrainConfig through `StudySpec.train_overrides`."""

from __future__ import annotations

from pathlib import Path

from mnmt.study import stages
from mnmt.study.runner import StudyData, make_train_config
from mnmt.study.spec import expand


def test_study_gin_tracking_bindings_reach_every_runs_train_config():
    spec = stages.load_spec(None, "ci", ["TrackingConfig.profile_steps=(10, 12)",
                                         "TrackingConfig.wandb_project='mnmt'"])
    data = StudyData(vocabulary_path="v.model", tasks={p: f"t_{p}" for p in spec.pairs},
                     irreducible_loss={}, caps={})
    configs = [make_train_config(spec, run, data, Path("/r") / run.run_id, mixture_name="mix")
               for run in expand(spec)]
    assert configs and {c.tracking.profile_steps for c in configs} == {(10, 12)}
    assert {c.tracking.wandb_project for c in configs} == {"mnmt"}
    assert {c.tracking.wandb_mode for c in configs} == {"online"}  # the rest keep defaults
    plain = stages.load_spec(None, "ci", [])
    assert make_train_config(plain, expand(plain)[0], data, Path("/r/x"),
                             mixture_name="mix").tracking.profile_steps is None
