"""Predictive intervals of a mixture's objective J (fitting.intervals.mixture) and the
verification's check of them: the held-out calibration from known errors, the runs it may and
may not use, the forms' spread, and coverage at about the nominal rate on simulated studies."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from fitting.intervals.mixture import (
    cv_form_weights,
    heldout_mixture_intervals,
    heldout_objective_error,
    objective_interval,
    objective_noise_floor,
    objective_samples,
)
from fitting.report.sections.verification import (
    RECOMMENDED,
    predictive_checks,
    verification_payload,
)

PAIRS = ["a", "b", "c"]
PI = {"a": 0.5, "b": 0.5, "c": 0.0}


class _Law:
    """L_i = scale · (1 + w_i); ``boot`` refits scale it by each factor; predicts everywhere."""

    pairs = PAIRS

    def __init__(self, scale: float = 1.0, boot=()):
        self.scale, self.boot = scale, list(boot)

    def _at(self, W, f):
        return self.scale * f * (1.0 + np.asarray(W, float))

    def predict(self, n, W):
        return self._at(W, 1.0)

    def predict_samples(self, n, W):
        return np.stack([self._at(W, f) for f in self.boot])

    def can_predict(self, n):
        return True


def _heldout_run(w, error_log, n=1e5):
    """A held-out entry set whose J measured is J predicted · exp(−error_log)."""
    law = _Law()
    pred = law.predict(None, np.array([w]))[0]
    return {p: {"measured": float(pred[i] * math.exp(-error_log)), "weight": float(w[i]),
                "n": n, "predicted": float(pred[i])} for i, p in enumerate(PAIRS)}


def test_objective_is_the_preference_weighted_mean_of_trained_pairs():
    j, samples = objective_samples(_Law(boot=[0.9, 1.1]), 1e5, np.array([[0.2, 0.3, 0.5]]),
                                   np.array([1.0, 3.0, 0.0]))
    assert j[0] == pytest.approx(0.25 * 1.2 + 0.75 * 1.3)
    assert samples[:, 0] == pytest.approx([0.9 * j[0], 1.1 * j[0]])
    # a pair with π > 0 at weight 0 is zero-shot: no J
    j0, _ = objective_samples(_Law(), 1e5, np.array([[0.0, 0.5, 0.5]]), np.array([1.0, 1, 0]))
    assert math.isnan(j0[0])


def test_heldout_error_is_the_rms_log_error_of_the_runs_it_may_use():
    held = {"h1": _heldout_run([0.2, 0.3, 0.5], 0.10),
            "h2": _heldout_run([0.5, 0.4, 0.1], -0.20),
            "big": _heldout_run([0.3, 0.3, 0.4], 0.90, n=1e6),      # above the N predicted
            "zero": _heldout_run([0.0, 0.6, 0.4], 0.90)}             # a π pair zero-shot
    cal = heldout_objective_error(_Law(), held, PI, max_n=1e5)
    assert cal["runs"] == 2 and set(cal["errors"]) == {"h1", "h2"}
    assert cal["rms_log"] == pytest.approx(math.sqrt((0.1 ** 2 + 0.2 ** 2) / 2))
    assert cal["errors"]["h2"] == pytest.approx(-0.20)
    one = heldout_objective_error(_Law(), {"h1": held["h1"]}, PI, max_n=1e5)
    assert one["runs"] == 1 and math.isnan(one["rms_log"])
    wider = heldout_objective_error(_Law(), held, PI, max_n=1e6)
    assert wider["runs"] == 3


def test_a_calibrated_interval_is_the_calibration_alone_with_t_quantiles():
    """The held-out errors are errors of refits, so the refits' and forms' spread is reported
    but not added again; 4 calibration runs give t quantiles with 4 dof. Without a calibration
    the interval falls back to refits + forms."""
    law = _Law(boot=[0.95, 1.05])
    other = _Law(scale=1.1)
    iv = objective_interval(law, {"chosen": law, "other": other}, 1e5,
                            {"a": 0.4, "b": 0.6, "c": 0.0}, PI, {"rms_log": 0.05, "runs": 4})
    assert iv.estimate == pytest.approx(0.5 * 1.4 + 0.5 * 1.6)
    assert iv.sd_forms == pytest.approx(math.log(1.1))
    assert iv.sd_resample == pytest.approx(np.std(np.log([0.95, 1.05]), ddof=1))
    assert iv.rule == "calibration" and iv.dof == pytest.approx(4)
    assert iv.sd_total == pytest.approx(0.05)
    assert iv.hi95 == pytest.approx(iv.estimate * math.exp(2.776445 * 0.05), rel=1e-6)
    bare = objective_interval(law, {"chosen": law, "other": other}, 1e5,
                              {"a": 0.4, "b": 0.6}, PI, {"rms_log": math.nan, "runs": 1})
    assert bare.rule == "sum" and bare.dof is None
    assert bare.sd_total == pytest.approx(math.hypot(iv.sd_resample, math.log(1.1)))


def test_calibrated_intervals_cover_new_mixtures_at_about_the_nominal_rate():
    """Simulated studies: the law errs on every mixture by a log error ~ N(0, τ); the interval
    calibrated on 12 held-out mixtures covers a new mixture's J about as often as it claims,
    and the uncalibrated one (refits only) far less."""
    rng = np.random.default_rng(0)
    law = _Law(boot=[0.99, 1.01])
    w = {"a": 0.4, "b": 0.6, "c": 0.0}
    hits = {0.80: 0, 0.95: 0}
    bare_hits = 0
    trials = 400
    for _ in range(trials):
        errs = rng.normal(0.0, 0.08, size=12)
        held = {f"h{k}": _heldout_run([0.3, 0.5, 0.2], e) for k, e in enumerate(errs)}
        cal = heldout_objective_error(law, held, PI, max_n=1e5)
        iv = objective_interval(law, {}, 1e5, w, PI, cal)
        truth = iv.estimate * math.exp(-rng.normal(0.0, 0.08))
        for q in hits:
            hits[q] += iv.contains(truth, q)
        bare = objective_interval(law, {}, 1e5, w, PI, {"rms_log": math.nan})
        bare_hits += bare.contains(truth, 0.95)
    assert 0.74 <= hits[0.80] / trials <= 0.86
    assert 0.90 <= hits[0.95] / trials <= 0.98
    assert bare_hits / trials < 0.3


def test_predictive_checks_mark_each_mixture_and_count_coverage():
    law = _Law(boot=[0.99, 1.01])
    plan = {"size": "s", "seeds": [1, 2],
            "mixtures": {RECOMMENDED: {"a": 0.5, "b": 0.5, "c": 0.0},
                         "uniform": {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}},
            "runs": {f"m_{m}_s{s}": m for m in (RECOMMENDED, "uniform") for s in (1, 2)}}
    rec = {"weights": plan["mixtures"][RECOMMENDED], "law": "x", "target_size": 1e5,
           "constraints": {"preferences": PI, "max_loss": {}}}
    cal = {"rms_log": 0.02, "runs": 3, "errors": {}}
    intervals = {m: objective_interval(law, {}, 1e5, plan["mixtures"][m], PI, cal)
                 for m in plan["mixtures"]}
    # the recommendation lands on its prediction; uniform 20 % above: far outside ±2 %
    j = {m: iv.estimate for m, iv in intervals.items()}
    measured = {m: {f"m_{m}_s{s}": {"a": j[m] * (1.2 if m == "uniform" else 1.0),
                                    "b": j[m] * (1.2 if m == "uniform" else 1.0), "c": 9.0}
                    for s in (1, 2)} for m in plan["mixtures"]}
    payload = verification_payload(plan, rec, measured)
    out = predictive_checks(payload, intervals, cal)
    assert out["inside"][RECOMMENDED] == {"0.80": True, "0.95": True}
    assert out["inside"]["uniform"] == {"0.80": False, "0.95": False}
    assert out["coverage"]["0.95"]["inside"] == 1 and out["coverage"]["0.95"]["n"] == 2
    assert payload["mixtures"]["uniform"]["inside95"] is False and out["calibrated"]


def test_the_noise_floor_is_t_times_the_pooled_seed_sd_of_log_j():
    """Seed noise alone in every held-out error: t_{0.975, calibration runs} times the seed sd
    of log J pooled over mixtures; a non-finite J (a diverged seed) is left out, a mixture of
    one seed adds nothing, and without a calibration there is no floor."""
    a, b = [0.30, 0.31, 0.29, float("nan")], [0.50, 0.52]
    floor = objective_noise_floor([a, b, [0.4]], 6)
    # pooled variance: each mixture's sample variance weighted by its dof (2 and 1)
    sigma = math.sqrt((2 * statistics.variance(np.log(a[:3])) + statistics.variance(np.log(b)))
                      / 3)
    assert floor["dof"] == 3 and floor["sigma_log"] == pytest.approx(sigma)
    assert floor["half_width"] == pytest.approx(2.446912 * sigma, rel=1e-6)  # t_{0.975, 6}
    assert objective_noise_floor([a, b], 1) is None  # one held-out run: no calibration
    assert objective_noise_floor([[0.4], [0.5]], 6) is None  # no repeated seed


def test_predictive_checks_give_the_floor_from_the_mixtures_seeds_without_diverged_runs():
    law = _Law(boot=[0.99, 1.01])
    mixes = {RECOMMENDED: {"a": 0.5, "b": 0.5, "c": 0.0}, "uniform": {"a": 0.4, "b": 0.4,
                                                                         "c": 0.2}}
    plan = {"size": "s", "seeds": [1, 2, 3], "mixtures": mixes,
            "runs": {f"m_{m}_s{s}": m for m in mixes for s in (1, 2, 3)}}
    rec = {"weights": mixes[RECOMMENDED], "law": "x", "target_size": 1e5,
           "constraints": {"preferences": PI, "max_loss": {}}}
    cal = {"rms_log": 0.05, "runs": 4, "errors": {}}
    intervals = {m: objective_interval(law, {}, 1e5, mixes[m], PI, cal) for m in mixes}
    # seed 3: a and b finite (J finite), c lost: uniform trains c, so that run diverged and is
    # out of the floor; the recommendation holds c at weight 0, so its seed 3 counts
    factor = {1: 1.0, 2: 1.03, 3: 1.5}
    measured = {m: {f"m_{m}_s{s}": {"a": factor[s], "b": factor[s],
                                    "c": float("nan") if s == 3 else 9.0} for s in (1, 2, 3)}
                for m in mixes}
    payload = verification_payload(plan, rec, measured)
    assert payload["mixtures"]["uniform"]["diverged"] == ["m_uniform_s3"]
    assert math.isfinite(payload["mixtures"]["uniform"]["measured"]["per_seed"]["m_uniform_s3"])
    floor = predictive_checks(payload, intervals, cal)["noise_floor"]
    rec_logs, uni_logs = np.log([1.0, 1.03, 1.5]), np.log([1.0, 1.03])
    sigma = math.sqrt((2 * statistics.variance(rec_logs) + statistics.variance(uni_logs)) / 3)
    assert floor["dof"] == 3 and floor["sigma_log"] == pytest.approx(sigma)
    assert floor["half_width"] == pytest.approx(2.776445 * sigma, rel=1e-6)  # t_{0.975, 4}


class _SizedLaw(_Law):
    """_Law with the size-aware predict signature of MixtureLawFit (n, W, d)."""

    def predict(self, n, W, d=None):
        return self._at(W, 1.0)

    def predict_samples(self, n, W, d=None):
        return np.stack([self._at(W, f) for f in self.boot])


def _comparison(size_backtest=None):
    """A comparison whose chosen law's CV errors are known: pair a off by exp(±0.1), b by
    exp(±0.2); two held-out runs, at a fitted size and 4× above the largest."""
    from types import SimpleNamespace
    law = _SizedLaw(boot=[0.98, 1.02])
    y = np.ones((4, 3))
    cv = np.column_stack([np.exp([0.1, -0.1, 0.1, -0.1]), np.exp([0.2, -0.2, 0.2, -0.2]),
                          np.full(4, np.nan)])
    runs = SimpleNamespace(pairs=PAIRS, run_ids=np.array(["d1", "d2", "h_small", "h_big"]),
                           n=np.array([1e5, 2e5, 2e5, 8e5]),
                           W=np.array([[0.3, 0.3, 0.4]] * 3 + [[0.2, 0.5, 0.3]]),
                           heldout=np.array([False, False, True, True]), tokens=None)
    pred = law.predict(None, runs.W)
    heldout = {rid: {p: {"predicted": float(pred[r, i]), "measured": float(pred[r, i]),
                         "noise": 0.05 * float(pred[r, i]), "noise_source": src}
                     for i, p in enumerate(PAIRS[:2])}
               for r, rid, src in ((2, "h_small", "pooled seed sd"),
                                   (3, "h_big", "last 3 evaluations"))}
    return SimpleNamespace(laws={"chosen": law, "other": _SizedLaw(scale=1.05),
                                 "poor": _SizedLaw(scale=3.0)},
                           errors={"chosen": {"cv_mae": 0.1}, "other": {"cv_mae": 0.1},
                                   "poor": {"cv_mae": 1.0}},
                           chosen="chosen", runs=runs, cv_predictions={"chosen": cv},
                           cv_targets=y, heldout=heldout, size_backtest=size_backtest)


def test_heldout_mixture_intervals_use_the_cv_error_and_the_size_backtest_beyond():
    cmp = _comparison({"errors": {"a": [0.1, -0.1], "b": [0.1]}, "sizes": [1e5],
                       "held_out_n": 2e5})
    ivs = heldout_mixture_intervals(cmp)
    small_a, cal_a = ivs["h_small"]["a"]
    assert cal_a and small_a.sd_extrapolation == pytest.approx(0.1)   # the CV error alone
    assert small_a.rule == "calibration"
    assert small_a.sd_total == pytest.approx(math.hypot(0.1, 0.05))
    # 4 CV points; the seed sd counted as known (Welch–Satterthwaite)
    assert small_a.dof == pytest.approx((0.1 ** 2 + 0.05 ** 2) ** 2 / (0.1 ** 4 / 4))
    assert ivs["h_small"]["b"][0].sd_extrapolation == pytest.approx(0.2)
    # the poor form (CV error 10× the chosen's) enters with weight 1/100
    assert small_a.sd_forms == pytest.approx(math.sqrt(
        (math.log(1.05) ** 2 + 0.01 * math.log(3.0) ** 2) / 1.01))
    assert small_a.sigma_seed == pytest.approx(0.05)                  # a pooled seed sd
    big_a, cal_big = ivs["h_big"]["a"]
    step = math.sqrt(np.mean(np.log1p([0.1, -0.1, 0.1]) ** 2))        # one step: ×2 in N
    grown = step * math.log(4) / math.log(2)                           # 4× above the largest
    assert cal_big and big_a.sd_extrapolation == pytest.approx(math.hypot(0.1, grown))
    # Welch–Satterthwaite over the CV error (4 points) and the size term (3 errors)
    assert big_a.dof == pytest.approx((0.1 ** 2 + grown ** 2) ** 2
                                      / (0.1 ** 4 / 4 + grown ** 4 / 3))
    assert big_a.sigma_seed == 0.0                                    # not a seed noise
    assert "c" not in ivs["h_small"]                                  # no entry, no interval


def test_above_the_fitted_sizes_without_a_size_backtest_the_interval_says_uncalibrated():
    ivs = heldout_mixture_intervals(_comparison({"why": "2 fitted model size(s)"}))
    assert ivs["h_small"]["a"][1] and not ivs["h_big"]["a"][1]
    assert ivs["h_big"]["a"][0].sd_extrapolation == pytest.approx(0.1)


def test_cv_form_weights_follow_the_inverse_cv_mse_relative_to_the_law_used():
    w = cv_form_weights({"a": 0.05, "b": 0.10, "c": None, "d": 0.05}, "a")
    assert w == {"b": pytest.approx(0.25), "c": 0.0, "d": pytest.approx(1.0)}
    assert cv_form_weights({"a": None, "b": 0.1}, "a") == {"b": 1.0}   # nothing to compare
    law = _Law()
    iv = objective_interval(law, {"a": law, "b": _Law(scale=2.0), "c": _Law(scale=9.0)}, 1e5,
                            {"a": 0.5, "b": 0.5}, PI, {"rms_log": math.nan},
                            {"b": 0.25, "c": 0.0})
    assert iv.sd_forms == pytest.approx(math.log(2.0))   # c left out, b alone
