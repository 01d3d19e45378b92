"""Predictive intervals of the eq. 11 law (fitting.intervals.eq11): the extrapolation
term from its own backtest grown with log N, none (and marked) without a backtest, the
frontier's intervals at the target sizes, and held-out eq. 11 entries marked — on tables with a
known truth (fitting.test_utils.TRUTH)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.core.options import UncertaintyOptions
from fitting.intervals.eq11 import eq11_interval, frontier_intervals, mark_eq11_heldout
from fitting.laws.size.effective import fit_multilingual_law
from fitting.laws.size.frontier import frontier_2pair
from fitting.test_utils import make_final_table, true_loss

SIZES = (2e5, 5e5, 1.25e6, 3.125e6)


@pytest.fixture(scope="module")
def law():
    return fit_multilingual_law(make_final_table(sizes=SIZES, noise=0.01),
                                uncertainty=UncertaintyOptions(n_refits=20))


def test_the_extrapolation_term_is_the_backtest_grown_with_log_n(law):
    bt = law.backtest["en-de"]
    step_error = abs(math.log(bt["pred"] / bt["true"]))
    step = math.log(SIZES[-1] / SIZES[-2])
    inside, cal = eq11_interval(law, SIZES[-1], 0.5, "en-de", SIZES)
    assert cal and inside.sd_extrapolation == pytest.approx(step_error)   # one step at N_max
    far, _ = eq11_interval(law, SIZES[-1] * math.exp(3 * step), 0.5, "en-de", SIZES)
    assert far.sd_extrapolation == pytest.approx(3 * step_error)
    assert far.sd_resample > 0                                           # the law's refits
    seeded, _ = eq11_interval(law, SIZES[-1], 0.5, "en-de", SIZES, sigma_seed=0.02)
    assert seeded.sd_total == pytest.approx(math.hypot(inside.sd_total, 0.02))
    # one backtest error is one dof; a seed sd from 3 seeds adds its 2
    assert inside.calibration_n == 1 and inside.dof is not None and inside.dof < 2
    known = eq11_interval(law, SIZES[-1], 0.5, "en-de", SIZES, sigma_seed=0.02)[0]
    three = eq11_interval(law, SIZES[-1], 0.5, "en-de", SIZES, sigma_seed=0.02, seed_dof=2)[0]
    assert three.seed_dof == 2 and three.dof < known.dof and three.hi95 > known.hi95


def test_without_a_backtest_the_interval_is_marked_not_calibrated():
    three = fit_multilingual_law(make_final_table(sizes=SIZES[:3], noise=0.01),
                                 uncertainty=UncertaintyOptions(n_refits=0, method=None))
    iv, cal = eq11_interval(three, 1e7, 0.5, "en-de", SIZES[:3])
    assert not cal and iv.sd_extrapolation == 0.0 and iv.sd_total == 0.0


def test_frontier_intervals_cover_the_truth_at_a_target_size(law):
    target = 4 * SIZES[-1]
    fr = frontier_2pair(law, [target], pairs=["en-de", "en-zh"], n_weights=9)
    pred = frontier_intervals(law, fr, [target], SIZES, {"en-de": 0.01})
    de = pred[f"{target:g}"]["en-de"]
    p = fr.weights[:, 0]
    truth = true_loss("en-de", target, p)
    assert de["calibrated"] and len(de["lo95"]) == len(p)
    assert np.all((np.array(de["lo95"]) <= truth) & (truth <= np.array(de["hi95"])))
    # en-zh has no seed sd given: narrower by exactly that term nowhere, so only its own
    assert np.all(np.array(pred[f"{target:g}"]["en-zh"]["sd_total"]) > 0)


def test_held_out_eq11_entries_are_marked_and_others_left_alone(law):
    n = 4 * SIZES[-1]
    good = {"law": "eq. 11 (f̂ eq. 12)", "pair": "en-de", "n": n, "weight": 0.5, "seeds": 3,
            "measured": float(true_loss("en-de", n, 0.5))}
    bad = {**good, "measured": 3 * good["measured"]}
    other = {**good, "law": "eq. 7 (joint)"}
    cov = mark_eq11_heldout([good, bad, other], law, SIZES, {"en-de": 0.03})
    assert good["inside95"] and not bad["inside95"] and "predictive" not in other
    assert good["predictive"]["sigma_seed"] == pytest.approx(0.03 / math.sqrt(3))
    assert cov["0.95"]["inside"] == 1 and cov["0.95"]["n"] == 2
