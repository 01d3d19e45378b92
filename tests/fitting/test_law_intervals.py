"""fitting.intervals.cooled_law: predictive intervals on the report's L(N, D) backtest and E."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from fitting.core.options import NO_UNCERTAINTY
from fitting.core.seed_noise import SeedNoise
from fitting.intervals.cooled_law import (
    LEAVE_ONE_RUN_OUT,
    backtest_intervals,
    cooled_law_intervals,
    estimate_points,
)
from fitting.laws.budget.chinchilla_joint import budget_rank, fit_joint_chinchilla
from fitting.report.sections.chinchilla import largest_size_seed_noises

SIZES = (1e5, 3e5, 1e6, 3e6, 1e7)
#: the seed noise measured below the held-out size, on 3 seeds
NOISE = SeedNoise(0.01, 3, 2, "seed sd at N = 3e+06")


def _points(noise: float = 0.01, seed: int = 3) -> pd.DataFrame:
    """Known truth: L = 1.2 + 40·N^−0.35 + 300·D^−0.4 (Caillaut eq. 2) at two weights (the
    smaller weight's terms 1.5× larger), three cooled-down budgets per run, 1 % noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in SIZES:
        for w, k in ((0.5, 1.5), (1.0, 1.0)):
            for d in (2e6, 4e6, 8e6):
                loss = 1.2 + k * (40 * n ** -0.35 + 300 * d ** -0.4)
                rows.append({"pair": "en-de", "weight": w, "n": n, "tokens": d,
                             "value": loss * (1 + noise * rng.standard_normal())})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def fitted():
    pts = _points()
    fit = fit_joint_chinchilla(pts, form="additive", noise_rel={"en-de": 0.01},
                               uncertainty=NO_UNCERTAINTY)
    cooled_law_intervals(fit, pts, {"en-de": NOISE})
    return fit, pts


def test_budget_rank_counts_from_each_runs_last_budget():
    pts = _points()
    rank = budget_rank(pts["tokens"], pts["weight"], pts["n"])
    assert set(rank[pts["tokens"] == 8e6]) == {0} and set(rank[pts["tokens"] == 2e6]) == {2}


def test_every_backtest_point_gets_an_interval_and_its_coverage_counts_them(fitted):
    fit, _ = fitted
    bt = fit.backtest["en-de"]
    assert bt["predictive"]["calibrated"] and bt["predictive"]["n_resamples"] > 10
    assert len(bt["errors"]) == 6
    for e in bt["errors"]:
        assert e["lo95"] < e["lo80"] < e["predicted"] < e["hi80"] < e["hi95"]
        assert e["predicted"] == pytest.approx(e["measured"] * (1 + e["error"]))
        assert e["inside95"] == (e["lo95"] <= e["measured"] <= e["hi95"])
    for p in bt["predictive"]["points"]:   # every component present, the forms' spread too
        assert p["sd_resample"] > 0 and p["sd_forms"] > 0 and p["sd_extrapolation"] > 0
        assert p["sigma_seed"] == pytest.approx(0.01) and p["seed_dof"] == 2
        assert p["calibrated"] and p["calibration_n"] == bt["predictive"]["calibration_n"] > 0
        assert p["dof"] is not None and p["dof"] > 2      # the seed sd's 2 dof, diluted
    assert bt["predictive"]["sigma_dof"] == 2 and "3e+06" in bt["predictive"]["sigma_source"]
    cov = bt["coverage"]
    assert cov["0.95"]["n"] == 6
    assert cov["0.95"]["inside"] == sum(e["inside95"] for e in bt["errors"])
    assert cov["0.80"]["inside"] == sum(e["inside80"] for e in bt["errors"])
    e = fit.meta["E_predictive"]["en-de"]
    assert e["lo95"] < e["lo80"] < e["estimate"] < e["hi80"] < e["hi95"]
    assert e["calibrated"] is False and e["sd_extrapolation"] == 0


def test_the_interval_is_fixed_before_the_held_out_size_is_read(fitted):
    """The held-out size's losses moved 3× (the backtest's errors recomputed so that the
    prediction is the same): every interval is the same, and no point is inside any more."""
    fit, pts = fitted
    bt = copy.deepcopy(fit.backtest["en-de"])
    held = pts["n"] == max(SIZES)
    moved = pts.assign(value=np.where(held, pts["value"] * 3.0, pts["value"]))
    for e in bt["errors"]:
        e["error"] = (1 + e["error"]) / 3.0 - 1.0
    backtest_intervals("en-de", bt, moved, NOISE, f_scale=fit.f_scale["en-de"])
    for old, new in zip(fit.backtest["en-de"]["errors"], bt["errors"], strict=True):
        for k in ("predicted", "lo80", "hi80", "lo95", "hi95"):
            assert new[k] == pytest.approx(old[k], rel=1e-9)
        assert not new["inside80"] and not new["inside95"]
    assert bt["coverage"]["0.95"]["inside"] == 0


def test_an_e_at_its_bound_gets_no_interval(fitted):
    fit, pts = fitted
    bound = copy.deepcopy(fit)
    bound.meta["E_is_bound"], bound.backtest = {"en-de": True}, None
    cooled_law_intervals(bound, pts.iloc[:0], {})  # no points needed: E is refused first
    assert "bound" in bound.meta["E_predictive"]["en-de"]["error"]


def test_uncalibrated_backtest_points_are_never_counted_in_its_coverage():
    """Four sizes: three below the held-out one, too few for the inner backtest, and two runs
    at the largest smaller size, too few to leave one out. Every point still gets its
    interval, marked ``calibrated`` False, and the coverage counts none of them (``left_out``
    says how many)."""
    pts = _points()
    pts = pts[pts["n"] > SIZES[0]]
    fit = fit_joint_chinchilla(pts, form="additive", noise_rel={"en-de": 0.01},
                               uncertainty=NO_UNCERTAINTY)
    cooled_law_intervals(fit, pts, {"en-de": NOISE})
    bt = fit.backtest["en-de"]
    assert not bt["predictive"]["calibrated"] and bt["predictive"]["calibration_n"] is None
    assert all(e["calibrated"] is False and "lo95" in e for e in bt["errors"])
    assert bt["coverage"]["0.95"]["n"] == 0 and bt["coverage"]["0.95"]["left_out"] == 6
    assert any("leaving one out needs ≥ 3" in n for n in bt["predictive"]["notes"])


def _three_weights(noise: float = 0.01, seed: int = 3) -> pd.DataFrame:
    """:func:`_points` at four sizes (three below the held-out one) with a third weight."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in SIZES[1:]:
        for w, k in ((0.3, 2.0), (0.5, 1.5), (1.0, 1.0)):
            for d in (2e6, 4e6, 8e6):
                loss = 1.2 + k * (40 * n ** -0.35 + 300 * d ** -0.4)
                rows.append({"pair": "en-de", "weight": w, "n": n, "tokens": d,
                             "value": loss * (1 + noise * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_three_smaller_sizes_are_calibrated_by_leaving_each_run_of_the_largest_out():
    """The calibration is the runs at the largest smaller size predicted without them, by the
    calibration rule (its width the calibration and seed terms only), on the runs as dof;
    moving the held-out size's losses changes no width."""
    pts = _three_weights()
    fit = fit_joint_chinchilla(pts, form="additive", noise_rel={"en-de": 0.01},
                               uncertainty=NO_UNCERTAINTY)
    bt = fit.backtest["en-de"]
    backtest_intervals("en-de", bt, pts, None, f_scale=fit.f_scale["en-de"])
    pv = bt["predictive"]
    assert pv["calibrated"] and pv["calibration"] == LEAVE_ONE_RUN_OUT
    assert (pv["calibration_n"], pv["calibration_points"], pv["rule"]) == (3, 9, "calibration")
    for p in pv["points"]:
        assert p["rule"] == "calibration" and p["dof"] == pytest.approx(3)
        assert p["sd_total"] == pytest.approx(p["sd_extrapolation"]) and p["sd_total"] > 0
    assert bt["coverage"]["0.95"]["n"] == len(bt["errors"]) == 9
    moved = copy.deepcopy(fit.backtest["en-de"])
    held = pts["n"] == max(SIZES)
    for e in moved["errors"]:
        e["error"] = (1 + e["error"]) / 3.0 - 1.0
    backtest_intervals("en-de", moved, pts.assign(value=np.where(held, pts["value"] * 3,
                                                                 pts["value"])),
                       None, f_scale=fit.f_scale["en-de"])
    for old, new in zip(bt["errors"], moved["errors"], strict=True):
        assert new["hi95"] == pytest.approx(old["hi95"], rel=1e-9)


def test_the_backtests_seed_noise_is_measured_below_the_size_it_judges():
    spread = {"groups": [
        {"pair": "en-de", "n": 1e7, "mean": 2.0, "sd": 0.2, "seeds": 3, "weight": 0.5},
        {"pair": "en-de", "n": 3e6, "mean": 2.0, "sd": 0.02, "seeds": 3, "weight": 0.5}]}
    top, n_top = largest_size_seed_noises(spread)
    below, n_below = largest_size_seed_noises(spread, below=1e7)
    assert n_top == 1e7 and top["en-de"].sigma == pytest.approx(0.1)
    assert n_below == 3e6 and below["en-de"].sigma == pytest.approx(0.01)
    assert largest_size_seed_noises(spread, below=3e6) == ({}, None)


def test_an_interval_refits_on_the_budgets_its_estimate_used(fitted):
    fit, pts = fitted
    chosen = copy.deepcopy(fit)
    chosen.meta["selection"] = {"en-de": {"budgets": 2}}
    kept = estimate_points(chosen, "en-de", pts)
    assert len(kept) == 2 * len(pts) // 3 and 2e6 not in set(kept["tokens"])  # the last two
    chosen.meta["selection"] = {}
    assert len(estimate_points(chosen, "en-de", pts)) == len(pts)
