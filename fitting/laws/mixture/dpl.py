"""Double Power Law of Chen et al. 2023 (eq. 4/5), its three-step estimation (§3.2), the published
base-model coefficients (eq. 6) and optimal sampling ratios on the simplex (eq. 7).

    F_i(p, D_i) = (k·p)^−α + (D_i^γ + b)·(q·p)^β + M_∞^(i)            (eq. 5)

p is the sampling ratio of direction i, D_i its number of training examples (in units of
``data_unit`` examples; Chen use millions), M_∞^(i) a per-direction bias. Eq. 6 (base model):
k = 0.07, α = 0.20, γ = −0.33, b = −0.50, q = 1.18, β = 1.21.

Estimation (§3.2), for runs at one model size over a grid of p:
1. the high-resource group(s) (largest D): fit (k·p)^−α + M, ignoring over-fitting;
2. k, α fixed, the lowest-D group(s): fit c·p^β + M on the residual (c = G(D)·q^β);
3. β fixed, every other group: c_D (and M_D) exactly; then c_D = q^β·(D^γ + b) across the
   D values (≥ 3 distinct D, or pass ``gamma``) gives q, γ, b.
Linear parameters are solved exactly at each exponent (variable projection over a grid, then a
bounded least-squares polish), so no starting values are needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize, minimize_scalar

from fitting.core.base import FitError, FitResult, TableRequest, register_law
from fitting.core.engine import converged, require_converged
from fitting.data.sampling import temperature_weights
from fitting.data.tables import (
    apply_column_map,
    check_finite_positive,
    check_weights,
    drop_invalid_rows,
    final_losses,
    require_columns,
)
from fitting.laws.table_fits import fit_bootstrapped

__all__ = [
    "DPLFit",
    "CHEN_EQ6_PARAMS",
    "CHEN_EQ6_PRESET",
    "chen_eq6_preset",
    "fit_dpl",
    "fit_from_table",
    "optimal_sampling_ratios",
    "dpl_objective",
]

#: Chen et al. 2023 eq. 6 (base model, 64M parameters; D in millions of examples).
CHEN_EQ6_PARAMS: dict[str, float] = {
    "k": 0.07, "alpha": 0.20, "gamma": -0.33, "b": -0.50, "q": 1.18, "beta": 1.21,
}


@register_law("dpl")
@dataclass
class DPLFit(FitResult):
    """Double Power Law (Chen eq. 5). ``params``: k, alpha, q, beta, gamma, b; ``bias``: M_∞ per
    group (``"pair@data_size"`` or the given group labels); ``data_unit``: examples per unit of D."""

    bias: dict[str, float] = field(default_factory=dict)
    data_unit: float = 1e6

    @classmethod
    def fit_table(cls, table: Any, request: TableRequest) -> DPLFit:
        """``mnmt-fit fit --law dpl``: the DPL fitted by :func:`fit_from_table`; bootstrap
        only."""
        return fit_bootstrapped(fit_from_table, "dpl", table, request)

    def overfit_scale(self, data_size: Any) -> np.ndarray:
        """G(D) = D^γ + b with D = data_size / data_unit (eq. 5)."""
        p = self.params
        dd = np.asarray(data_size, dtype=float) / self.data_unit
        return dd ** p["gamma"] + p["b"]

    def predict(self, p: Any, data_size: Any, group: str | None = None,  # type: ignore[override]
                bias: float | None = None) -> np.ndarray:
        """F(p, D) (eq. 5). The bias is ``bias``, else that of ``group``, else 0 (reducible part)."""
        pr = self.params
        pp = np.asarray(p, dtype=float)
        if bias is None:
            if group is not None:
                if group not in self.bias:
                    raise FitError(f"unknown group {group!r}; fitted groups: {list(self.bias)}")
                bias = self.bias[group]
            else:
                bias = 0.0
        with np.errstate(divide="ignore"):
            return ((pr["k"] * pp) ** (-pr["alpha"])
                    + self.overfit_scale(data_size) * (pr["q"] * pp) ** pr["beta"] + bias)

    def critical_ratio(self, data_size: float) -> float:
        """The p minimising F(p, D) (bottom of the "U" of §3.3); inf when F decreases for all p."""
        pr = self.params
        g = float(self.overfit_scale(data_size))
        if g <= 0:
            return math.inf
        a, be = pr["alpha"], pr["beta"]
        num = a * pr["k"] ** (-a)
        den = g * be * pr["q"] ** be
        return (num / den) ** (1.0 / (a + be))

    def summary(self) -> str:
        """Parameters, then each group's bias, data size and critical ratio."""
        lines = [super().summary()]
        sizes = self.meta.get("data_size_by_group", {})
        for g, m in self.bias.items():
            s = f"  bias M[{g}] = {m:.6g}"
            if g in sizes:
                pc = self.critical_ratio(sizes[g] * self.data_unit)
                s += f"   D = {sizes[g]:g} x {self.data_unit:g}; " + (
                    f"U-shaped, minimum at p = {pc:.3f}" if pc < 1 else "monotone in p")
            lines.append(s)
        return "\n".join(lines)

    def is_u_shaped(self, data_size: float) -> bool:
        """True when the curve over p ∈ (0, 1] has an interior minimum (low-resource collapse)."""
        return self.critical_ratio(data_size) < 1.0


