"""Mixture laws for K pairs: the law that generated the data is the one chosen by
leave-one-mixture-out CV, and it predicts the held-out runs."""

from __future__ import annotations

import numpy as np

from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.mixture_fit import (
    MixtureRuns,
    compare_mixture_laws,
)
from fitting.laws.mixture_laws import MixtureLawFit

K = 5
PAIRS = [f"en-x{i}" for i in range(K)]
SIZES = [1e7, 3e7, 1e8]
TAU = np.zeros((K, K))
TAU[0, 1], TAU[1, 0] = 0.6, 0.5  # two related pairs
TAU[3, 4] = -0.2  # interference; en-x2 an isolate


def _transfer_truth() -> MixtureLawFit:
    sol = {}
    for i, p in enumerate(PAIRS):
        oth = [j for j in range(K) if j != i]
        sol[p] = {"theta": [0.3 + 0.02 * i] + list(TAU[i, oth]),
                  "coef": [0.6 + 0.1 * i, 1.0 + 0.1 * i], "f_scale": 0.01}
    return MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS, sizes=SIZES,
                         n_ref=3e7, solutions=sol)


def _ye_truth() -> MixtureLawFit:
    rng = np.random.default_rng(3)
    sol = {}
    for i, p in enumerate(PAIRS):
        for s in range(len(SIZES)):
            sol[f"{p}@{s}"] = {"theta": list(rng.uniform(0.5, 2.5, K - 1)),
                               "coef": [1.0 + 0.1 * i - 0.1 * s, 0.3], "f_scale": 0.02}
    return MixtureLawFit(law="mixture", params={}, form="datamixing", pairs=PAIRS, sizes=SIZES,
                         n_ref=3e7, solutions=sol)


def _runs(truth: MixtureLawFit, noise: float = 0.002, n_mix: int = 9) -> MixtureRuns:
    Wd = np.vstack([np.full((1, K), 1 / K), dirichlet_mixtures(K, n_mix, seed=1,
                                                                 concentration=2.0)])
    Wh = dirichlet_mixtures(K, 2, seed=7, concentration=2.0)
    n = np.concatenate([np.repeat(SIZES, len(Wd)), [SIZES[-1]] * 2])
    W = np.vstack([np.tile(Wd, (len(SIZES), 1)), Wh])
    rng = np.random.default_rng(0)
    Y = truth.predict(n, W) * (1 + noise * rng.standard_normal((len(n), K)))
    held = np.zeros(len(n), bool)
    held[-2:] = True
    return MixtureRuns(PAIRS, [f"r{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), held)


def test_generating_law_chosen_transfer():
    cmp = compare_mixture_laws(_runs(_transfer_truth()), forms=("transfer", "additive"),
                               n_boot=0)
    assert cmp.chosen == "transfer"
    assert cmp.errors["transfer"]["heldout_mape"] < 0.5
    assert cmp.errors["transfer"]["cv_mae"] < cmp.errors["additive"]["cv_mae"]
    assert set(cmp.heldout) == {"r30", "r31"}


def test_generating_law_chosen_datamixing():
    truth = _ye_truth()
    cmp = compare_mixture_laws(_runs(truth, noise=0.001, n_mix=11),
                               forms=("transfer", "datamixing"), n_boot=0)
    assert cmp.chosen == "datamixing"
    assert cmp.errors["datamixing"]["heldout_mape"] < 1.0
    fit = cmp.laws["datamixing"]
    t_true = np.array(truth.solutions["en-x0@2"]["theta"])
    t_fit = np.array(fit.solutions["en-x0@2"]["theta"])
    assert np.max(np.abs(t_fit - t_true)) < 0.3
