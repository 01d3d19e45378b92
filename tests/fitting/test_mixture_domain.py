"""The mixture laws' domain: untrained pairs and over-repeated data are neither fitted nor scored."""

from __future__ import annotations

import dataclasses

import numpy as np

from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.mixture.compare import compare_mixture_laws
from fitting.laws.mixture.domain import EpochCap, outside_domain
from fitting.laws.mixture.laws import MixtureLawFit
from fitting.laws.mixture.runs import MixtureRuns

PAIRS = ["en-a", "en-b", "en-c", "en-d"]
K = len(PAIRS)
SIZES = [1e6, 4e6]


def _truth() -> MixtureLawFit:
    sol = {p: {"theta": [0.35] + [0.0] * (K - 1), "coef": [0.5 + 0.1 * i, 0.8],
               "f_scale": 0.01} for i, p in enumerate(PAIRS)}
    sol["en-b"]["theta"][1] = 0.5  # en-b's τ from en-c
    return MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS, sizes=SIZES,
                         n_ref=2e6, solutions=sol)


def _runs() -> MixtureRuns:
    design = np.vstack([np.eye(K), dirichlet_mixtures(K, 10, seed=2, concentration=3.0)])
    n = np.repeat(SIZES, len(design))
    W = np.tile(design, (len(SIZES), 1))
    Y = _truth().predict(n, W)
    Y[W == 0] = 11.0  # zero-shot: far above any trained loss
    return MixtureRuns(PAIRS, [f"r{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), np.zeros(len(n), bool),
                       data_size={p: 1000.0 for p in PAIRS})


def test_masks_name_untrained_and_over_cap_losses():
    runs = _runs()
    masks = outside_domain(runs, epoch_cap=EpochCap(20_000, 5))  # cap: w > 0.25
    np.testing.assert_array_equal(masks["untrained"], runs.W == 0)
    np.testing.assert_array_equal(masks["over epoch cap"], runs.W > 0.25)
    assert not outside_domain(runs)["over epoch cap"].any()  # no budget: no cap


def test_zero_shot_and_overfit_losses_do_not_bend_the_fit():
    runs = _runs()
    over = runs.W > 0.6
    Y = np.where(over, runs.Y * 3, runs.Y)  # over-fitted: loss rises with the pair's weight
    bad = dataclasses.replace(runs, Y=Y)
    cmp = compare_mixture_laws(bad, forms=("transfer",), n_boot=0,
                               epoch_cap=EpochCap(10_000, 6))  # cap: w > 0.6
    assert cmp.outside == {"untrained": int((runs.W == 0).sum()),
                           "over epoch cap": int(over.sum())}
    fit = cmp.laws["transfer"]
    inside = (runs.W > 0) & ~over
    pred = fit.predict(runs.n, runs.W)
    assert np.max(np.abs(pred[inside] / runs.Y[inside] - 1)) < 0.01
    assert cmp.errors["transfer"]["cv_mape"] < 2.0
    # without the epoch cap the over-fitted losses bend the law
    naive = compare_mixture_laws(bad, forms=("transfer",), n_boot=0)
    assert naive.outside["over epoch cap"] == 0
    assert naive.errors["transfer"]["cv_mape"] > 10 * cmp.errors["transfer"]["cv_mape"]
