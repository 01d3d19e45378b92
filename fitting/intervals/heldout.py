"""Predictive intervals of the held-out runs' losses predicted by L(N, D) across weights
(:mod:`fitting.intervals.predictive`), built from the fitted runs alone.

For each held-out entry of the law the report leads with, s² adds:

* ``s_resample``: refits of the pair's L(N, D) (its chosen form, no uncertainty, no backtest)
  on the cooled-down points the estimate used (the budgets the form selection kept,
  :func:`fitting.intervals.cooled_law.estimate_points`) of runs resampled with replacement
  within each size
  (:func:`fitting.intervals.cooled_law.resampled_run_refits`; failed ones counted,
  ``n_failed``);
* ``s_forms``: the other form of L(N, D) fitted on the same points
  (:func:`fitting.intervals.cooled_law.other_form_predictions`), as the backtest points' have;
* ``s_extrapolation``: the leave-largest-size-out backtest's RMS relative error (the fitted
  largest size predicted from the smaller ones: one step of log(N_max / N_next)) grown linearly
  to the held-out run's distance log(N / N_max), never below one step
  (:func:`fitting.intervals.predictive.extrapolation_sd`), on as many dof as the backtest had
  points;
* ``σ_seed``: the study's relative seed sd at its largest repeated size (fitted runs only)
  divided by √k for a held-out mean over k seeds, on its seeds' dof in the Satterthwaite sum.

The rule is fixed before any held-out loss is read: no width depends on the held-out runs'
values or their spread. Each entry gains ``predictive`` (the interval's fields),
``inside80`` and ``inside95`` (the measured seed mean inside each), ``calibrated`` (False where
the backtest could not be computed: the interval then lacks its extrapolation term and is too
narrow, said in ``predictive_note``, and it is left out of the coverage returned).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.seed_noise import SeedNoise
from fitting.intervals.cooled_law import (
    RESAMPLES,
    estimate_points,
    other_form_predictions,
    resampled_run_refits,
)
from fitting.intervals.predictive import (
    coverage,
    extrapolation_sd,
    largest_size_step,
    predictive_interval,
)
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit

__all__ = ["heldout_predictive"]


def heldout_predictive(entries: list[dict[str, Any]], cooled: JointChinchillaFit | None,
                       points: pd.DataFrame, noise: dict[str, SeedNoise], seed: int = 0
                       ) -> dict[str, Any] | None:
    """Add the predictive interval to every entry of ``entries`` (the held-out entries of
    L(N, D) across weights the report leads with, module docstring) and return their
    :func:`fitting.intervals.predictive.coverage` (None when no entry has one). ``points``: the
    fitted runs' cooled-down points of L(N, D); ``noise``: the relative seed noise per pair at
    the largest repeated size (fitted runs only)."""
    lead = [e for e in entries if cooled is not None and e["pair"] in (cooled.pairs or [])]
    if not lead:
        return None
    records = []
    for pair in dict.fromkeys(e["pair"] for e in lead):
        mine = [e for e in lead if e["pair"] == pair]
        pts = estimate_points(cooled, pair, points[points["pair"] == pair])
        n_max, step = largest_size_step(pts["n"])
        targets = [(e["n"], e["tokens"], e["weight"]) for e in mine]

        def predict(fit: JointChinchillaFit, pair: str = pair, targets: list = targets
                    ) -> list[float]:
            return [float(fit.predict(n, d, w, pair).ravel()[0]) for n, d, w in targets]

        try:
            boot, failed = resampled_run_refits(pts, cooled.form(pair), predict, seed)
        except FitError:
            boot, failed = np.empty((0, 0)), RESAMPLES
        others, _ = other_form_predictions(pts, cooled.form(pair), predict)
        bt = (cooled.backtest or {}).get(pair) or {}
        step_error = float(bt.get("rmse_rel", math.nan))
        step_points = len(bt.get("errors") or []) or None
        for j, e in enumerate(mine):
            if not (math.isfinite(e["predicted"]) and e["predicted"] > 0):
                e.update(predictive=None, inside80=None, inside95=None, calibrated=False,
                         predictive_note=f"the prediction ({e['predicted']}) is not a positive "
                                         "finite loss: no interval")
                continue
            s_ext = extrapolation_sd(step_error, step, math.log(e["n"] / n_max))
            calibrated = math.isfinite(s_ext)
            rel = noise.get(pair)
            sigma = None if rel is None else rel.sigma / math.sqrt(max(1, int(e["seeds"])))
            iv = predictive_interval(e["predicted"], resampled=boot[:, j] if boot.size else (),
                                     form_estimates=[o[j] for o in others],
                                     sd_extrapolation=s_ext if calibrated else 0.0,
                                     sigma_seed=sigma, n_failed=failed,
                                     seed_dof=None if rel is None else rel.dof,
                                     calibration_dof=step_points if calibrated else None)
            e["predictive"] = iv.to_dict()
            e["inside80"], e["inside95"] = (iv.contains(e["measured"], 0.80),
                                            iv.contains(e["measured"], 0.95))
            e["calibrated"] = calibrated
            e["predictive_note"] = ("" if calibrated else "no leave-largest-size-out backtest "
                                    "(≥ 4 sizes): no extrapolation term, the interval is too "
                                    "narrow")
            records.append((iv, e["measured"], calibrated))
    return coverage(records, calibrated_only=True)
