"""What a study tells the K-pair recommendation it may not do (stages.mixture_constraints)."""


import pytest

from mnmt.study import mixture_design
from mnmt.study.loading import preset
from mnmt.study.spec import StudyError
from mnmt.study.stages import load_spec, mixture_constraints


def test_without_epoch_cap_a_k_pair_study_passes_its_budget_and_largest_unimax_cap():
    spec = load_spec(None, "cpu-many-pairs", [])
    spec = spec.replace(unimax_epochs=(4.0, 10.0), epoch_cap=0.0,
                               mixture_preferences=())
    got = mixture_constraints(spec)
    assert got == {"budget_examples": pytest.approx(mixture_design.budget_examples(spec)),
                   "epoch_cap": 10.0}
    assert got["budget_examples"] >= spec.schedule.train_steps * spec.schedule.batch_size  # ≥ 1 example per row


def test_no_constraints_without_unimax_or_for_two_pairs():
    spec = load_spec(None, "cpu-many-pairs", []).replace(mixture_preferences=())
    assert mixture_constraints(spec.replace(unimax_epochs=(), epoch_cap=0.0)) is None
    assert mixture_constraints(preset("default")) is None


def test_epoch_cap_field_overrides_the_unimax_cap_and_needs_caps_for_every_pair():
    spec = load_spec(None, "cpu-many-pairs", []).replace(unimax_epochs=(4.0,),
                               epoch_cap=12.0)
    assert mixture_constraints(spec)["epoch_cap"] == 12.0
    with pytest.raises(StudyError, match="StudySpec.epoch_cap: an epoch cap needs"):
        spec.replace(data_caps=spec.data_caps[:2], temperatures=(),
                            unimax_epochs=())
    with pytest.raises(StudyError, match="StudySpec.epoch_cap: expected 0"):
        spec.replace(epoch_cap=-1.0)


def test_preferences_reach_the_recommendation_with_or_without_an_epoch_cap():
    spec = load_spec(None, "cpu-many-pairs", [])
    prefs = {"en-sv": 0.0, "en-da": 1.0, "en-es": 0.0, "en-it": 1.0, "en-fi": 0.0}
    assert mixture_constraints(spec)["preferences"] == prefs
    no_cap = spec.replace(unimax_epochs=(), epoch_cap=0.0,
                                 mixture_preferences=(("en-da", 3.0),))
    assert mixture_constraints(no_cap) == {
        "preferences": {"en-sv": 1.0, "en-da": 3.0, "en-es": 1.0, "en-it": 1.0, "en-fi": 1.0}}


@pytest.mark.parametrize("entries", [(("en-xx", 1.0),), (("en-da", -1.0),), (("en-da",),),
                                     tuple((p, 0.0) for p in ("en-sv", "en-da", "en-es", "en-it",
                                                              "en-fi"))])
def test_bad_preferences_name_the_field(entries):
    spec = load_spec(None, "cpu-many-pairs", [])
    with pytest.raises(StudyError, match="StudySpec.mixture_preferences: expected"):
        spec.replace(mixture_preferences=entries)
