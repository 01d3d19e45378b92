"""Runs of K pairs as arrays, the mixture laws compared by held-out error, the transfer matrix
and constrained weights at a target size (:mod:`fitting.laws.mixture_laws` for the laws).

* :func:`mixture_runs` — the tidy table (docs/reference/metrics_schema.md) → one row per run:
  size N, weights w (column ``weight`` of each evaluated pair; 0 = evaluated, not trained),
  final losses; cool-down branches left out. :func:`read_wide_runs` — the same from a wide CSV
  (one row per run: ``run_id``, ``n`` or ``size``, ``w_<pair>``, ``loss_<pair>``, optional
  ``heldout`` 0/1 and ``data_size_<pair>``).
* :func:`compare_mixture_laws` — every law fitted on the runs that are not held out (seed means
  per design mixture and size), leave-one-mixture-out cross-validation (all sizes of a mixture
  left out together; refits started from the all-data solution), errors on the held-out runs;
  the chosen law has the lowest CV mean absolute error (held-out runs never choose).
* :func:`transfer_matrix` — τ (K×K, diagonal 1) of the ``transfer`` law with bootstrap sd.
* :func:`recommend_mixture` — weights minimising the preference-weighted mean predicted loss
  under per-pair maximum weights and maximum losses (SLSQP from several starts), with the
  uniform, temperature and UniMax baselines at the same size.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.sampling import epoch_cap_weights, temperature_weights, unimax_weights
from fitting.data.tables import final_losses, last_evaluations_sd
from fitting.laws.mixture_laws import (
    FORMS,
    MixtureLawFit,
    fit_mixture_law,
    predict_with,
    refit_mixture_law,
)

__all__ = ["MixtureRuns", "mixture_runs", "read_wide_runs", "MixtureComparison", "outside_domain",
           "compare_mixture_laws", "transfer_matrix", "recommend_mixture", "TEMPERATURES"]

TEMPERATURES = (1.0, 5.0, 100.0)


@dataclass
class MixtureRuns:
    """Runs as arrays: ``W`` and ``Y`` have one column per pair (``pairs`` order); ``Y`` is NaN
    where the run did not evaluate the pair. ``curve_sd``: sd of the last 3 evaluated losses of
    each (run, pair) where the table has learning curves (else NaN)."""

    pairs: list[str]
    run_ids: list[str]
    n: np.ndarray
    W: np.ndarray
    Y: np.ndarray
    curve_sd: np.ndarray
    heldout: np.ndarray
    data_size: dict[str, float] = field(default_factory=dict)
    source: str = "table"

    def to_tidy(self, *, eval_set: str = "validation", metric: str = "loss") -> pd.DataFrame:
        """The runs as a tidy table (final rows only; one row per evaluated pair)."""
        rows = []
        for r, rid in enumerate(self.run_ids):
            for i, p in enumerate(self.pairs):
                if np.isfinite(self.Y[r, i]):
                    rows.append({"run_id": rid, "pair": p, "n": float(self.n[r]),
                                 "weight": float(self.W[r, i]),
                                 "data_size": self.data_size.get(p, np.nan),
                                 "eval_set": eval_set, "metric": metric, "step": 1000,
                                 "value": float(self.Y[r, i]), "final": True})
        return pd.DataFrame(rows)

    def to_wide(self) -> pd.DataFrame:
        """The runs as a wide table (:func:`read_wide_runs`)."""
        df = pd.DataFrame({"run_id": self.run_ids, "n": self.n,
                           "heldout": self.heldout.astype(int)})
        for i, p in enumerate(self.pairs):
            df[f"w_{p}"] = self.W[:, i]
            df[f"loss_{p}"] = self.Y[:, i]
            if p in self.data_size:
                df[f"data_size_{p}"] = self.data_size[p]
        return df

    @property
    def mixture_keys(self) -> np.ndarray:
        """One label per run: its weight vector rounded to 6 decimals."""
        return np.array([",".join(f"{v:.6f}" for v in row) for row in self.W])


def mixture_runs(table: pd.DataFrame, *, eval_set: str = "validation", metric: str = "loss",
                 heldout_runs: list[str] | tuple = (), source: str = "table") -> MixtureRuns:
    """One row per run (not a cool-down branch) from the tidy table's final losses."""
    fin, _ = final_losses(table, eval_set=eval_set, metric=metric, source=source,
                          include_branches=False)
    for col in ("run_id", "weight"):
        if col not in fin.columns:
            raise FitError(f"{source}: column {col!r} is missing; the mixture laws need one row "
                           "per (run, pair) with the pair's sampling weight", column=col,
                           source=source)
    fin = fin.assign(run_id=fin["run_id"].astype(str), pair=fin["pair"].astype(str))
    pairs = sorted(fin["pair"].unique())
    runs = list(dict.fromkeys(fin["run_id"]))
    W = fin.pivot_table(index="run_id", columns="pair", values="weight", aggfunc="first")
    Y = fin.pivot_table(index="run_id", columns="pair", values="value", aggfunc="mean")
    W = W.reindex(index=runs, columns=pairs).fillna(0.0).to_numpy(float)
    Y = Y.reindex(index=runs, columns=pairs).to_numpy(float)
    sums = W.sum(axis=1)
    if np.any(sums <= 0):
        bad = runs[int(np.flatnonzero(sums <= 0)[0])]
        raise FitError(f"{source}: run {bad!r} has no pair with a positive weight",
                       column="weight", source=source)
    n = fin.groupby("run_id")["n"].first().reindex(runs).to_numpy(float)
    sd = last_evaluations_sd(table, eval_set, metric, min_points=2)
    curve = np.array([[sd.get((r, p), np.nan) for p in pairs] for r in runs])
    data_size = {}
    if "data_size" in fin.columns:
        ds = pd.to_numeric(fin["data_size"], errors="coerce")
        for p, v in ds.groupby(fin["pair"]):
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                data_size[str(p)] = float(v.median())
    held = np.isin(runs, [str(r) for r in heldout_runs])
    return MixtureRuns(pairs, runs, n, W / sums[:, None], Y, curve, held, data_size, source)


