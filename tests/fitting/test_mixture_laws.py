"""Mixture laws for K pairs on known truth: parameters recovered, relatives ranked above
non-relatives, the generating law chosen, constrained recommendations."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.core.base import FitResult
from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.mixture_fit import (
    MixtureRuns,
    recommend_mixture,
    transfer_matrix,
)
from fitting.laws.mixture_laws import MixtureLawFit, fit_mixture_law

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


@pytest.fixture(scope="module")
def transfer_fit():
    runs = _runs(_transfer_truth())
    fit = ~runs.heldout
    return fit_mixture_law("transfer", runs.n[fit], runs.W[fit], runs.Y[fit], PAIRS,
                           groups=runs.mixture_keys[fit], n_boot=6)


def test_transfer_parameters_recovered(transfer_fit):
    tau, sd = transfer_matrix(transfer_fit)
    assert np.allclose(np.diag(tau), 1.0)
    assert abs(tau[0, 1] - 0.6) < 0.08 and abs(tau[1, 0] - 0.5) < 0.08
    assert abs(tau[3, 4] + 0.2) < 0.08
    off = ~np.eye(K, dtype=bool) & (TAU == 0)
    assert np.max(np.abs(tau[off])) < 0.1
    for i, p in enumerate(PAIRS):
        assert abs(transfer_fit.params[f"alpha[{p}]"] - (0.3 + 0.02 * i)) < 0.03
    assert np.all(np.isfinite(sd[~np.eye(K, dtype=bool)]))


def test_relatives_ranked_above_non_relatives(transfer_fit):
    tau, _ = transfer_matrix(transfer_fit)
    related = [tau[0, 1], tau[1, 0]]
    others = tau[~np.eye(K, dtype=bool) & (TAU <= 0)]
    assert min(related) > max(others)


def test_json_round_trip_and_band(transfer_fit):
    again = FitResult.from_json(transfer_fit.to_json())
    W = np.full((1, K), 1 / K)
    assert np.allclose(again.predict([2e8], W), transfer_fit.predict([2e8], W))
    lo, hi = transfer_fit.band([2e8], W)
    pred = transfer_fit.predict([2e8], W)
    assert np.all(lo <= pred + 1e-12) and np.all(pred <= hi + 1e-12)


def test_recommendation_respects_constraints_and_beats_uniform():
    truth = _transfer_truth()
    uniform = truth.predict([3e8], np.full((1, K), 1 / K))[0]
    rec = recommend_mixture(truth, 3e8, max_weights={"en-x0": 0.12},
                            max_loss={"en-x4": float(uniform[4])},
                            data_size={p: 10 ** (5 + 0.5 * i) for i, p in enumerate(PAIRS)},
                            budget_examples=1e6, epoch_cap=4.0, n_starts=4)
    w = rec["weights"]
    assert abs(sum(w.values()) - 1) < 1e-6 and w["en-x0"] <= 0.12 + 1e-6
    assert rec["predicted"]["en-x4"] <= uniform[4] + 1e-6
    assert rec["feasible"] and rec["objective"] < rec["baselines"]["uniform"]["objective"]
    assert rec["baselines"]["uniform"]["violates"]  # 0.2 > 0.12
    assert {"temperature T=1", "temperature T=5", "temperature T=100", "unimax"} <= \
        set(rec["baselines"])
    rec2 = recommend_mixture(truth, 3e8, n_starts=2)
    assert "unimax" in rec2["baselines_skipped"]
