"""The mixture laws compared: fitted on the runs not held out, cross-validated over design
mixtures, scored on the held-out runs, one chosen; and the transfer matrix of the eq. 11 law.

* :func:`compare_mixture_laws` — every law of :mod:`fitting.laws.mixture_laws` fitted on the
  runs that are not held out (seed means per design mixture and size), leave-one-mixture-out
  cross-validation (all sizes of a mixture left out together; refits started from the
  all-data solution), errors on the held-out runs; the chosen law has the lowest CV mean
  absolute error (held-out runs never choose).
* :func:`transfer_matrix` — τ (K×K, diagonal 1) of the ``transfer`` law with bootstrap sd.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.laws.mixture_domain import outside_domain
from fitting.laws.mixture_laws import (
    FORMS,
    MixtureLawFit,
    fit_mixture_law,
    predict_with,
    refit_mixture_law,
)
from fitting.laws.mixture_runs import MixtureRuns

__all__ = ["MixtureComparison", "compare_mixture_laws", "transfer_matrix"]


@dataclass
class MixtureComparison:
    """The laws fitted on the runs that are not held out, their errors, the chosen law.
    ``outside``: {reason: number of (run, pair) losses outside the laws' domain}
    (:func:`outside_domain`), never fitted nor scored."""

    runs: MixtureRuns
    laws: dict[str, MixtureLawFit]
    errors: dict[str, dict]
    skipped: dict[str, str]
    chosen: str | None
    chosen_because: str
    heldout: dict[str, dict]
    outside: dict[str, int] = field(default_factory=dict)


def _seed_means(runs: MixtureRuns, rows: np.ndarray):
    """(n, W, Y, mixture label) of ``rows`` averaged over runs with the same mixture and size."""
    keys = runs.mixture_keys[rows]
    df = pd.DataFrame({"key": keys, "n": runs.n[rows]})
    groups = df.groupby(["key", "n"], sort=False).indices
    n, W, Y, g = [], [], [], []
    for (key, size), idx in groups.items():
        sel = np.flatnonzero(rows)[idx]
        n.append(size)
        W.append(runs.W[sel[0]])
        with warnings.catch_warnings():  # a pair with no loss at all in the group: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            Y.append(np.nanmean(runs.Y[sel], axis=0) if np.isfinite(runs.Y[sel]).any()
                     else runs.Y[sel[0]])
        g.append(key)
    return np.array(n), np.array(W), np.array(Y), np.array(g)


def _errors(y: np.ndarray, pred: np.ndarray) -> dict:
    ok = np.isfinite(y)
    good = ok & np.isfinite(pred)
    if not good.any():
        return {"mae": float("nan"), "mape": float("nan"), "points": 0,
                "not_predicted": int(ok.sum())}
    e = pred[good] - y[good]
    return {"mae": float(np.mean(np.abs(e))), "mape": float(100 * np.mean(np.abs(e) / y[good])),
            "points": int(good.sum()), "not_predicted": int((ok & ~good).sum())}


def _cross_validate(fit: MixtureLawFit, n, W, Y, g) -> dict:
    pred = np.full(Y.shape, np.nan)
    for m in np.unique(g):
        out = g == m
        try:
            sol = refit_mixture_law(fit, n[~out], W[~out], Y[~out])
        except (FitError, ValueError, np.linalg.LinAlgError):
            continue
        pred[out] = predict_with(fit, sol, n[out], W[out])
    return _errors(Y, pred)


def _noise(runs: MixtureRuns, r: int, i: int) -> tuple[float, str]:
    """Seed spread of run r's mixture at its size, else the sd of its last 3 evaluations."""
    same = (runs.mixture_keys == runs.mixture_keys[r]) & np.isclose(runs.n, runs.n[r])
    v = runs.Y[same, i]
    v = v[np.isfinite(v)]
    if len(v) >= 2:
        return float(np.std(v, ddof=1)), "seed spread"
    sd = runs.curve_sd[r, i]
    return (float(sd), "last 3 evaluations") if np.isfinite(sd) else (float("nan"), "none")


def compare_mixture_laws(runs: MixtureRuns, *, forms: tuple[str, ...] = FORMS, n_boot: int = 100,
                         seed: int = 0, min_mixtures: int | None = None,
                         budget_examples: float | None = None,
                         epoch_cap: float | None = None) -> MixtureComparison:
    """Fit every law in ``forms`` to the runs not held out; CV and held-out errors; the choice.

    Losses outside the laws' domain (:func:`outside_domain`) are neither fitted nor scored.
    Raises FitError when fewer than ``min_mixtures`` (default K + 2) distinct design mixtures
    are left to fit.
    """
    masks = outside_domain(runs, budget_examples=budget_examples, epoch_cap=epoch_cap)
    outside = {why: int(m[np.isfinite(runs.Y)].sum()) for why, m in masks.items()}
    Y_in = np.where(np.logical_or.reduce(list(masks.values())), np.nan, runs.Y)
    all_runs, runs = runs, replace(runs, Y=Y_in)
    fitted = ~runs.heldout
    n, W, Y, g = _seed_means(runs, fitted)
    k = len(runs.pairs)
    need = k + 2 if min_mixtures is None else min_mixtures
    if len(np.unique(g)) < need:
        raise FitError(f"{len(np.unique(g))} distinct design mixtures to fit for {k} pairs; the "
                       f"mixture laws need at least {need} (K + 2)", column="weight")
    laws, errors, skipped = {}, {}, {}
    held = np.flatnonzero(runs.heldout)
    for form in forms:
        try:
            fit = fit_mixture_law(form, n, W, Y, runs.pairs, groups=g, n_boot=n_boot, seed=seed)
        except FitError as e:
            skipped[form] = str(e)
            continue
        laws[form] = fit
        cv = _cross_validate(fit, n, W, Y, g)
        ho = _errors(runs.Y[held], fit.predict(runs.n[held], runs.W[held])) if len(held) \
            else {"mae": None, "mape": None, "points": 0, "not_predicted": 0}
        errors[form] = {"cv_mae": cv["mae"], "cv_mape": cv["mape"], "cv_points": cv["points"],
                        "cv_not_predicted": cv["not_predicted"], "heldout_mae": ho["mae"],
                        "heldout_mape": ho["mape"], "heldout_points": ho["points"],
                        "heldout_not_predicted": ho["not_predicted"], "n_params": fit.n_params,
                        "rmse": fit.goodness.get("rmse"), "r2": fit.goodness.get("r2")}
    chosen, because = _choose(errors)
    heldout = {}
    for r in held:
        rid = runs.run_ids[r]
        heldout[rid] = {}
        for i, p in enumerate(runs.pairs):
            if not np.isfinite(runs.Y[r, i]):
                continue
            pred = float(laws[chosen].predict(runs.n[r:r + 1], runs.W[r:r + 1])[0, i]) \
                if chosen else float("nan")
            noise, src = _noise(runs, r, i)
            heldout[rid][p] = {"predicted": pred, "measured": float(runs.Y[r, i]),
                               "error": pred - float(runs.Y[r, i]), "noise": noise,
                               "noise_source": src, "weight": float(runs.W[r, i]),
                               "n": float(runs.n[r]), "law": chosen}
    return MixtureComparison(all_runs, laws, errors, skipped, chosen, because, heldout, outside)


def _choose(errors: dict[str, dict]) -> tuple[str | None, str]:
    full = {f: e for f, e in errors.items() if e["cv_points"] > 0 and e["cv_not_predicted"] == 0}
    pool = full or {f: e for f, e in errors.items() if e["cv_points"] > 0}
    if not pool:
        return None, "no law could be cross-validated"
    order = sorted(pool, key=lambda f: pool[f]["cv_mae"])
    best = order[0]
    text = (f"lowest leave-one-mixture-out CV MAE: {best} {pool[best]['cv_mae']:.4g} "
            f"(MAPE {pool[best]['cv_mape']:.3g} %)")
    if len(order) > 1:
        text += "; then " + ", ".join(f"{f} {pool[f]['cv_mae']:.4g}" for f in order[1:])
    left = [f for f in errors if f not in pool]
    if left:
        text += f"; not ranked (some CV points not predicted): {', '.join(left)}"
    return best, text + ". Held-out runs are not used for the choice."


def transfer_matrix(fit: MixtureLawFit) -> tuple[np.ndarray, np.ndarray]:
    """τ (K×K; row = target i, column = source j; diagonal 1) of a ``transfer`` law and its
    bootstrap sd (NaN without refits; 0 on the diagonal)."""
    if fit.form != "transfer":
        raise FitError(f"the transfer matrix needs the 'transfer' law, not {fit.form!r}")
    pairs = fit.pairs or []
    k = len(pairs)
    tau, sd = np.eye(k), np.zeros((k, k))
    for i, p in enumerate(pairs):
        for j, q in enumerate(pairs):
            if i != j:
                tau[i, j] = fit.params.get(f"tau[{p},{q}]", np.nan)
                sd[i, j] = (fit.stderr or {}).get(f"tau[{p},{q}]", np.nan)
    return tau, sd
