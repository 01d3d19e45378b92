"""Recommendations that stay where the law has data: minimum weights from the design's support
(support_bounds), bounds that bind or not, and the band-aware criterion — on constructed laws
whose optimum is known."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fitting.core.base import FitError
from fitting.laws.mixture.domain import EpochCap
from fitting.laws.mixture.recommend import MixtureConstraints, recommend_mixture, support_bounds
from fitting.laws.mixture.runs import MixtureRuns
from fitting.test_utils import MIXTURE_PAIRS as PAIRS
from fitting.test_utils import transfer_truth

K = len(PAIRS)
N = 3e7


def _runs(W, heldout=None, data_size=None) -> MixtureRuns:
    W = np.asarray(W, float)
    Y = np.where(W >= 0, 1.0, np.nan)
    held = np.zeros(len(W), bool) if heldout is None else np.asarray(heldout)
    return MixtureRuns(PAIRS, [f"r{i}" for i in range(len(W))], np.full(len(W), N), W, Y,
                       np.full(W.shape, np.nan), held, data_size=data_size or {})


def test_support_bound_is_the_second_smallest_fitted_in_domain_weight():
    W = [[0.02, 0.3, 0.3, 0.18, 0.2],   # held out: never counts
         [0.5, 0.0, 0.2, 0.1, 0.2],     # x1 at weight 0: untrained, not data
         [0.1, 0.05, 0.25, 0.3, 0.3],
         [0.1, 0.2, 0.2, 0.2, 0.3],     # x0 at 0.1 twice: one distinct weight
         [0.3, 0.4, 0.1, 0.1, 0.1],
         [0.05, 0.9, 0.0, 0.0, 0.05]]
    runs = _runs(W, heldout=[True] + [False] * 5, data_size={p: 1000.0 for p in PAIRS})
    got = support_bounds(runs)
    assert got == pytest.approx({"en-x0": 0.1, "en-x1": 0.2, "en-x2": 0.2, "en-x3": 0.2,
                                 "en-x4": 0.1})
    assert support_bounds(runs, points=3)["en-x1"] == pytest.approx(0.4)
    # over 3 epochs (w > 0.3 of a 10,000-example budget on 1,000 examples) is outside the domain
    capped = support_bounds(runs, epoch_cap=EpochCap(10_000, 3.0), points=3)
    assert capped["en-x1"] == pytest.approx(0.2)
    assert support_bounds(runs, points=1)["en-x1"] == pytest.approx(0.05)
    only_one = support_bounds(_runs([[1.0, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0]]))
    assert only_one["en-x1"] == 0.5 and only_one["en-x2"] == pytest.approx(1 / K)


def _prefer_x0():
    """Only en-x0 matters; its own data helps it most (τ ≤ 0.6 for every source): the unbounded
    optimum puts everything on x0."""
    return {"en-x0": 1.0, "en-x1": 0.0, "en-x2": 0.0, "en-x3": 0.0, "en-x4": 0.0}


def test_a_pair_is_never_recommended_below_its_bound_and_the_binding_is_reported():
    truth = transfer_truth()
    free = recommend_mixture(truth, N, MixtureConstraints(preferences=_prefer_x0()), n_starts=3)
    assert free["weights"]["en-x0"] > 1 - 1e-3
    floor = {"en-x0": 0.05, "en-x1": 0.05, "en-x2": 0.1, "en-x3": 0.08, "en-x4": 0.12}
    rec = recommend_mixture(truth, N, MixtureConstraints(preferences=_prefer_x0(),
                                                         min_weights=floor), n_starts=3)
    w = rec["weights"]
    for p in ("en-x1", "en-x2", "en-x3", "en-x4"):
        assert w[p] == pytest.approx(floor[p], abs=1e-6)
    assert abs(sum(w.values()) - 1) < 1e-6
    assert set(rec["bounds"]["at_min"]) == {"en-x1", "en-x2", "en-x3", "en-x4"}
    assert rec["bounds"]["min_weights"] == pytest.approx(floor)
    assert rec["objective"] > free["objective"]  # the bound costs predicted loss


def test_a_bound_below_the_optimum_does_not_bind_nor_move_it():
    truth = transfer_truth()
    free = recommend_mixture(truth, N, n_starts=3)
    low = {p: 0.5 * free["weights"][p] for p in PAIRS}
    rec = recommend_mixture(truth, N, MixtureConstraints(min_weights=low), n_starts=3)
    assert rec["bounds"]["at_min"] == []
    assert rec["weights"] == pytest.approx(free["weights"], abs=2e-3)


def test_bounds_above_a_cap_or_summing_above_one_are_cut_to_a_feasible_box():
    truth = transfer_truth()
    rec = recommend_mixture(truth, N, MixtureConstraints(
        max_weights={"en-x0": 0.1}, min_weights={p: 0.3 for p in PAIRS}), n_starts=2)
    w = rec["weights"]
    assert abs(sum(w.values()) - 1) < 1e-6 and w["en-x0"] <= 0.1 + 1e-9
    assert rec["bounds"]["note"] and "scaled" in rec["bounds"]["note"]


def test_the_band_criterion_gives_an_uncertain_pair_more_weight():
    """Refits that disagree on x2's scale (±40 %) only: its sd falls with its weight, so the
    upper end of the band asks for more x2 than the point estimate does; identical refits
    change nothing."""
    truth = transfer_truth()
    same = copy.deepcopy(truth)
    same.boot = [copy.deepcopy(truth.solutions) for _ in range(4)]
    point = recommend_mixture(truth, N, n_starts=3)
    flat = recommend_mixture(same, N, n_starts=3)
    assert flat["weights"] == pytest.approx(point["weights"], abs=2e-3)
    assert "upper band" in flat["criterion"]["kind"]
    wide = copy.deepcopy(truth)
    wide.boot = []
    for f in (0.6, 0.8, 1.2, 1.4):
        sol = copy.deepcopy(truth.solutions)
        sol["en-x2"]["coef"] = [truth.solutions["en-x2"]["coef"][0] * f,
                                truth.solutions["en-x2"]["coef"][1]]
        wide.boot.append(sol)
    band = recommend_mixture(wide, N, n_starts=3)
    assert band["weights"]["en-x2"] > point["weights"]["en-x2"] + 0.02
    assert band["criterion"]["value"] > band["objective"]  # the upper end lies above the point
    uniform = band["baselines"]["uniform"]
    assert uniform["criterion"] > uniform["objective"]
    assert band["criterion"]["value"] <= uniform["criterion"] + 1e-9  # optimised on it
    assert band["objective"] >= point["objective"] - 1e-9  # the point optimum is still the point's


def test_the_target_size_is_stated():
    truth = transfer_truth()
    assert "a fitted size" in recommend_mixture(truth, 3e7, n_starts=1)["target_note"]
    assert "extrapolated 3x" in recommend_mixture(truth, 3e8, n_starts=1)["target_note"]


def test_a_weight_only_domain_is_weighted_but_not_scored():
    """A domain trained, never evaluated (no solution: the law predicts NaN for it) still gets a
    weight; the objective is the other pairs' mean, the baselines violate nothing for it, and a
    preference for it is refused."""
    truth = transfer_truth()
    del truth.solutions[PAIRS[-1]]
    rec = recommend_mixture(truth, N, n_starts=2)
    w = rec["weights"]
    assert abs(sum(w.values()) - 1) < 1e-6 and np.isnan(rec["predicted"][PAIRS[-1]])
    scored = [rec["predicted"][p] for p in PAIRS[:-1]]
    assert rec["objective"] == pytest.approx(np.mean(scored))
    assert not rec["baselines"]["uniform"]["violates"] and rec["feasible"]
    with pytest.raises(FitError, match="weight-only"):
        recommend_mixture(truth, N, MixtureConstraints(preferences={PAIRS[-1]: 2.0}), n_starts=2)