def _numeric(df: pd.DataFrame, col: str, path: str) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(v) & df[col].notna().to_numpy())
    if len(bad):
        raise FitError(f"{path}: column {col!r}, row {int(bad[0]) + 2}: expected a number, got "
                       f"{df[col].iloc[bad[0]]!r}", column=col, row=int(bad[0]), source=path)
    return v


def read_wide_runs(table: pd.DataFrame | str) -> MixtureRuns:
    """Runs from a wide table, one row per run: ``run_id``, ``n`` (or ``size``), ``w_<pair>``
    and ``loss_<pair>`` for every pair, optional ``heldout`` (0/1) and ``data_size_<pair>``.
    Weights of a row must sum to 1 (±1e-3; then renormalised)."""
    path = table if isinstance(table, str) else "wide table"
    if isinstance(table, str):
        if not os.path.exists(table):
            raise FitError(f"{path}: no such file", source=path)
        df = pd.read_csv(table)
    else:
        df = table.copy()
    if "run_id" not in df.columns:
        raise FitError(f"{path}: column 'run_id' is missing (one row per run expected); columns: "
                       f"{list(df.columns)}", column="run_id", source=path)
    ncol = "n" if "n" in df.columns else "size" if "size" in df.columns else None
    if ncol is None:
        raise FitError(f"{path}: column 'n' (or 'size'), the non-embedding parameters of each "
                       "run, is missing", column="n", source=path)
    wp = [c[2:] for c in df.columns if c.startswith("w_")]
    lp = [c[5:] for c in df.columns if c.startswith("loss_")]
    if not wp:
        raise FitError(f"{path}: no weight columns 'w_<pair>'", column="w_<pair>", source=path)
    for p in lp:
        if p not in wp:
            raise FitError(f"{path}: column 'loss_{p}' has no weight column 'w_{p}'",
                           column=f"w_{p}", source=path)
    for p in wp:
        if p not in lp:
            raise FitError(f"{path}: column 'w_{p}' has no loss column 'loss_{p}'",
                           column=f"loss_{p}", source=path)
    pairs = sorted(wp)
    n = _numeric(df, ncol, path)
    if np.any(~(n > 0)):
        r = int(np.flatnonzero(~(n > 0))[0])
        raise FitError(f"{path}: column {ncol!r}, row {r + 2}: expected a positive size, got "
                       f"{df[ncol].iloc[r]!r}", column=ncol, row=r, source=path)
    W = np.column_stack([np.nan_to_num(_numeric(df, f"w_{p}", path)) for p in pairs])
    Y = np.column_stack([_numeric(df, f"loss_{p}", path) for p in pairs])
    s = W.sum(axis=1)
    bad = np.flatnonzero((np.abs(s - 1.0) > 1e-3) | (W < 0).any(axis=1))
    if len(bad):
        raise FitError(f"{path}: row {int(bad[0]) + 2} (run {df['run_id'].iloc[bad[0]]!r}): "
                       f"weights w_* must be ≥ 0 and sum to 1, got sum {s[bad[0]]:.6g}",
                       column="w_<pair>", row=int(bad[0]), source=path)
    held = (_numeric(df, "heldout", path) > 0) if "heldout" in df.columns \
        else np.zeros(len(df), bool)
    data_size = {}
    for p in pairs:
        if f"data_size_{p}" in df.columns:
            v = _numeric(df, f"data_size_{p}", path)
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                data_size[p] = float(np.median(v))
    return MixtureRuns(pairs, df["run_id"].astype(str).tolist(), n, W / s[:, None], Y,
                       np.full(Y.shape, np.nan), held, data_size, path)


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


