"""Predictive intervals on the report's L(N, D) across weights (the law it leads with): the
leave-largest-size-out backtest's predicted points and E (L∞), by the rule of
:mod:`fitting.intervals.predictive` (s² = s_resample² + s_forms² + s_extrapolation² + σ_seed², in
log space; each term on its own dof, :func:`fitting.intervals.predictive.interval_dof`).

L_i(N, D; p) = E_i + A_{p,i} N^−α_i + B_{p,i} D^−β_i (Caillaut et al. 2024 eq. 2 with Fernandes
et al. 2023 eq. 7's sharing; or Kaplan's form, :mod:`fitting.laws.budget.kaplan_nd`).

Backtest (``fit.backtest[pair]``, :func:`fitting.laws.budget.chinchilla_joint.leave_largest_out`:
the law refitted on the sizes below the largest, in the form and budgets chosen there, predicts
the largest size's cooled-down losses). Each predicted point gets, from the smaller sizes only:

* ``s_resample``: refits of that form on the smaller sizes' runs (a run: one weight at one size,
  all its cooled-down budgets) resampled with replacement within each size
  (:data:`RESAMPLES` refits; failed ones counted in ``n_failed``);
* ``s_forms``: the other form of :data:`fitting.laws.budget.chinchilla_joint.FORMS` fitted on the
  same points: the RMS log deviation of the forms' predictions about the chosen one (the chosen
  one at 0; with two forms, one other: |log ratio|);
* ``s_extrapolation``: the inner backtest — the smaller sizes' own largest size predicted from
  the sizes below it (:func:`leave_largest_out`, form chosen there) — its RMS relative error
  grown linearly with the distance in log N (:func:`fitting.intervals.predictive.extrapolation_sd`);
  it needs ≥ 4 smaller sizes, else the point is marked ``calibrated: False`` (too narrow);
* ``σ_seed``: the pair's relative seed sd at the largest size repeated *below* the held-out one
  (``noise``: measured on sizes the refit had, never on the size judged; on its seeds' dof in
  the Satterthwaite sum), divided by √(seeds averaged into the measured point); 0 where no
  smaller size was repeated (stated in ``notes``).

Every refit fixes the main fit's f_scale of the pair (``fit.f_scale``) instead of
searching the grid again (Ghorbani App. E), which keeps the 20 refits to seconds. Nothing of
the held-out size enters a width. Each ``errors`` entry of the backtest gains
``measured``, ``predicted``, ``lo80``, ``hi80``, ``lo95``, ``hi95``, ``inside80``, ``inside95``
and ``calibrated``; the backtest gains ``predictive`` (the components per point and the rule)
and ``coverage`` (:func:`fitting.intervals.predictive.coverage` over its calibrated points only: an
uncalibrated point is never counted in a coverage claim, ``left_out`` says how many).

E (``fit.meta["E_predictive"][pair]``): refits of the chosen form and budgets on all the fitted
runs resampled within each size, and the other form's E on the same points; no extrapolation
term and no seed noise (E is never measured, so no backtest calibrates it: ``calibrated``
False). An E that is a bound (:func:`fitting.laws.budget.chinchilla_joint.e_bound`) gets no
interval, its reason instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.seed_noise import SeedNoise
from fitting.intervals.predictive import (
    coverage,
    extrapolation_sd,
    largest_size_step,
    predictive_interval,
    resampled_predictions,
    stratified_resamples,
)
from fitting.laws.budget.chinchilla_joint import (
    FORMS,
    JointChinchillaFit,
    budget_rank,
    fit_joint_chinchilla,
    leave_largest_out,
)

__all__ = ["RESAMPLES", "cooled_law_intervals", "backtest_intervals", "e_interval",
           "estimate_points", "resampled_run_refits", "other_form_predictions"]

#: refits on resampled runs per pair, for the backtest and for E (as
#: for the held-out runs' intervals, :mod:`fitting.intervals.heldout`)
RESAMPLES = 20
_SAME = 1e-9


def _refit(points: pd.DataFrame, form: str, f_scale: float | str) -> JointChinchillaFit:
    return fit_joint_chinchilla(points, uncertainty=None, backtest=False, form=form,
                                f_scale=f_scale)


def resampled_run_refits(points: pd.DataFrame, form: str, predict, seed: int,
                         f_scale: float | str = "auto") -> tuple[np.ndarray, int]:
    """``predict(refit)`` of :data:`RESAMPLES` refits of L(N, D) in ``form`` (no uncertainty,
    no backtest) on the runs of ``points`` (a run: one weight at one size, all its cooled-down
    budgets) resampled with replacement within each size: the (R, P) predictions and the
    number of failed refits (counted, never replaced)."""
    runs = points[["weight", "n"]].drop_duplicates().reset_index(drop=True)
    member = {(float(w), float(n)): points[(points["weight"] == w) & (points["n"] == n)]
              for w, n in runs.itertuples(index=False)}

    def refit(idx: np.ndarray) -> list[float]:
        parts = [member[(float(runs.at[i, "weight"]), float(runs.at[i, "n"]))] for i in idx]
        return predict(_refit(pd.concat(parts, ignore_index=True), form, f_scale))

    return resampled_predictions(refit, stratified_resamples(runs["n"].to_numpy(), RESAMPLES,
                                                             seed))


def other_form_predictions(points: pd.DataFrame, form: str, predict,
                           f_scale: float | str = "auto"
                           ) -> tuple[list[np.ndarray], list[str]]:
    """``predict(fit)`` of each other form of L(N, D) fitted on the same points (s_forms), and
    the notes of those that failed."""
    out, notes = [], []
    for other in FORMS:
        if other == form:
            continue
        try:
            out.append(np.asarray(predict(_refit(points, other, f_scale)), dtype=float))
        except FitError as e:
            notes.append(f"{other} form not fitted: {e}")
    return out, notes


def backtest_intervals(pair: str, bt: dict[str, Any], points: pd.DataFrame,
                       noise: SeedNoise | None, seed: int = 0,
                       f_scale: float | str = "auto") -> None:
    """Add the predictive intervals of the backtest ``bt`` of ``pair`` (module docstring) to
    its ``errors`` entries, with ``predictive`` and ``coverage``; ``points``: the pair's fitted
    cooled-down points (columns weight, n, tokens, value; n_seeds where seeds were averaged)."""
    held_n = float(bt["held_out_n"])
    small = points[points["n"] < held_n * (1 - _SAME)]
    if bt.get("budgets") is not None:
        rank = budget_rank(small["tokens"], small["weight"], small["n"])
        small = small[rank < int(bt["budgets"])]
    held = points[np.isclose(points["n"], held_n, rtol=1e-9)]
    targets, measured, seeds = [], [], []
    for e in bt["errors"]:
        m = held[np.isclose(held["tokens"], e["d"], rtol=1e-9)
                 & np.isclose(held["weight"], e["p"], rtol=1e-9)]
        y = float(m["value"].iloc[0]) if len(m) else math.nan
        targets.append((held_n, float(e["d"]), float(e["p"])))
        measured.append(y)
        seeds.append(int(m["n_seeds"].iloc[0]) if len(m) and "n_seeds" in m else 1)

    def predict(fit: JointChinchillaFit) -> list[float]:
        return [float(fit.predict(n, d, p, pair).ravel()[0]) for n, d, p in targets]

    form = str(bt["form"])
    boot, failed = resampled_run_refits(small, form, predict, seed, f_scale)
    others, notes = other_form_predictions(small, form, predict, f_scale)
    sizes = np.unique(small["n"].to_numpy(float))
    step_error, inner_points = math.nan, 0
    if noise is None:
        notes.append("no seed noise measured below the held-out size: no σ_seed term")
    if sizes.size >= 4:
        try:
            sm = small
            inner = leave_largest_out(sm["n"], sm["tokens"], sm["weight"], sm["value"],
                                      form="auto", f_scale=f_scale)
            step_error = float(inner["rmse_rel"])
            inner_points = len(inner.get("errors") or [])
        except FitError as e:
            notes.append(f"inner backtest failed: {e}")
    else:
        notes.append(f"{sizes.size} sizes below the held-out one: the inner backtest needs ≥ 4, "
                     "so no extrapolation term (the intervals are too narrow)")
    n_max, step = largest_size_step(sizes)
    s_ext = extrapolation_sd(step_error, step, math.log(held_n / n_max))
    calibrated = math.isfinite(s_ext)
    records, per_point = [], []
    for j, (e, y) in enumerate(zip(bt["errors"], measured, strict=True)):
        pred = y * (1.0 + float(e["error"])) if math.isfinite(y) else math.nan
        sigma = None if noise is None else noise.sigma / math.sqrt(max(1, seeds[j]))
        try:
            iv = predictive_interval(pred, resampled=boot[:, j] if boot.size else (),
                                     form_estimates=[o[j] for o in others],
                                     sd_extrapolation=s_ext if calibrated else 0.0,
                                     sigma_seed=sigma, n_failed=failed,
                                     calibration_dof=inner_points or None,
                                     seed_dof=None if noise is None else noise.dof)
        except FitError as err:
            e["predictive_error"] = str(err)
            continue
        e.update(measured=y, predicted=pred, lo80=iv.lo80, hi80=iv.hi80, lo95=iv.lo95,
                 hi95=iv.hi95, inside80=iv.contains(y, 0.80), inside95=iv.contains(y, 0.95),
                 calibrated=calibrated)
        per_point.append(iv.to_dict())
        records.append((iv, y, calibrated))
    bt["predictive"] = {"points": per_point, "calibrated": calibrated,
                        "step_error": step_error if math.isfinite(step_error) else None,
                        "n_resamples": int(boot.shape[0]) if boot.size else 0,
                        "n_failed": int(failed), "forms": [f for f in FORMS if f != form],
                        "calibration_n": inner_points or None,
                        "sigma_source": None if noise is None else noise.source,
                        "sigma_dof": None if noise is None else noise.dof, "notes": notes}
    bt["coverage"] = coverage(records, calibrated_only=True)


def estimate_points(fit: JointChinchillaFit, pair: str, points: pd.DataFrame) -> pd.DataFrame:
    """The points of ``pair`` the estimate rests on: ``points`` at the budgets the form
    selection kept for it (``fit.meta["selection"][pair]["budgets"]``, counted from each run's
    last, :func:`fitting.laws.budget.chinchilla_joint.budget_rank`; all where none was chosen) —
    the refits of an interval are made on what the fit it surrounds was made on."""
    sel = (fit.meta.get("selection") or {}).get(pair)
    if not sel or sel.get("budgets") is None:
        return points
    rank = budget_rank(points["tokens"], points["weight"], points["n"])
    return points[rank < int(sel["budgets"])]


def e_interval(pair: str, fit: JointChinchillaFit, points: pd.DataFrame, seed: int = 0
               ) -> dict[str, Any]:
    """E's interval (module docstring): :meth:`PredictiveInterval.to_dict` fields with
    ``calibrated`` False and ``note``, or ``{"error": reason}``."""
    if fit.e_is_bound(pair):
        return {"error": "E is a bound, not an estimate: no interval"}
    pts = estimate_points(fit, pair, points)
    form = fit.form(pair)

    def predict(f: JointChinchillaFit) -> list[float]:
        return [f.l_inf(pair)]

    fs = (fit.f_scale or {}).get(pair, "auto")
    boot, failed = resampled_run_refits(pts, form, predict, seed, fs)
    others, notes = other_form_predictions(pts, form, predict, fs)
    try:
        iv = predictive_interval(fit.l_inf(pair), resampled=boot[:, 0] if boot.size else (),
                                 form_estimates=[o[0] for o in others], n_failed=failed)
    except FitError as e:
        return {"error": str(e)}
    return {**iv.to_dict(), "calibrated": False,
            "note": "E is never measured: no backtest calibrates its interval (resampled runs "
                    "and the other form only)" + ("; " + "; ".join(notes) if notes else "")}


def cooled_law_intervals(fit: JointChinchillaFit, points: pd.DataFrame,
                         noise: dict[str, SeedNoise] | None = None, seed: int = 0) -> None:
    """Add the predictive intervals (module docstring) to ``fit``'s backtests and
    ``meta["E_predictive"]``, per pair; ``points``: the cooled-down points the fit was given
    (:func:`fitting.report.sections.chinchilla.chinchilla_points`); ``noise``: each pair's relative seed
    noise below its backtest's held-out size."""
    for pair in fit.pairs or []:
        sub = points[(points["pair"].astype(str) == pair)
                     & ~(pd.to_numeric(points["weight"], errors="coerce") <= 0)]
        bt = (fit.backtest or {}).get(pair)
        if bt:
            backtest_intervals(pair, bt, sub, (noise or {}).get(pair), seed,
                               (fit.f_scale or {}).get(pair, "auto"))
        fit.meta.setdefault("E_predictive", {})[pair] = e_interval(pair, fit, sub, seed)
