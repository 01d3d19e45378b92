"""Mixture laws for K pairs: the law that generated the data is the one chosen by
leave-one-mixture-out CV, and it predicts the held-out runs."""

from __future__ import annotations

import numpy as np

from fitting.laws.mixture_compare import compare_mixture_laws
from fitting.test_utils import datamixing_truth, known_truth_mixture_runs, transfer_truth


def test_generating_law_chosen_transfer():
    cmp = compare_mixture_laws(known_truth_mixture_runs(transfer_truth()),
                               forms=("transfer", "additive"), n_boot=0)
    assert cmp.chosen == "transfer"
    assert cmp.errors["transfer"]["heldout_mape"] < 0.5
    assert cmp.errors["transfer"]["cv_mae"] < cmp.errors["additive"]["cv_mae"]
    assert set(cmp.heldout) == {"r30", "r31"}


def test_generating_law_chosen_datamixing():
    truth = datamixing_truth()
    cmp = compare_mixture_laws(known_truth_mixture_runs(truth, noise=0.001, n_mix=11),
                               forms=("transfer", "datamixing"), n_boot=0)
    assert cmp.chosen == "datamixing"
    assert cmp.errors["datamixing"]["heldout_mape"] < 1.0
    fit = cmp.laws["datamixing"]
    t_true = np.array(truth.solutions["en-x0@2"]["theta"])
    t_fit = np.array(fit.solutions["en-x0@2"]["theta"])
    assert np.max(np.abs(t_fit - t_true)) < 0.3
