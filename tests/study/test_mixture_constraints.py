"""What a study tells the K-pair recommendation it may not do (stages.mixture_constraints)."""

import dataclasses

import pytest

from mnmt.study import mixture_design
from mnmt.study.spec import PRESETS, StudyError
from mnmt.study.stages import load_spec, mixture_constraints


def test_without_epoch_cap_a_k_pair_study_passes_its_budget_and_largest_unimax_cap():
    spec = load_spec(None, "cpu-many-pairs", [])
    spec = dataclasses.replace(spec, unimax_epochs=(4.0, 10.0), epoch_cap=0.0)
    got = mixture_constraints(spec)
    assert got == {"budget_examples": pytest.approx(mixture_design.budget_examples(spec)),
                   "epoch_cap": 10.0}
    assert got["budget_examples"] >= spec.train_steps * spec.batch_size  # ≥ 1 example per row


def test_no_constraints_without_unimax_or_for_two_pairs():
    spec = load_spec(None, "cpu-many-pairs", [])
    assert mixture_constraints(dataclasses.replace(spec, unimax_epochs=(), epoch_cap=0.0)) is None
    assert mixture_constraints(PRESETS["default"]) is None


def test_epoch_cap_field_overrides_the_unimax_cap_and_needs_caps_for_every_pair():
    spec = dataclasses.replace(load_spec(None, "cpu-many-pairs", []), unimax_epochs=(4.0,),
                               epoch_cap=12.0)
    assert mixture_constraints(spec)["epoch_cap"] == 12.0
    with pytest.raises(StudyError, match="StudySpec.epoch_cap: an epoch cap needs"):
        dataclasses.replace(spec, data_caps=spec.data_caps[:2], temperatures=(),
                            unimax_epochs=())
    with pytest.raises(StudyError, match="StudySpec.epoch_cap: expected 0"):
        dataclasses.replace(spec, epoch_cap=-1.0)
