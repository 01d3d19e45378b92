"""What a study tells the K-pair recommendation it may not do (stages.mixture_constraints)."""

import dataclasses

import pytest

from mnmt.study import mixture_design
from mnmt.study.spec import PRESETS
from mnmt.study.stages import load_spec, mixture_constraints


def test_k_pair_study_with_unimax_passes_its_budget_and_largest_epoch_cap():
    spec = load_spec(None, "cpu-many-pairs", [])
    spec = dataclasses.replace(spec, unimax_epochs=(4.0, 10.0))
    got = mixture_constraints(spec)
    assert got == {"budget_examples": pytest.approx(mixture_design.budget_examples(spec)),
                   "epoch_cap": 10.0}
    assert got["budget_examples"] >= spec.train_steps * spec.batch_size  # ≥ 1 example per row


def test_no_constraints_without_unimax_or_for_two_pairs():
    spec = load_spec(None, "cpu-many-pairs", [])
    assert mixture_constraints(dataclasses.replace(spec, unimax_epochs=())) is None
    assert mixture_constraints(PRESETS["default"]) is None