def chen_eq6_preset() -> DPLFit:
    """The published base-model coefficients of Chen et al. 2023 eq. 6 (biases unknown: 0)."""
    return DPLFit(law="dpl", params=dict(CHEN_EQ6_PARAMS), n_points=0,
                  meta={"source": "Chen et al. 2023 eq. 6 (base model, D in millions)"},
                  data_unit=1e6)


CHEN_EQ6_PRESET = chen_eq6_preset()


# -- estimation helpers --------------------------------------------------------------------------


def _linear_fit(cols: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    coef, *_ = np.linalg.lstsq(cols, y, rcond=None)
    r = y - cols @ coef
    return coef, float(r @ r)


def _profile(exps: np.ndarray, design, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Grid search over one exponent with the linear parameters solved exactly, then a
    golden-section refinement around the best grid cell, kept when it converged
    (:func:`fitting.core.engine.converged`) and improves on the cell. ``design(e)`` → columns."""
    sse = np.array([_linear_fit(design(e), y)[1] for e in exps])
    i = int(np.nanargmin(sse))
    lo, hi = exps[max(i - 1, 0)], exps[min(i + 1, len(exps) - 1)]
    res = minimize_scalar(lambda e: _linear_fit(design(e), y)[1], bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-10})
    e = float(res.x) if converged(res) and res.fun <= sse[i] else float(exps[i])
    return e, _linear_fit(design(e), y)[0]


def _indicators(labels: np.ndarray, groups: list[str]) -> np.ndarray:
    return np.stack([(labels == g).astype(float) for g in groups], axis=1)


def _three_steps(p: np.ndarray, dd: np.ndarray, y: np.ndarray, labels: np.ndarray,
                 high: list[str], gamma: float | None) -> tuple[dict[str, float],
                                                                dict[str, float], dict]:
    """Chen §3.2 on arrays; returns params, biases (from the final joint refit), diagnostics."""
    groups = list(dict.fromkeys(labels))
    gsize = {g: float(dd[labels == g][0]) for g in groups}
    # step 1: capacity occupation on the high-resource groups
    m1 = np.isin(labels, high)
    hg = [g for g in groups if g in high]
    ind1 = _indicators(labels[m1], hg)
    alpha, coef1 = _profile(np.linspace(0.01, 3.0, 300),
                            lambda a: np.column_stack([p[m1] ** (-a), ind1]), y[m1])
    if coef1[0] <= 0:
        raise FitError("DPL step 1: the high-resource loss does not decrease with p; "
                       "cannot estimate the capacity-occupation term")
    k = coef1[0] ** (-1.0 / alpha)
    cap = (k * p) ** (-alpha)
    # step 2: over-fitting exponent on the lowest-D group(s), k and α fixed
    rest = [g for g in groups if g not in high]
    if not rest:
        raise FitError("DPL needs at least one group with less data than the high-resource one")
    dmin = min(gsize[g] for g in rest)
    low = [g for g in rest if gsize[g] == dmin]
    m2 = np.isin(labels, low)
    ind2 = _indicators(labels[m2], low)
    beta, coef2 = _profile(np.linspace(0.05, 8.0, 400),
                           lambda b_: np.column_stack([p[m2] ** b_, ind2]), y[m2] - cap[m2])
    # step 3: c_D per remaining group with β fixed, then c_D = q^β (D^γ + b)
    c = {g: float(coef2[0]) for g in low}
    for g in rest:
        if g in c:
            continue
        m = labels == g
        coef, _ = _linear_fit(np.column_stack([p[m] ** beta, np.ones(m.sum())]), y[m] - cap[m])
        c[g] = float(coef[0])
    dvals = np.array([gsize[g] for g in rest])
    cvals = np.array([c[g] for g in rest])
    n_distinct = len(np.unique(dvals))
    if gamma is None:
        if n_distinct < 3:
            raise FitError(
                f"DPL step 3 needs groups at >= 3 distinct data sizes to fit G(D) = D^γ + b "
                f"(got {n_distinct} below the high-resource size); pass gamma= to fix γ "
                f"(Chen eq. 6: {CHEN_EQ6_PARAMS['gamma']})")
        gam, coef3 = _profile(np.linspace(-3.0, -0.005, 600),
                              lambda g_: np.column_stack([dvals ** g_, np.ones_like(dvals)]), cvals)
    else:
        if n_distinct < 2:
            raise FitError("DPL step 3 needs groups at >= 2 distinct data sizes with gamma fixed")
        gam = float(gamma)
        coef3, _ = _linear_fit(np.column_stack([dvals ** gam, np.ones_like(dvals)]), cvals)
    s, sb = float(coef3[0]), float(coef3[1])
    if s <= 0:
        raise FitError("DPL step 3: the over-fitting scale does not fall with D "
                       f"(fitted q^β = {s:.3g} <= 0); the data show no low-resource collapse")
    q = s ** (1.0 / beta)
    params = {"k": float(k), "alpha": float(alpha), "q": float(q), "beta": float(beta),
              "gamma": float(gam), "b": float(sb / s)}
    # biases of every group given the final shared parameters (exact: a mean residual)
    full = cap + (dd ** gam + sb / s) * (q * p) ** beta
    bias = {g: float(np.mean((y - full)[labels == g])) for g in groups}
    diag = {"c_by_group": c, "data_size_by_group": gsize, "high_resource_groups": hg,
            "low_resource_groups": low}
    return params, bias, diag


def _refine(params: dict[str, float], p: np.ndarray, dd: np.ndarray, y: np.ndarray,
            labels: np.ndarray, gamma_fixed: float | None, refit: bool = False,
            diag: dict | None = None) -> dict[str, float]:
    """Joint least-squares polish of the shared parameters (biases projected out exactly).
    A polish that did not converge (:func:`fitting.core.engine.converged`) raises FitError in
    a ``refit`` (bootstrap); in the main fit it is kept and ``diag["refine_converged"]`` says
    so."""
    groups = list(dict.fromkeys(labels))
    ind = _indicators(labels, groups)
    counts = ind.sum(axis=0)

    def unpack(v):
        k, al, q, be, b = math.exp(v[0]), v[1], math.exp(v[2]), v[3], v[4]
        ga = gamma_fixed if gamma_fixed is not None else v[5]
        return k, al, q, be, ga, b

    def resid(v):
        k, al, q, be, ga, b = unpack(v)
        r = y - ((k * p) ** (-al) + (dd**ga + b) * (q * p) ** be)
        return r - ind @ ((ind.T @ r) / counts)

    v0 = [math.log(params["k"]), params["alpha"], math.log(params["q"]), params["beta"],
          params["b"]] + ([] if gamma_fixed is not None else [params["gamma"]])
    lo = [-50, 1e-4, -50, 1e-4, -np.inf] + ([] if gamma_fixed is not None else [-10])
    hi = [50, 10, 50, 20, np.inf] + ([] if gamma_fixed is not None else [-1e-6])
    v0 = np.clip(v0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
    res = least_squares(resid, v0, bounds=(lo, hi), x_scale="jac", xtol=1e-14, ftol=1e-14,
                        gtol=1e-14, max_nfev=5000)
    if refit:
        require_converged(res, "DPL joint polish")
    if diag is not None:
        diag["refine_converged"] = converged(res)
    r0 = resid(v0)
    if not (np.all(np.isfinite(res.fun)) and res.fun @ res.fun <= r0 @ r0):
        return params
    k, al, q, be, ga, b = unpack(res.x)
    return {"k": k, "alpha": float(al), "q": q, "beta": float(be), "gamma": float(ga),
            "b": float(b)}


def _estimate(p, dd, y, labels, high, gamma, refine, refit=False):
    params, _, diag = _three_steps(p, dd, y, labels, high, gamma)
    if refine:
        diag["three_step_params"] = dict(params)
        params = _refine(params, p, dd, y, labels, gamma, refit=refit, diag=diag)
    full = (params["k"] * p) ** (-params["alpha"]) + (dd ** params["gamma"] + params["b"]) * (
        params["q"] * p) ** params["beta"]
    bias = {g: float(np.mean((y - full)[labels == g])) for g in dict.fromkeys(labels)}
    return params, bias, diag


def fit_dpl(
    p: Any,
    data_size: Any,
    loss: Any,
    group: Any = None,
    *,
    high_resource: Sequence[str] | str | None = None,
    gamma: float | None = None,
    data_unit: float = 1e6,
    bootstrap: int = 0,
    seed: int = 0,
    refine: bool = True,
) -> DPLFit:
    """Fit the Double Power Law (Chen eq. 5) by the three-step estimation of §3.2.

    ``p``: sampling ratio of the row's direction (0 < p <= 1); ``data_size``: its training
    examples; ``loss``: its eval cross-entropy; ``group``: label per row (default
    ``"pair@data_size"`` is built by :func:`fit_from_table`; here the data size alone). Each group
    gets its own bias M_∞. ``high_resource``: group label(s) for step 1 (default: the groups at the
    largest data size). ``gamma``: fix γ (needed with < 3 distinct sizes below the largest).
    ``bootstrap``: rows resampled within groups, refit, 95% percentile intervals.
    ``refine``: after the three steps, polish all shared parameters jointly by least squares
    (biases projected out). Step 1 ignores the over-fitting term of the high-resource groups,
    which biases k and α whenever G(D_high) ≠ 0 (eq. 6 gives G(10M) = −0.03); the polish removes
    that bias. ``refine=False`` is Chen's procedure as published; ``meta["three_step_params"]``
    keeps the unrefined estimate; ``meta["refine_converged"]`` whether the polish converged
    (False: a warning; a bootstrap refit whose polish did not converge is dropped, so
    ``meta["bootstrap"]["succeeded"]`` leaves it out).
    """
    arrs = []
    for name, v in (("weight", p), ("data_size", data_size), ("loss", loss)):
        try:
            a = np.asarray(v, dtype=float).ravel()
        except (TypeError, ValueError):
            raise FitError(f"{name}: expected numbers", column=name) from None
        arrs.append(a)
    p, dsz, y = arrs
    if not (len(p) == len(dsz) == len(y)):
        raise FitError(f"weight, data_size, loss lengths differ: {len(p)}, {len(dsz)}, {len(y)}")
    for name, a, lo_ok in (("weight", p, False), ("data_size", dsz, False), ("loss", y, False)):
        bad = ~np.isfinite(a) | (a <= 0) if not lo_ok else ~np.isfinite(a)
        if name == "weight":
            bad |= a > 1
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a sampling ratio in (0, 1]" if name == "weight" else "a finite positive number"
            raise FitError(f"{name}, row {i}: expected {what}, got {a[i]!r}", column=name, row=i)
    if not (data_unit > 0):
        raise FitError(f"data_unit: expected a positive number, got {data_unit!r}")
    labels = (np.array([f"{v:g}" for v in dsz], dtype=object) if group is None
              else np.asarray(group, dtype=object).ravel().astype(str))
    if len(labels) != len(y):
        raise FitError(f"group: expected one label per row ({len(y)}), got {len(labels)}")
    for g in dict.fromkeys(labels):
        if len(np.unique(dsz[labels == g])) != 1:
            raise FitError(f"group {g!r} mixes data sizes {sorted(set(dsz[labels == g]))}")
    if len(y) < 6:
        raise FitError(f"law 'dpl' has 6 shared parameters but only {len(y)} points were given")
    dd = dsz / data_unit
    if high_resource is None:
        high = sorted({g for g in labels if dsz[labels == g][0] == dsz.max()})
    else:
        high = [high_resource] if isinstance(high_resource, str) else list(high_resource)
        unknown = [h for h in high if h not in set(labels)]
        if unknown:
            raise FitError(f"high_resource: unknown group(s) {unknown}; groups: "
                           f"{list(dict.fromkeys(labels))}")
    params, bias, diag = _estimate(p, dd, y, labels, high, gamma, refine)
    fit = DPLFit(law="dpl", params=params, n_points=len(y), bias=bias, data_unit=float(data_unit),
                 meta={"equation": "Chen et al. 2023 eq. 5, three-step estimation §3.2",
                       "gamma_fixed": gamma is not None, "refined": refine, **diag})
    if diag.get("refine_converged") is False:
        fit.warnings.append("the joint polish (refine) stopped before converging; the "
                            "parameters are its last iterate (meta['refine_converged'])")
    pred = fit.predict(p, dsz, bias=0.0) + np.array([bias[g] for g in labels])
    res = y - pred
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    fit.goodness = {"rmse": float(np.sqrt(np.mean(res**2))),
                    "r2": 1 - float(res @ res) / ss_tot if ss_tot > 0 else math.nan}
    if bootstrap:
        rng = np.random.default_rng(seed)
        samples = []
        for _ in range(int(bootstrap)):
            idx = np.concatenate([rng.choice(np.flatnonzero(labels == g), (labels == g).sum())
                                  for g in dict.fromkeys(labels)])
            try:
                pb, _, _ = _estimate(p[idx], dd[idx], y[idx], labels[idx], high, gamma, refine,
                                     refit=True)
            except FitError:
                continue
            samples.append([pb[k] for k in params])
        if samples:
            arr = np.array(samples)
            fit.intervals = {k: (float(np.percentile(arr[:, i], 2.5)),
                                 float(np.percentile(arr[:, i], 97.5)))
                             for i, k in enumerate(params)}
            fit.stderr = {k: float(np.std(arr[:, i], ddof=1)) for i, k in enumerate(params)}
        fit.meta["bootstrap"] = {"requested": int(bootstrap), "succeeded": len(samples)}
    return fit


def fit_from_table(df: Any, *, columns: str | Mapping[str, str] | None = None,
                   eval_set: str = "validation", n: float | None = None,
                   group_by: Sequence[str] = (), source: str | None = None,
                   drop_invalid: bool = False, **options: Any) -> DPLFit:
    """Fit the DPL to a table with columns ``pair``, ``weight`` (sampling ratio p),
    ``data_size`` (training examples of that pair) and ``loss``; or to the tidy table of
    docs/reference/metrics_schema.md (``metric``/``value``/``final``: final ``loss`` rows of ``eval_set``
    are used). Rows with weight 0 (pair not trained) are excluded and counted in the warnings.
    Groups are ``"pair@data_size"``, plus ``"/col=value"`` for each column in ``group_by``
    (e.g. ``group_by=["study"]`` when the same pair and size appear in several experiments with
    different partners, each with its own bias). A table with several model sizes ``n`` needs
    ``n=``. A NaN/inf/non-positive value or a weight outside [0, 1] raises naming the column and
    row; ``drop_invalid=True`` drops such rows instead and reports the count in the warnings.
    ``columns`` maps other names; ``options`` go to :func:`fit_dpl`.
    """
    df = apply_column_map(df, columns, source)
    dropped = 0
    if "loss" not in df.columns and {"metric", "value"} <= set(df.columns):
        df, dropped = final_losses(df, eval_set=eval_set, metric="loss", source=source,
                                   drop_invalid=drop_invalid)
        df = df.rename(columns={"value": "loss"})
    require_columns(df, ["pair", "weight", "data_size", "loss"], source)
    if drop_invalid:
        df, n_bad = drop_invalid_rows(df, ["data_size", "loss"], positive=["data_size", "loss"])
        w = pd.to_numeric(df["weight"], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(w) & (w >= 0) & (w <= 1)
        df, dropped = df[ok], dropped + n_bad + int((~ok).sum())
    if "n" in df.columns and df["n"].nunique() > 1:
        if n is None:
            raise FitError(f"{source + ': ' if source else ''}the table holds several model sizes "
                           f"{sorted(df['n'].unique().tolist())}; the DPL is per model: pass n=",
                           column="n")
        df = df[df["n"] == n]
    w = check_weights(df, "weight", source)
    zero = w == 0
    df = df[~zero]
    p = check_weights(df, "weight", source)
    dsz = check_finite_positive(df, "data_size", source)
    loss = check_finite_positive(df, "loss", source)
    group_by = [group_by] if isinstance(group_by, str) else list(group_by)
    require_columns(df, group_by, source)
    labels = [f"{a}@{b:g}" for a, b in zip(df["pair"].astype(str), dsz, strict=True)]
    for col in group_by:
        labels = [f"{lab}/{col}={v}" for lab, v in zip(labels, df[col].astype(str), strict=True)]
    fit = fit_dpl(p, dsz, loss, labels, **options)
    if zero.any():
        fit.warnings.append(f"excluded {int(zero.sum())} row(s) with weight 0 (pair not trained)")
    if dropped:
        fit.warnings.append(f"dropped {dropped} invalid row(s) (drop_invalid=True)")
        fit.meta["dropped_rows"] = dropped
    return fit


# -- optimal sampling ratios (eq. 7) -------------------------------------------------------------


def dpl_objective(ratios: Any, sizes: Any, preferences: Any = None,
                  law: DPLFit | None = None) -> float:
    """Σ_i r_i F_i(p_i, d_i) without biases (eq. 7; the biases do not move the optimum)."""
    law = law or CHEN_EQ6_PRESET
    p = np.asarray(ratios, dtype=float)
    d = np.asarray(sizes, dtype=float)
    r = np.full(len(p), 1.0 / len(p)) if preferences is None else np.asarray(preferences, float)
    return float(np.sum(r * law.predict(p, d, bias=0.0)))


def optimal_sampling_ratios(sizes: Sequence[float] | Mapping[str, float],
                            preferences: Sequence[float] | Mapping[str, float] | None = None,
                            law: DPLFit | None = None, *, min_ratio: float = 1e-6) -> np.ndarray:
    """p̂ = argmin_p Σ_i r_i F_i(p_i, d_i) on the simplex (Chen eq. 7).

    ``sizes``: training examples per direction (in examples; the law's ``data_unit`` converts);
    ``preferences`` r (default uniform; normalised to sum 1); ``law``: default the eq. 6 preset.
    Solved with SLSQP from several starts (uniform, proportional, temperature 5).
    """
    law = law or CHEN_EQ6_PRESET
    keys = list(sizes) if isinstance(sizes, Mapping) else None
    d = np.asarray(list(sizes.values()) if keys else sizes, dtype=float)
    if d.ndim != 1 or len(d) < 1 or not np.all(np.isfinite(d)) or np.any(d <= 0):
        raise ValueError(f"sizes: expected positive finite training-example counts, got {d}")
    if preferences is None:
        r = np.full(len(d), 1.0 / len(d))
    else:
        r = np.asarray([preferences[k] for k in keys] if (keys and isinstance(preferences, Mapping))
                       else preferences, dtype=float)
        if r.shape != d.shape or not np.all(np.isfinite(r)) or np.any(r < 0) or r.sum() <= 0:
            raise ValueError(f"preferences: expected {len(d)} non-negative weights, got {r}")
        r = r / r.sum()
    if len(d) == 1:
        return np.ones(1)

    def f(pv):
        return dpl_objective(pv, d, r, law)

    starts = [np.full(len(d), 1.0 / len(d)), d / d.sum(), temperature_weights(d, 5)]
    best = None
    for x0 in starts:
        res = minimize(f, x0, method="SLSQP", bounds=[(min_ratio, 1.0)] * len(d),
                       constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1.0}],
                       options={"ftol": 1e-14, "maxiter": 500})
        if converged(res) and (best is None or res.fun < best.fun):
            best = res
    if best is None:
        raise FitError("optimal_sampling_ratios: the simplex optimisation did not converge")
    pv = np.clip(best.x, 0, None)
    return pv / pv.sum()
