"""Predictive intervals on the report's L(N, D) across weights (Caillaut et al. 2024 eq. 2 with
Fernandes et al. 2023 eq. 7's sharing, or Kaplan's form): its leave-largest-size-out backtest's
points and E (L∞), by :mod:`fitting.intervals.predictive`'s rule, from the sizes below the judged
one only — nothing of the held-out size enters a width.

Per point: resampled runs (:data:`RESAMPLES` refits within each size), the other form
(s_forms), σ_seed measured below the held-out size, and a calibration term
(:func:`calibration_term`): with ≥ 4 smaller sizes the inner backtest (their largest predicted
from the rest, "sum" rule); with three — the default study — each run of the largest smaller
size predicted by the law refitted without it (:func:`leave_one_run_out`, "calibration" rule,
dof = the runs left out). E is never measured: its interval is uncalibrated. Derivation and
fields: docs/reference/laws.md, "Predictive intervals and their coverage".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.options import NO_UNCERTAINTY, FitOptions
from fitting.core.seed_noise import SeedNoise
from fitting.intervals.predictive import (
    IntervalTerm,
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

__all__ = ["RESAMPLES", "INNER_BACKTEST", "LEAVE_ONE_RUN_OUT", "MIN_RUNS_LEFT_OUT",
           "cooled_law_intervals", "backtest_intervals", "calibration_term",
           "leave_one_run_out", "e_interval", "estimate_points", "resampled_run_refits",
           "other_form_predictions"]

#: refits on resampled runs per pair, for the backtest and for E (as
#: for the held-out runs' intervals, :mod:`fitting.intervals.heldout`)
RESAMPLES = 20
#: the calibration sources of a backtest point (:func:`calibration_term`)
INNER_BACKTEST, LEAVE_ONE_RUN_OUT = "inner backtest", "leave one run out"
#: the fewest runs at the largest smaller size that a leave-one-run-out calibration leaves out
MIN_RUNS_LEFT_OUT = 3
_SAME = 1e-9


def _refit(points: pd.DataFrame, form: str, f_scale: float | str) -> JointChinchillaFit:
    return fit_joint_chinchilla(points, form=form, fit_options=FitOptions(f_scale=f_scale),
                                uncertainty=NO_UNCERTAINTY, backtest=None)


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
    if noise is None:
        notes.append("no seed noise measured below the held-out size: no σ_seed term")
    cal = calibration_term(small, held_n, pair, form, f_scale, notes)
    records, per_point = [], []
    for j, (e, y) in enumerate(zip(bt["errors"], measured, strict=True)):
        pred = y * (1.0 + float(e["error"])) if math.isfinite(y) else math.nan
        sigma = None if noise is None else noise.sigma / math.sqrt(max(1, seeds[j]))
        try:
            iv = predictive_interval(pred, resampled=boot[:, j] if boot.size else (),
                                     form_estimates=[o[j] for o in others], rule=cal["rule"],
                                     n_failed=failed,
                                     calibration=IntervalTerm(cal["sd"], cal["dof"]),
                                     seed=IntervalTerm(sigma, None if noise is None else noise.dof))
        except FitError as err:
            e["predictive_error"] = str(err)
            continue
        e.update(measured=y, predicted=pred, lo80=iv.lo80, hi80=iv.hi80, lo95=iv.lo95,
                 hi95=iv.hi95, inside80=iv.contains(y, 0.80), inside95=iv.contains(y, 0.95),
                 calibrated=cal["calibrated"])
        per_point.append(iv.to_dict())
        records.append((iv, y, cal["calibrated"]))
    bt["predictive"] = {"points": per_point, "calibrated": cal["calibrated"],
                        "calibration": cal["source"], "rule": cal["rule"],
                        "step_error": cal["step_error"],
                        "n_resamples": int(boot.shape[0]) if boot.size else 0,
                        "n_failed": int(failed), "forms": [f for f in FORMS if f != form],
                        "calibration_n": cal["dof"], "calibration_points": cal["points"],
                        "sigma_source": None if noise is None else noise.source,
                        "sigma_dof": None if noise is None else noise.dof, "notes": notes}
    bt["coverage"] = coverage(records, calibrated_only=True)


def calibration_term(small: pd.DataFrame, held_n: float, pair: str, form: str,
                     f_scale: float | str, notes: list[str]) -> dict[str, Any]:
    """The calibration term of the backtest's points (module docstring), from the sizes below
    the held-out one only: ``sd`` (s_extrapolation, 0 where none), ``rule`` (the
    :func:`~fitting.intervals.predictive.predictive_interval` rule it enters by), ``dof`` (the
    errors it counts as independent: the inner backtest's points, or the runs left out),
    ``points``, ``step_error`` (its RMS log error before growing), ``source`` and
    ``calibrated``; what failed is appended to ``notes``."""
    sizes = np.unique(small["n"].to_numpy(float))
    n_max, step = largest_size_step(sizes)
    step_error, dof, points = math.nan, None, 0
    source, rule = ((INNER_BACKTEST, "sum") if sizes.size >= 4 else
                    (LEAVE_ONE_RUN_OUT, "calibration") if sizes.size == 3 else (None, "sum"))
    try:
        if source == INNER_BACKTEST:
            inner = leave_largest_out(small["n"], small["tokens"], small["weight"],
                                      small["value"], form="auto", f_scale=f_scale)
            step_error = float(inner["rmse_rel"])
            dof = points = len(inner.get("errors") or [])
        elif source == LEAVE_ONE_RUN_OUT:
            step_error, dof, points = leave_one_run_out(small, pair, form, f_scale)
        else:
            notes.append(f"{sizes.size} sizes below the held-out one: no calibration term")
    except FitError as e:
        notes.append(f"calibration ({source}) failed: {e}")
    s_ext = extrapolation_sd(step_error, step, math.log(held_n / n_max))
    calibrated = math.isfinite(s_ext) and s_ext > 0
    if not calibrated and sizes.size >= 3:
        notes.append("no calibration term: the intervals are too narrow and not counted")
    return {"sd": s_ext if calibrated else 0.0, "rule": rule if calibrated else "sum",
            "dof": dof or None, "points": points,
            "step_error": step_error if math.isfinite(step_error) else None,
            "source": source if calibrated else None, "calibrated": calibrated}


def leave_one_run_out(small: pd.DataFrame, pair: str, form: str, f_scale: float | str
                      ) -> tuple[float, int, int]:
    """The calibration with three smaller sizes: (RMS log error, runs, points) of each run (one
    weight, all its budgets) at the largest size N₃ of ``small`` predicted by the law in
    ``form`` refitted on every other point of ``small``. The run's A_p and B_p then rest on the
    two sizes below it — one size step extrapolated, as the backtest extrapolates one step
    beyond N₃ — while E, α and β keep N₃ through the other weights. The errors are those of
    refits making the backtest's kind of prediction, so they already hold the refits' spread
    and one run's seed noise: they enter by the "calibration" rule, grown with log N like the
    inner backtest's (:func:`~fitting.intervals.predictive.extrapolation_sd`), with Student's t
    on the runs left out as dof (a run's budgets share its seed and move together). What it
    cannot see is a misfit in N shared by every weight (E, α), which the larger-size verdict
    judges. FitError with fewer than :data:`MIN_RUNS_LEFT_OUT` runs at N₃, or when a refit
    fails (a calibration from the runs that happened to fit would be chosen by them)."""
    top = small["n"] >= small["n"].max() * (1 - _SAME)
    weights = sorted(small.loc[top, "weight"].astype(float).unique())
    if len(weights) < MIN_RUNS_LEFT_OUT:
        raise FitError(f"{len(weights)} run(s) at the largest smaller size: leaving one out "
                       f"needs ≥ {MIN_RUNS_LEFT_OUT}", column="weight")
    errors: list[float] = []
    for w in weights:
        out = top & np.isclose(small["weight"].astype(float), w, rtol=1e-9)
        fit = _refit(small[~out], form, f_scale)
        rows = small[out]
        pred = np.array([float(fit.predict(n, d, p, pair).ravel()[0]) for n, d, p in
                         zip(rows["n"], rows["tokens"], rows["weight"], strict=True)])
        errors += np.log(pred / rows["value"].to_numpy(float)).tolist()
    err = np.asarray(errors, dtype=float)
    if not np.all(np.isfinite(err)):
        raise FitError("a run left out was predicted as no positive finite loss")
    return float(np.sqrt(np.mean(err ** 2))), len(weights), int(err.size)


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
