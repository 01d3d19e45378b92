"""Mixture laws for K pairs on known truth: parameters recovered, relatives ranked above
non-relatives, the generating law chosen, constrained recommendations."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.core.base import FitResult
from fitting.laws.mixture.compare import transfer_matrix
from fitting.laws.mixture.laws import fit_mixture_law
from fitting.laws.mixture.recommend import MixtureConstraints, recommend_mixture
from fitting.test_utils import MIXTURE_PAIRS as PAIRS
from fitting.test_utils import MIXTURE_TAU as TAU
from fitting.test_utils import known_truth_mixture_runs, transfer_truth

K = len(PAIRS)


@pytest.fixture(scope="module")
def transfer_fit():
    runs = known_truth_mixture_runs(transfer_truth())
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
    truth = transfer_truth()
    uniform = truth.predict([3e8], np.full((1, K), 1 / K))[0]
    rec = recommend_mixture(truth, 3e8, MixtureConstraints(
        max_weights={"en-x0": 0.12}, max_loss={"en-x4": float(uniform[4])},
        data_size={p: 10 ** (5 + 0.5 * i) for i, p in enumerate(PAIRS)},
        budget_examples=1e6, epoch_cap=4.0), n_starts=4)
    w = rec["weights"]
    assert abs(sum(w.values()) - 1) < 1e-6 and w["en-x0"] <= 0.12 + 1e-6
    assert rec["predicted"]["en-x4"] <= uniform[4] + 1e-6
    assert rec["feasible"] and rec["objective"] < rec["baselines"]["uniform"]["objective"]
    assert rec["baselines"]["uniform"]["violates"]  # 0.2 > 0.12
    assert {"temperature T=1", "temperature T=5", "temperature T=100", "unimax"} <= \
        set(rec["baselines"])
    rec2 = recommend_mixture(truth, 3e8, n_starts=2)
    assert "unimax" in rec2["baselines_skipped"]
