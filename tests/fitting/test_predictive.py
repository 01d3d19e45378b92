"""fitting.intervals.predictive: predictive intervals whose coverage is measured."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fitting.core.base import FitError
from fitting.intervals.predictive import (
    UNINFORMATIVE_FACTOR,
    IntervalTerm,
    band_factor,
    clopper_pearson,
    coverage,
    coverage_by_cluster,
    coverage_of_marks,
    coverage_text,
    extrapolation_sd,
    informative,
    interval_dof,
    largest_size_step,
    predictive_interval,
    quantile,
    resampled_predictions,
    satterthwaite_dof,
    stratified_resamples,
)


def test_resampling_and_the_new_points_noise_together_cover_at_the_nominal_rate():
    """Known truth: m noisy measurements of μ (log-normal, sd s) estimate μ by their geometric
    mean, a bootstrap over them gives s_resample ≈ s/√m, and a new measurement has its own noise
    σ_seed = s. The interval covers the new measurement at ≈ 80 % / 95 % over 1,500 draws; with
    the resampling term alone (the fit's sensitivity, the old ±) it covers far less."""
    rng = np.random.default_rng(0)
    mu, s, m = 2.0, 0.03, 8
    records, narrow = [], []
    for _ in range(1500):
        y = mu * np.exp(rng.normal(0, s, m))
        est = float(np.exp(np.log(y).mean()))
        idx = rng.integers(0, m, size=(60, m))
        boot = np.exp(np.log(y)[idx].mean(axis=1))
        new = mu * math.exp(rng.normal(0, s))
        records.append((predictive_interval(est, resampled=boot, seed=IntervalTerm(sd=s)), new))
        narrow.append((predictive_interval(est, resampled=boot), new))
    cov = coverage(records)
    assert cov["0.80"]["fraction"] == pytest.approx(0.80, abs=0.04)
    assert cov["0.95"]["fraction"] == pytest.approx(0.95, abs=0.025)
    assert coverage(narrow)["0.95"]["fraction"] < 0.6


def test_components_add_in_quadrature_in_log_space():
    iv = predictive_interval(1.0, form_estimates=[math.exp(0.03), math.exp(-0.03)],
                             calibration=IntervalTerm(sd=0.04), seed=IntervalTerm(sd=0.0))
    assert iv.sd_forms == pytest.approx(0.03) and iv.sd_total == pytest.approx(0.05)
    assert iv.hi95 == pytest.approx(math.exp(1.959964 * 0.05), rel=1e-5)
    assert iv.lo80 == pytest.approx(math.exp(-1.281552 * 0.05), rel=1e-5)
    assert iv.contains(1.05, 0.80) and not iv.contains(1.07, 0.80) and iv.contains(1.09, 0.95)
    with pytest.raises(FitError, match="positive finite"):
        predictive_interval(0.0)


def test_the_calibration_rule_keeps_the_calibration_and_seed_and_uses_t_quantiles():
    iv = predictive_interval(1.0, resampled=[0.9, 1.1], form_estimates=[1.2], rule="calibration",
                             calibration=IntervalTerm(sd=0.04, dof=5), seed=IntervalTerm(sd=0.03))
    assert iv.sd_total == pytest.approx(0.05) and iv.rule == "calibration"
    assert iv.sd_resample > 0.1 and iv.sd_forms == pytest.approx(math.log(1.2))  # reported
    dof = 0.05 ** 4 / (0.04 ** 4 / 5)               # the seed sd counted as known
    assert iv.dof == pytest.approx(dof)
    assert iv.hi80 == pytest.approx(math.exp(stats.t.ppf(0.9, dof) * 0.05))
    normal = predictive_interval(1.0, rule="calibration", calibration=IntervalTerm(sd=0.04))
    assert normal.dof is None and normal.hi95 == pytest.approx(math.exp(1.959964 * 0.04))
    # no calibration: back to the sum of every term
    fallback = predictive_interval(1.0, form_estimates=[math.exp(0.03)], rule="calibration",
                                   calibration=IntervalTerm(sd=0.0, dof=3),
                                   seed=IntervalTerm(sd=0.04))
    assert fallback.rule == "sum" and fallback.sd_total == pytest.approx(0.05)
    with pytest.raises(ValueError, match="rule"):
        predictive_interval(1.0, rule="envelope")


def test_a_calibration_from_few_errors_covers_at_the_nominal_rate_only_with_t_quantiles():
    """Known truth: errors ~ N(0, τ); the calibration is the RMS of 4 of them. A new error falls
    inside the t interval (4 dof) at ≈ the nominal rate; normal quantiles cover too rarely."""
    rng = np.random.default_rng(1)
    hits_t, hits_z = {0.80: 0, 0.95: 0}, {0.80: 0, 0.95: 0}
    trials = 4000
    for _ in range(trials):
        rms = float(np.sqrt(np.mean(rng.normal(0, 0.1, 4) ** 2)))
        truth = math.exp(rng.normal(0, 0.1))
        t_iv = predictive_interval(1.0, rule="calibration",
                                   calibration=IntervalTerm(sd=rms, dof=4))
        z_iv = predictive_interval(1.0, rule="calibration", calibration=IntervalTerm(sd=rms))
        for q in hits_t:
            hits_t[q] += t_iv.contains(truth, q)
            hits_z[q] += z_iv.contains(truth, q)
    assert hits_t[0.80] / trials == pytest.approx(0.80, abs=0.02)
    assert hits_t[0.95] / trials == pytest.approx(0.95, abs=0.012)
    assert hits_z[0.95] / trials < 0.925


def test_satterthwaite_dof_of_known_sums():
    assert satterthwaite_dof([(0.1, 7)]) == pytest.approx(7)
    assert satterthwaite_dof([(0.1, 4), (0.1, 4)]) == pytest.approx(8)
    assert satterthwaite_dof([(0.1, 4), (0.1, math.inf)]) == pytest.approx(16)
    assert satterthwaite_dof([(0.1, math.inf)]) == math.inf
    assert satterthwaite_dof([(0.0, 3), (float("nan"), 2)]) == math.inf


def test_extrapolation_term_grows_with_log_distance_and_never_below_one_step():
    assert extrapolation_sd(0.02, math.log(2), math.log(8)) == pytest.approx(0.06)
    assert extrapolation_sd(0.02, math.log(2), math.log(1.2)) == pytest.approx(0.02)
    assert math.isnan(extrapolation_sd(float("nan"), 1.0, 1.0))


def test_largest_size_step_is_the_last_step_of_the_distinct_sizes():
    n_max, step = largest_size_step([1e5, 4e5, 1e5, 2e5, 4e5])
    assert n_max == 4e5 and step == pytest.approx(math.log(2))
    assert math.isnan(largest_size_step([3e5, 3e5])[1])
    assert all(math.isnan(v) for v in largest_size_step([]))


def test_resamples_keep_every_stratum_and_failed_refits_are_counted_not_replaced():
    strata = ["a"] * 3 + ["b"] * 2 + ["c"]
    for idx in stratified_resamples(strata, 20, seed=1):
        assert len(idx) == 6 and sorted({strata[i] for i in idx}) == ["a", "b", "c"]
        assert sum(strata[i] == "b" for i in idx) == 2

    def refit(idx):
        if 5 not in idx:
            raise FitError("too few points")
        return [float(len(set(idx.tolist())))]
    preds, failed = resampled_predictions(refit, [np.array([0, 5]), np.array([0, 1]),
                                                  np.array([5, 5])])
    assert failed == 1 and preds[:, 0].tolist() == [2.0, 1.0]


def test_coverage_counts_and_bounds_the_fraction():
    iv = predictive_interval(1.0, calibration=IntervalTerm(sd=0.1))
    cov = coverage([(iv, 1.0), (iv, 1.15), (iv, 1.5), (iv, float("nan"))])
    assert cov["0.80"]["n"] == 3 and cov["0.80"]["inside"] == 1   # 1.15 > exp(0.128)
    assert cov["0.95"]["inside"] == 2
    lo, hi = cov["0.95"]["ci90"]
    assert 0 < lo < 2 / 3 < hi < 1
    assert coverage([])["0.80"]["fraction"] is None


def test_a_seed_sd_from_three_seeds_enters_on_its_own_dof_and_covers_at_the_nominal_rate():
    """Known truth: an exact law ŷ; a new measurement y = ŷ·exp(N(0, σ)); σ_seed estimated from 3
    seeds (2 dof). On 2 dof the interval covers y at the nominal rate (log(y/ŷ)/s ~ t₂) over
    4,000 draws — the observed fraction's Clopper–Pearson band holds the nominal level; counted
    as known (normal quantiles) the 95 % interval covers too rarely."""
    rng = np.random.default_rng(3)
    trials, sigma = 4000, 0.02
    s = sigma * np.sqrt(rng.chisquare(2, trials) / 2)         # the 3 seeds' sd
    y = np.exp(rng.normal(0, sigma, trials))
    marks = {q: [] for q in (0.80, 0.95)}
    known = []
    for sd, new in zip(s, y, strict=True):
        iv = predictive_interval(1.0, seed=IntervalTerm(sd=float(sd), dof=2))
        for q in marks:
            marks[q].append(iv.contains(float(new), q))
        known.append(predictive_interval(1.0, seed=IntervalTerm(sd=float(sd))).contains(float(new), 0.95))
    cov = coverage_of_marks(marks)
    for q in (0.80, 0.95):
        lo, hi = cov[f"{q:.2f}"]["ci90"]
        assert lo <= q <= hi
    assert np.mean(known) < 0.90
    iv = predictive_interval(1.0, seed=IntervalTerm(sd=0.02, dof=2))
    assert iv.dof == pytest.approx(2) and iv.seed_dof == 2 and not iv.calibrated


def test_every_term_enters_the_satterthwaite_sum_on_its_own_dof():
    iv = predictive_interval(1.0, resampled=[0.97, 1.03], calibration=IntervalTerm(sd=0.04, dof=4),
                             seed=IntervalTerm(sd=0.03, dof=2))
    parts = [(iv.sd_resample, math.inf), (0.04, 4), (0.03, 2)]
    assert iv.rule == "sum" and iv.dof == pytest.approx(satterthwaite_dof(parts))
    assert iv.calibrated and iv.calibration_n == 4
    assert iv.hi95 == pytest.approx(math.exp(stats.t.ppf(0.975, iv.dof) * iv.sd_total))
    cal = predictive_interval(1.0, rule="calibration", calibration=IntervalTerm(sd=0.04, dof=4),
                              seed=IntervalTerm(sd=0.03, dof=2))
    assert cal.dof == pytest.approx(satterthwaite_dof([(0.04, 4), (0.03, 2)]))
    assert interval_dof([0.1]) is None and quantile(0.95, None) == pytest.approx(1.959964)


def test_clopper_pearson_is_exact_at_the_ends_and_refuses_impossible_counts():
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0
    lo, hi = clopper_pearson(8, 10)
    assert stats.binom.sf(7, 10, lo) == pytest.approx(0.05)   # P(X ≥ 8 | lo) = 5 %
    assert stats.binom.cdf(8, 10, hi) == pytest.approx(0.05)  # P(X ≤ 8 | hi) = 5 %
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def test_coverage_by_cluster_is_as_wide_as_its_clusters_allow():
    """Three clusters of ten points: the points' interval assumes 30 independent draws; the
    clusters' counts each cluster once, so it is wider, and both hold the pooled fraction."""
    marks = {q: {c: [True] * 8 + [False] * 2 for c in "abc"} for q in (0.80, 0.95)}
    cov = coverage_by_cluster(marks)["0.80"]
    assert (cov["inside"], cov["n"], cov["clusters"]) == (24, 30, 3)
    lo, hi = cov["ci90"]
    clo, chi = cov["ci90_clusters"]
    assert clo < lo < 0.8 < hi < chi
    assert coverage_text(coverage_by_cluster(marks), 0.80).startswith("24/30 (90 % CI")
    assert coverage_text(None, 0.95) == "–"


def test_a_band_wider_than_the_stated_factor_is_uninformative():
    narrow = predictive_interval(1.0, calibration=IntervalTerm(sd=0.05))
    wide = predictive_interval(1.0, calibration=IntervalTerm(sd=0.31))   # ×0.54 to ×1.84: spans ×3.4
    assert band_factor(narrow) == pytest.approx(math.exp(2 * 1.959964 * 0.05), rel=1e-5)
    assert informative(narrow) and informative(narrow.to_dict())
    assert not informative(wide) and band_factor(wide) > UNINFORMATIVE_FACTOR
