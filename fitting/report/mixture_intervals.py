"""Predictive intervals of a mixture's objective J(w) = Σ_i π_i L_i(N, w) / Σ_i π_i.

The recommendation (:func:`fitting.laws.mixture.recommend.recommend_mixture`) and every mixture
the verification trains are predicted by a mixture law; the bootstrap band of that law is its
sensitivity to the runs it was fitted on, not how far a trained mixture may land from it. The
interval here is :func:`fitting.core.predictive.predictive_interval` of J, in log space:

    s² = s_resample² + s_forms² + s_heldout²

* ``s_resample``: the sd of log J over the law's bootstrap refits (runs resampled with
  replacement, :func:`fitting.laws.mixture.compare.compare_mixture_laws`);
* ``s_forms``: the root mean square of log(J_form / J) over the other mixture-law forms the
  study fitted and compared that can predict at N (model uncertainty as the spread of the
  candidates, the chosen one at the centre);
* ``s_heldout`` (:func:`heldout_objective_error`, the calibration term): the root mean square of
  log(J_predicted / J_measured) over the study's held-out mixtures — trained, never fitted —
  at sizes no larger than the N predicted, each J from one seed. It is fixed by runs the
  verification never reads, before any verification run is; it holds one seed's noise, so no
  separate σ_seed enters (a mean over seeds is then covered conservatively).

What it cannot hold: the recommendation is the law's own optimum, so the law's error there is
not a random draw (an optimiser seeks where the law is too optimistic); the verification's
measured coverage says whether that matters. Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fitting.core.predictive import PredictiveInterval, predictive_interval

__all__ = ["objective_samples", "heldout_objective_error", "objective_interval"]

#: fewer held-out mixtures than this give no calibration term (an RMS of one error is no spread)
MIN_HELDOUT = 2


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


def objective_interval(law, other_laws: Mapping[str, object], n: float,
                       weights: Mapping[str, float], pi: Mapping[str, float],
                       calibration: Mapping) -> PredictiveInterval | None:
    """The predictive interval of J at size ``n`` for ``weights`` (the module docstring):
    ``law`` predicts, ``other_laws`` (forms by name; ``law`` itself among them is skipped) give
    s_forms where they can predict at ``n``, ``calibration`` is
    :func:`heldout_objective_error`'s result (NaN rms: no calibration term). None when ``law``
    predicts no positive finite J there."""
    pairs = list(law.pairs or [])
    W = np.array([[float(weights.get(p, 0.0)) for p in pairs]])
    piv = np.array([float(pi.get(p, 0.0)) for p in pairs])
    j, samples = objective_samples(law, n, W, piv)
    if not (math.isfinite(j[0]) and j[0] > 0):
        return None
    forms = [float(objective_samples(other, n, W, piv)[0][0]) for other in other_laws.values()
             if other is not law and other.can_predict(n) and list(other.pairs or []) == pairs]
    resampled = [] if samples is None else samples[:, 0]
    failed = 0 if samples is None else int(np.sum(~np.isfinite(samples[:, 0])))
    rms = float(calibration.get("rms_log", float("nan")))
    return predictive_interval(float(j[0]), resampled=resampled, form_estimates=forms,
                               sd_extrapolation=rms if math.isfinite(rms) else 0.0,
                               n_failed=failed)
