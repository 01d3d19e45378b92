"""Predictive intervals of a mixture's objective J(w) = Σ_i π_i L_i(N, w) / Σ_i π_i.

The recommendation and every mixture the verification trains are predicted by a mixture law;
its bootstrap band is its sensitivity to the runs it was fitted on, not how far a trained
mixture may land. The interval here is :func:`fitting.intervals.predictive.predictive_interval`
of J in log space under its calibration rule, s² = s_heldout² (the held-out mixtures' RMS log
error, :func:`heldout_objective_error`; s_resample and s_forms, the latter weighted by
:func:`cv_form_weights`, reported and not added), falling back to s_resample² + s_forms² without
a calibration (fewer than :data:`MIN_HELDOUT` runs). Held-out mixtures get one per pair
(:func:`heldout_mixture_intervals`: the chosen law's CV error, :func:`cv_log_error`, and above
the fitted sizes the size backtest, :func:`size_step_error`). The terms, their dof and what the
interval cannot hold: docs/reference/laws.md, "Predictive intervals and their coverage".
Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from fitting.intervals.predictive import (
    IntervalTerm,
    PredictiveInterval,
    extrapolation_sd,
    largest_size_step,
    predictive_interval,
    quantile,
    satterthwaite_dof,
)

__all__ = ["objective_samples", "heldout_objective_error", "objective_interval", "cv_log_error",
           "cv_form_weights", "objective_noise_floor",
           "size_step_error", "heldout_mixture_intervals"]

#: fewer held-out mixtures than this give no calibration term (an RMS of one error is no spread)
MIN_HELDOUT = 2


def cv_form_weights(cv_mae: Mapping[str, float | None], used: str) -> dict[str, float]:
    """{form: (CV MAE of ``used`` / CV MAE of the form)²} over the forms of ``cv_mae`` other
    than ``used`` (:func:`fitting.laws.mixture.compare.compare_mixture_laws`' ``cv_mae``,
    fixed by the fitted runs); 0 for a form without a finite positive CV error, and every
    weight 1 where ``used`` has none (nothing to compare against)."""
    ref = cv_mae.get(used)
    ok = ref is not None and math.isfinite(float(ref)) and float(ref) > 0
    out = {}
    for form, mae in cv_mae.items():
        if form == used:
            continue
        good = mae is not None and math.isfinite(float(mae)) and float(mae) > 0
        out[form] = 1.0 if not ok else (float(ref) / float(mae)) ** 2 if good else 0.0
    return out


def objective_samples(law, n: float, W: np.ndarray, pi: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray | None]:
    """(J of each weight row of ``W`` at size ``n``, J on every bootstrap refit (refits, rows)
    or None without refits). J = Σ π_i L_i over the pairs with π_i > 0, π normalised; a row
    holding such a pair at weight 0 (a zero-shot loss, outside every mixture law's domain) is
    NaN."""
    W = np.atleast_2d(np.asarray(W, dtype=float))
    pi = np.asarray(pi, dtype=float)
    used = pi > 0
    weights = pi[used] / pi[used].sum()
    N = np.full(len(W), float(n))
    pred = np.where(W > 0, law.predict(N, W), np.nan)
    samples = None
    if getattr(law, "boot", None):
        samples = np.where(W > 0, law.predict_samples(N, W), np.nan)[..., used] @ weights
    return pred[:, used] @ weights, samples


def heldout_objective_error(law, heldout: Mapping[str, Mapping[str, Mapping]] | None,
                            pi: Mapping[str, float], *, max_n: float) -> dict:
    """The calibration term: root mean square of log(J_predicted / J_measured) over the held-out
    runs (``fits.json["mixture"]["heldout"]``: {run: {pair: {measured, weight, n, ...}}}) at
    N ≤ ``max_n`` (relative tolerance 1e-6) whose every pair with π_i > 0 was measured and
    trained, predicted by ``law``. Returns {rms_log, runs, errors {run: log error}}; rms_log NaN
    with fewer than :data:`MIN_HELDOUT` runs."""
    pairs = list(law.pairs or [])
    piv = np.array([float(pi.get(p, 0.0)) for p in pairs])
    errors = {}
    for rid, entries in (heldout or {}).items():
        ns = {float(e["n"]) for e in entries.values()}
        if len(ns) != 1 or next(iter(ns)) > max_n * (1 + 1e-6):
            continue
        if any(piv[i] > 0 and p not in entries for i, p in enumerate(pairs)):
            continue
        w = np.array([float(entries[p]["weight"]) if p in entries else 0.0 for p in pairs])
        measured = np.array([float(entries[p]["measured"]) if p in entries else np.nan
                             for p in pairs])
        j_pred, _ = objective_samples(law, next(iter(ns)), w[None, :], piv)
        used = piv > 0
        j_meas = float(measured[used] @ (piv[used] / piv[used].sum()))
        if math.isfinite(j_pred[0]) and j_pred[0] > 0 and math.isfinite(j_meas) and j_meas > 0:
            errors[rid] = float(np.log(j_pred[0] / j_meas))
    vals = np.array(list(errors.values()))
    rms = float(np.sqrt(np.mean(vals ** 2))) if len(vals) >= MIN_HELDOUT else float("nan")
    return {"rms_log": rms, "runs": len(vals), "errors": errors}


def objective_noise_floor(per_seed: Iterable[Sequence[float]], calibration_runs: float | None
                          ) -> dict | None:
    """The half-width of log J's 95 % interval that a mixture law without error would still
    have under the calibration rule: each held-out error is one run's, so it holds one seed's
    noise of log J. ``per_seed``: the measured J of each seed, per mixture trained with several
    (the verification's; a value that is not finite and positive is left out); σ is their seed
    sd of log J pooled over the mixtures (dof Σ (n − 1)).
    Returns {sigma_log, dof, half_width = t_{0.975, calibration_runs} · σ}; None with no
    repeated seed or no calibration (fewer than :data:`MIN_HELDOUT` runs)."""
    values = (np.asarray(list(j), float) for j in per_seed)
    logs = [np.log(v) for v in (v[np.isfinite(v) & (v > 0)] for v in values) if len(v) > 1]
    dof = sum(len(v) - 1 for v in logs)
    if not dof or not calibration_runs or calibration_runs < MIN_HELDOUT:
        return None
    sigma = math.sqrt(sum(float(np.sum((v - v.mean()) ** 2)) for v in logs) / dof)
    return {"sigma_log": sigma, "dof": dof,
            "half_width": quantile(0.95, calibration_runs) * sigma}


def objective_interval(law, other_laws: Mapping[str, object], n: float,
                       weights: Mapping[str, float], pi: Mapping[str, float],
                       calibration: Mapping, form_weights: Mapping[str, float] | None = None
                       ) -> PredictiveInterval | None:
    """The predictive interval of J at size ``n`` for ``weights`` (the module docstring):
    ``law`` predicts, ``other_laws`` (forms by name; ``law`` itself among them is skipped) give
    s_forms where they can predict at ``n``, weighted by ``form_weights`` (:func:`cv_form_weights`;
    None: equal), ``calibration`` is :func:`heldout_objective_error`'s result (NaN rms: no
    calibration term). None when ``law`` predicts no positive finite J there."""
    pairs = list(law.pairs or [])
    W = np.array([[float(weights.get(p, 0.0)) for p in pairs]])
    piv = np.array([float(pi.get(p, 0.0)) for p in pairs])
    j, samples = objective_samples(law, n, W, piv)
    if not (math.isfinite(j[0]) and j[0] > 0):
        return None
    others = {name: other for name, other in other_laws.items()
              if other is not law and other.can_predict(n) and list(other.pairs or []) == pairs}
    forms = [float(objective_samples(other, n, W, piv)[0][0]) for other in others.values()]
    resampled = [] if samples is None else samples[:, 0]
    failed = 0 if samples is None else int(np.sum(~np.isfinite(samples[:, 0])))
    rms = float(calibration.get("rms_log", float("nan")))
    return predictive_interval(float(j[0]), resampled=resampled, form_estimates=forms,
                               form_weights=None if form_weights is None else
                               [form_weights.get(name, 0.0) for name in others],
                               n_failed=failed, rule="calibration",
                               calibration=IntervalTerm(rms if math.isfinite(rms) else 0.0,
                                                        calibration.get("runs")))


def cv_log_error(cmp) -> dict[str, dict[str, float]]:
    """The calibration term of a held-out mixture's loss, per pair: {pair: {rms_log, points}},
    the root mean square of log(CV prediction / target) of the chosen law over the design
    mixtures (``cmp.cv_predictions[cmp.chosen]`` against ``cmp.cv_targets``: each mixture
    predicted by a refit without it, :func:`fitting.laws.mixture.compare.compare_mixture_laws`)
    and how many CV points it averaged — fixed by the fitted runs before any held-out run is
    read. rms_log NaN for a pair with fewer than :data:`MIN_HELDOUT` CV points."""
    pred = np.asarray(cmp.cv_predictions.get(cmp.chosen, np.empty((0, 0))), dtype=float)
    y = np.asarray(cmp.cv_targets if cmp.cv_targets is not None else np.empty((0, 0)), float)
    out = {}
    for i, pair in enumerate(cmp.runs.pairs):
        if pred.size == 0:
            out[pair] = {"rms_log": float("nan"), "points": 0}
            continue
        ok = np.isfinite(pred[:, i]) & np.isfinite(y[:, i]) & (pred[:, i] > 0) & (y[:, i] > 0)
        e = np.log(pred[ok, i] / y[ok, i])
        out[pair] = {"rms_log": float(np.sqrt(np.mean(e ** 2))) if len(e) >= MIN_HELDOUT
                     else float("nan"), "points": int(len(e))}
    return out


def size_step_error(cmp) -> tuple[float, float, int]:
    """(RMS log error of the chosen law's leave-largest-size-out backtest over every pair, the
    step it extrapolated in log N, how many errors it averaged); (NaN, NaN, 0) where the study
    has no such backtest."""
    bt = cmp.size_backtest or {}
    errs = [e for v in (bt.get("errors") or {}).values() for e in v if e > -1]
    if not errs or not bt.get("sizes"):
        return float("nan"), float("nan"), 0
    logs = np.log1p(np.asarray(errs, dtype=float))
    step = largest_size_step([*bt["sizes"], bt["held_out_n"]])[1]
    return float(np.sqrt(np.mean(logs ** 2))), step, int(len(logs))


def heldout_mixture_intervals(cmp, heldout: Mapping[str, Mapping[str, Mapping]] | None = None
                              ) -> dict[str, dict[str, tuple[PredictiveInterval, bool]]]:
    """{run: {pair: (interval, calibrated)}} for the held-out mixtures the chosen law predicts
    (``heldout``, default ``cmp.heldout``; the report passes its entries with the pooled seed
    noise), under the ``"calibration"`` rule (the module docstring): s_resample from its
    bootstrap refits at the run and s_forms from the other forms' predictions (reported; they
    widen the interval only where no calibration exists), the calibration
    :func:`cv_log_error` of the pair, and for a run above
    the largest fitted size the size backtest's error grown with log N
    (:func:`fitting.intervals.predictive.extrapolation_sd`; none without a size backtest — that
    interval is then too narrow by the size extrapolation, and ``calibrated`` says so); σ_seed
    the entry's seed noise where measured (``noise_source`` a seed spread)."""
    law = cmp.laws.get(cmp.chosen) if cmp.chosen else None
    if law is None:
        return {}
    pairs = list(cmp.runs.pairs)
    cv = cv_log_error(cmp)
    step_err, step, step_points = size_step_error(cmp)
    fitted_max = float(np.max(cmp.runs.n[~cmp.runs.heldout]))
    out: dict[str, dict[str, tuple[PredictiveInterval, bool]]] = {}
    for rid, entries in (cmp.heldout if heldout is None else heldout).items():
        r = int(np.flatnonzero(np.asarray(cmp.runs.run_ids) == rid)[0])
        n, W = cmp.runs.n[r:r + 1], cmp.runs.W[r:r + 1]
        tok = None if cmp.runs.tokens is None else cmp.runs.tokens[r:r + 1]
        samples = law.predict_samples(n, W, tok)[:, 0, :] if law.boot else None
        others = {f: o.predict(n, W, tok)[0] for f, o in cmp.laws.items()
                  if o is not law and o.can_predict(float(n[0]))}
        fw = cv_form_weights({f: cmp.errors.get(f, {}).get("cv_mae") for f in cmp.laws},
                             cmp.chosen)
        beyond = math.log(float(n[0]) / fitted_max) if n[0] > fitted_max * (1 + 1e-6) else 0.0
        size_sd = extrapolation_sd(step_err, step, beyond) if beyond > 0 else 0.0
        sized = beyond == 0 or math.isfinite(size_sd)
        out[rid] = {}
        for pair, e in entries.items():
            i = pairs.index(pair)
            est = float(e["predicted"])
            if not (math.isfinite(est) and est > 0):
                continue
            calib = [(sd, k) for sd, k in ((cv[pair]["rms_log"], cv[pair]["points"]),
                                            (size_sd, step_points)) if math.isfinite(sd)]
            seed = (float(e["noise"]) / float(e["measured"])
                    if e.get("noise_source") in ("pooled seed sd", "seed spread")
                    and e.get("noise") and float(e["measured"]) > 0 else None)
            cal = IntervalTerm(math.sqrt(sum(sd * sd for sd, _ in calib)),
                               satterthwaite_dof(calib) if calib else None)
            seed_dof = None if seed is None or not e.get("noise_dof") else int(e["noise_dof"])
            iv = predictive_interval(
                est, resampled=[] if samples is None else samples[:, i],
                form_estimates=[float(o[i]) for o in others.values()],
                form_weights=[fw.get(f, 0.0) for f in others],
                n_failed=0 if samples is None else int(np.sum(~np.isfinite(samples[:, i]))),
                rule="calibration", calibration=cal, seed=IntervalTerm(seed, seed_dof))
            out[rid][pair] = (iv, bool(math.isfinite(cv[pair]["rms_log"]) and sized))
    return out
