"""Predictive intervals of the held-out runs' losses predicted by L(N, D) across weights
(:mod:`fitting.intervals.predictive`'s sum rule), built from the fitted runs alone and fixed
before any held-out loss is read.

s² adds refits on the runs the estimate used, resampled within each size
(:func:`fitting.intervals.cooled_law.estimate_points`, :func:`~fitting.intervals.cooled_law.
resampled_run_refits`), the other form on the same points, the leave-largest-size-out
backtest's RMS error grown to the run's log-N distance (on as many dof as the backtest had
points) and the study's seed sd at its largest repeated size / √k (on its seeds' dof). Each
entry gains ``predictive``, ``inside80``, ``inside95`` and ``calibrated`` (False without a
backtest: too narrow, said in ``predictive_note``, left out of the coverage). The rule in
full: docs/reference/laws.md, "Predictive intervals and their coverage".
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
    IntervalTerm,
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
                                     form_estimates=[o[j] for o in others], n_failed=failed,
                                     calibration=(IntervalTerm(s_ext, step_points) if calibrated
                                                  else IntervalTerm(0.0)),
                                     seed=IntervalTerm(sigma, None if rel is None else rel.dof))
            e["predictive"] = iv.to_dict()
            e["inside80"], e["inside95"] = (iv.contains(e["measured"], 0.80),
                                            iv.contains(e["measured"], 0.95))
            e["calibrated"] = calibrated
            e["predictive_note"] = ("" if calibrated else "no leave-largest-size-out backtest "
                                    "(≥ 4 sizes): no extrapolation term, the interval is too "
                                    "narrow")
            records.append((iv, e["measured"], calibrated))
    return coverage(records, calibrated_only=True)
