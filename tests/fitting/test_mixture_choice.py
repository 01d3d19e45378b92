"""Mixture laws for K pairs: the law that generated the data is the one chosen by
leave-one-mixture-out CV, and it predicts the held-out runs."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.laws.mixture.compare import compare_mixture_laws
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


def test_seeds_of_one_mixture_are_one_point_though_their_token_counts_differ():
    """Two seeds of every run, token counts a few tokens apart (as a study's runs are): the
    laws see the seed means — the same fit as the table of means — not one point per seed."""
    from dataclasses import replace

    one = known_truth_mixture_runs(transfer_truth())
    r = len(one.n)
    rng = np.random.default_rng(5)
    eps = 0.01 * rng.standard_normal(one.Y.shape)
    two = replace(one, run_ids=[f"{i}_s{s}" for s in (0, 1) for i in one.run_ids],
                  n=np.tile(one.n, 2), W=np.tile(one.W, (2, 1)),
                  Y=np.vstack([one.Y * (1 + eps), one.Y * (1 - eps)]),
                  curve_sd=np.tile(one.curve_sd, (2, 1)), heldout=np.tile(one.heldout, 2),
                  tokens=630_000 + rng.integers(0, 8_000, 2 * r).astype(float))
    mean = replace(one, Y=one.Y.copy(), tokens=np.full(r, 634_000.0))
    a = compare_mixture_laws(two, forms=("transfer",), n_boot=0)
    b = compare_mixture_laws(mean, forms=("transfer",), n_boot=0)
    assert a.errors["transfer"]["cv_points"] == b.errors["transfer"]["cv_points"]
    design = ~one.heldout
    assert a.laws["transfer"].predict(one.n[design], one.W[design]) == pytest.approx(
        b.laws["transfer"].predict(one.n[design], one.W[design]), rel=1e-3)
