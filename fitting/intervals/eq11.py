"""Predictive intervals of the eq. 11 law (Fernandes et al. 2023, L_i(N; p) = β1 (f̂(p) N)^−α +
L∞ with f̂ of eq. 12 or 13): the frontier at the target sizes and the held-out runs it predicts.

:func:`fitting.intervals.predictive.predictive_interval` of the law's L_i at (N, p), in log space:

    s² = s_refits² + s_extrapolation² + σ_seed²

* ``s_refits`` (reported as ``sd_resample``): the sd of log L over the law's own refits
  (``MultilingualLawFit.samples``: the report's perturbation or bootstrap refits);
* ``s_extrapolation``: the law's leave-largest-size-out backtest (``backtest[pair]``, fitted
  without the largest size, its worst weight's |log(predicted / measured)|: one step of
  log(N_max / N_next)) grown linearly with log(N / N_max) beyond the largest fitted size
  (:func:`fitting.intervals.predictive.extrapolation_sd`); at or below N_max one step. Without a
  backtest (fewer than 4 sizes) the interval has no such term and is marked not calibrated;
  one error is one degree of freedom, so where it dominates the quantile is Student's t on
  ≈ 1 dof (12.7 at 95 %) — the width one backtest point can earn;
* ``σ_seed``: the pair's relative seed sd at the largest repeated size (a held-out run's mean
  over k seeds: /√k); the frontier predicts the expected loss of one run, so one σ.

No term depends on a held-out run: the rule is fixed by the fitted runs. Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fitting.core.seed_noise import SeedNoise
from fitting.intervals.predictive import (
    IntervalTerm,
    PredictiveInterval,
    coverage,
    extrapolation_sd,
    largest_size_step,
    predictive_interval,
)

__all__ = ["eq11_interval", "frontier_intervals", "mark_eq11_heldout"]


def _step_error(law, pair: str, sizes: Sequence[float]) -> tuple[float, float]:
    """(|log(predicted / measured)| of the pair's backtest, log(N_max / N_next)); NaNs without
    a backtest or with fewer than 2 fitted sizes."""
    bt = (law.backtest or {}).get(pair)
    step = largest_size_step(sizes)[1]
    if not bt or not math.isfinite(step) or not (bt["pred"] > 0 and bt["true"] > 0):
        return float("nan"), float("nan")
    return abs(math.log(bt["pred"] / bt["true"])), step


def eq11_interval(law, n: float, w: float, pair: str, sizes: Sequence[float],
                  sigma_seed: float | None = None, seed_dof: float | None = None
                  ) -> tuple[PredictiveInterval, bool] | None:
    """The interval of the law's loss of ``pair`` at size ``n`` and weight ``w`` (module
    docstring) and whether it is calibrated (a backtest gave its extrapolation term);
    ``sizes``: the fitted model sizes; ``seed_dof`` σ_seed's dof (None: counted as known).
    None where the law predicts no positive finite loss."""
    est = float(np.asarray(law.predict(n, w, pair)).ravel()[0])
    if not (math.isfinite(est) and est > 0):
        return None
    refits: Sequence[float] = ()
    if law.samples:
        refits = np.asarray(law.predict_samples(n, w, pair), dtype=float).ravel()
    step_error, step = _step_error(law, pair, sizes)
    beyond = max(0.0, math.log(float(n) / max(sizes)))
    s_ext = extrapolation_sd(step_error, step, beyond)
    calibrated = math.isfinite(s_ext)
    cal = IntervalTerm(s_ext, 1) if calibrated else IntervalTerm(0.0)
    iv = predictive_interval(est, resampled=refits, calibration=cal,
                             seed=IntervalTerm(sigma_seed, seed_dof))
    return iv, calibrated


def frontier_intervals(law, frontier, targets: Sequence[float], sizes: Sequence[float],
                       sigma: Mapping[str, float | SeedNoise]) -> dict[str, Any]:
    """Per target size (key ``f"{N:g}"``) and pair, the frontier points' intervals as arrays
    over the frontier's weights: ``lo80``, ``hi80``, ``lo95``, ``hi95``, ``sd_total``, and
    ``calibrated``; ``sigma``: the pairs' relative seed sd (absent: none; a
    :class:`~fitting.core.seed_noise.SeedNoise` enters on its dof)."""
    out: dict[str, Any] = {}
    for n in targets:
        per: dict[str, Any] = {}
        for j, pair in enumerate(frontier.pairs):
            sd, dof = _sigma_and_dof(sigma.get(pair))
            ivs = [eq11_interval(law, float(n), float(w), pair, sizes, sd, dof)
                   for w in frontier.weights[:, j]]
            if any(v is None for v in ivs):
                continue
            per[pair] = {k: [float(getattr(iv, k)) for iv, _ in ivs]
                         for k in ("lo80", "hi80", "lo95", "hi95", "sd_total")}
            per[pair]["calibrated"] = all(c for _, c in ivs)
        out[f"{float(n):g}"] = per
    return out


def _sigma_and_dof(v: float | SeedNoise | None) -> tuple[float | None, float | None]:
    """(σ, its dof) of a relative seed sd given as a number (dof None) or a SeedNoise."""
    if isinstance(v, SeedNoise):
        return v.sigma, float(v.dof)
    return v, None


def mark_eq11_heldout(entries: list[dict[str, Any]], law, sizes: Sequence[float],
                      sigma: Mapping[str, float | SeedNoise]) -> dict[str, Any] | None:
    """Give every eq. 11 entry of the held-out runs (``law`` starting "eq. 11") its interval
    (σ_seed /√seeds of the run): ``predictive``, ``inside80``, ``inside95``, ``calibrated``;
    return their :func:`fitting.intervals.predictive.coverage` (None: no such entry)."""
    records = []
    for e in entries:
        if not str(e.get("law", "")).startswith("eq. 11") or law is None:
            continue
        rel, dof = _sigma_and_dof(sigma.get(e["pair"]))
        seed = None if rel is None else rel / math.sqrt(max(1, int(e.get("seeds") or 1)))
        got = eq11_interval(law, e["n"], e["weight"], e["pair"], sizes, seed, dof)
        if got is None:
            continue
        iv, calibrated = got
        e["predictive"], e["calibrated"] = iv.to_dict(), calibrated
        e["inside80"], e["inside95"] = (iv.contains(e["measured"], 0.80),
                                        iv.contains(e["measured"], 0.95))
        records.append((iv, e["measured"], calibrated))
    return coverage(records, calibrated_only=True) if records else None
