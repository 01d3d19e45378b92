"""`TrackingConfig` bound for a study (`mnmt-study --gin TrackingConfig.profile_steps=(10,12)`)
reaches every run's TrainConfig through `StudySpec.train_overrides`."""

from __future__ import annotations

from mnmt.study import stages
from mnmt.study.test_utils import run_configs


def test_study_gin_tracking_bindings_reach_every_runs_train_config():
    spec = stages.load_spec(None, "ci", ["TrackingConfig.profile_steps=(10, 12)",
                                         "TrackingConfig.wandb_project='mnmt'"])
    configs = run_configs(spec)
    assert configs and {c.tracking.profile_steps for c in configs} == {(10, 12)}
    assert {c.tracking.wandb_project for c in configs} == {"mnmt"}
    assert {c.tracking.wandb_mode for c in configs} == {"online"}  # the rest keep defaults
    plain = stages.load_spec(None, "ci", [])
    assert {c.tracking.profile_steps for c in run_configs(plain)} == {None}