def outside_domain(runs: MixtureRuns, *, budget_examples: float | None = None,
                   epoch_cap: float | None = None) -> dict[str, np.ndarray]:
    """The (run, pair) losses no mixture law describes, as boolean masks (runs × pairs):

    * ``untrained`` — w_i = 0: the pair is evaluated, not trained (a zero-shot loss, several
      times any trained one: Fernandes et al.'s p = 0);
    * ``over epoch cap`` — the pair's own data repeated more than ``epoch_cap`` times,
      w_i · budget / D_i > epoch_cap (needs ``budget_examples`` and the pair's ``data_size``):
      beyond it a low-resource pair over-fits and its loss *rises* with its weight, which no
      law here models (they saturate at best).
    """
    untrained = runs.W <= 0
    over = np.zeros_like(untrained)
    if budget_examples and epoch_cap:
        for i, p in enumerate(runs.pairs):
            if runs.data_size.get(p):
                over[:, i] = runs.W[:, i] * budget_examples / runs.data_size[p] > epoch_cap
    return {"untrained": untrained, "over epoch cap": over & ~untrained}


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


def _project(v: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {0 ≤ w ≤ cap, Σ w = 1} (bisection on the shift)."""
    lo, hi = np.min(v - cap) - 1.0, np.max(v) + 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.clip(v - mid, 0.0, cap).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi), 0.0, cap)


def _vec(d: dict | None, pairs: list[str], default: float, what: str) -> np.ndarray:
    d = d or {}
    unknown = [p for p in d if p not in pairs]
    if unknown:
        raise FitError(f"{what}: unknown pair(s) {unknown}; pairs: {pairs}", column="pair")
    return np.array([float(d.get(p, default)) for p in pairs])


def _violations(w, pred, cap, max_loss, pairs) -> list[str]:
    out = [f"weight {p} {w[i]:.3g} > max {cap[i]:.3g}" for i, p in enumerate(pairs)
           if w[i] > cap[i] + 1e-6]
    out += [f"loss {p} {pred[i]:.4g} > max {max_loss[i]:.4g}" for i, p in enumerate(pairs)
            if not pred[i] <= max_loss[i] + 1e-9]
    return out


def recommend_mixture(fit: MixtureLawFit, target_size: float, *,
                      max_weights: dict[str, float] | None = None,
                      max_loss: dict[str, float] | None = None,
                      preferences: dict[str, float] | None = None,
                      data_size: dict[str, float] | None = None,
                      budget_examples: float | None = None, epoch_cap: float | None = None,
                      n_starts: int = 8, seed: int = 0) -> dict:
    """Weights on the simplex minimising Σ_i π_i L_i(N, w) / Σ_i π_i of the law ``fit`` at
    N = ``target_size`` subject to w_i ≤ max weight (caller's, and epoch_cap · data_size_i /
    budget when all three are known) and L_i(N, w) ≤ max loss; SLSQP from ``n_starts`` starts
    (uniform and seeded Dirichlet draws, projected on the feasible box). Baselines at the same N:
    uniform, temperature T ∈ {1, 5, 100} (need data sizes) and UniMax (data sizes, budget and
    epoch cap)."""
    from scipy.optimize import minimize

    pairs = fit.pairs or []
    k = len(pairs)
    if not fit.can_predict(target_size):
        raise FitError(f"the {fit.form} law was fitted at sizes {fit.sizes} and cannot predict "
                       f"at N = {target_size:g}", column="n")
    cap = np.minimum(_vec(max_weights, pairs, 1.0, "max_weights"), 1.0)
    ds = {p: v for p, v in (data_size or {}).items() if p in pairs}
    cap_source = "caller" if max_weights else "none"
    if epoch_cap and budget_examples and len(ds) == k:
        ecap = epoch_cap_weights([ds[p] for p in pairs], budget_examples, epoch_cap)
        cap = np.minimum(cap, ecap)
        cap_source = "caller and epoch cap" if max_weights else "epoch cap"
    if cap.sum() < 1.0 - 1e-9:
        raise FitError(f"the maximum weights sum to {cap.sum():.4g} < 1: no mixture meets them",
                       column="weight")
    lmax = _vec(max_loss, pairs, np.inf, "max_loss")
    pref = _vec(preferences, pairs, 1.0, "preferences")
    if np.any(pref < 0) or pref.sum() <= 0:
        raise FitError("preferences: expected non-negative numbers, not all zero")
    pi = pref / pref.sum()

    def losses(w):
        return fit.predict(np.array([target_size]), w[None, :])[0]

    def objective(w):
        return float(pi @ losses(w))

    cons = [{"type": "eq", "fun": lambda w: np.sum(w) - 1.0}]
    fin = np.isfinite(lmax)
    if fin.any():
        cons.append({"type": "ineq", "fun": lambda w: (lmax - losses(w))[fin]})
    rng = np.random.default_rng(seed)
    starts = [np.full(k, 1.0 / k)] + list(rng.dirichlet(np.ones(k), max(0, n_starts - 1)))
    best, best_key = None, (np.inf, np.inf)
    for s in starts:
        w0 = _project(np.asarray(s), cap)
        with np.errstate(all="ignore"):
            res = minimize(objective, w0, method="SLSQP", bounds=list(zip(np.zeros(k), cap,
                                                                          strict=True)),
                           constraints=cons, options={"maxiter": 300, "ftol": 1e-10})
        w = _project(np.clip(res.x, 0.0, None), cap)
        pred = losses(w)
        viol = float(np.sum(np.clip(pred - lmax, 0.0, None)[fin]))
        key = (round(viol, 9), objective(w))
        if np.all(np.isfinite(pred)) and key < best_key:
            best, best_key = w, key
    if best is None:
        raise FitError("no start of the optimisation gave finite predicted losses")
    pred = losses(best)
    band = None
    if fit.boot:
        lo, hi = fit.band(np.array([target_size]), best[None, :])
        band = {p: [float(lo[0, i]), float(hi[0, i])] for i, p in enumerate(pairs)}
    out = {"target_size": float(target_size), "law": fit.form,
           "weights": {p: float(best[i]) for i, p in enumerate(pairs)},
           "predicted": {p: float(pred[i]) for i, p in enumerate(pairs)}, "band": band,
           "objective": objective(best),
           "feasible": not _violations(best, pred, cap, lmax, pairs),
           "constraints": {"max_weights": {p: float(cap[i]) for i, p in enumerate(pairs)},
                           "max_weights_source": cap_source,
                           "max_loss": {p: float(lmax[i]) for i, p in enumerate(pairs)
                                        if np.isfinite(lmax[i])},
                           "preferences": {p: float(pi[i]) for i, p in enumerate(pairs)},
                           "budget_examples": budget_examples, "epoch_cap": epoch_cap}}
    out["baselines"], out["baselines_skipped"] = _baselines(
        pairs, ds, budget_examples, epoch_cap, losses, objective, cap, lmax)
    uni = out["baselines"]["uniform"]["objective"]
    out["gain_over_uniform"] = float(uni - out["objective"])
    return out


def _baselines(pairs, ds, budget, epoch_cap, losses, objective, cap, lmax):
    k = len(pairs)
    cands: dict[str, np.ndarray] = {"uniform": np.full(k, 1.0 / k)}
    skipped: dict[str, str] = {}
    if len(ds) == k:
        sizes = [ds[p] for p in pairs]
        for t in TEMPERATURES:
            cands[f"temperature T={t:g}"] = temperature_weights(sizes, t)
        if budget and epoch_cap:
            cands["unimax"] = unimax_weights(sizes, budget, epoch_cap)
        else:
            skipped["unimax"] = "needs the budget in examples and an epoch cap"
    else:
        why = f"needs data_size for every pair (known for {sorted(ds)})"
        for t in TEMPERATURES:
            skipped[f"temperature T={t:g}"] = why
        skipped["unimax"] = why
    out = {}
    for name, w in cands.items():
        pred = losses(w)
        v = _violations(w, pred, cap, lmax, pairs)
        out[name] = {"weights": {p: float(w[i]) for i, p in enumerate(pairs)},
                     "predicted": {p: float(pred[i]) for i, p in enumerate(pairs)},
                     "objective": objective(w), "violates": bool(v), "violations": v}
    return out, skipped
