"""The law of unseen weights (Fernandes et al. 2023 eq. 11) with f̂ of eq. 12 or eq. 13:

    L_i(N; p) = β_{1,i} · (f̂_i(p) · N)^(−α_i) + L∞^(i)                       (eq. 11)
    f̂_i(p)   = p + c1 · p^c2 · (1 − p)^c3   (eq. 12),   c1 · (p − 1) + 1   (eq. 13)

f̂ approximates the effective fraction of parameters (eq. 10); the law predicts pair i's loss at
any weight p > 0 and size N. :func:`fit_multilingual_law` fits it per pair by variable
projection (α and the c's searched, β_1 and L∞ exact) with f̂ constrained to be a fraction, and
says when the data ask for an f̂ that is none (``identification[pair]``, a warning): the
constraints and the identification test are in docs/reference/laws.md, "Unseen weights".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fitting.core.base import FitError, FitResult, TableRequest, fitted_pair, register_law
from fitting.core.engine import (
    VarproModel,
    VarproOptions,
    convergence_warning,
    goodness_of_fit,
    varpro_fit,
)
from fitting.core.options import BacktestOptions, FitOptions, UncertaintyOptions, options_meta
from fitting.core.uncertainty import (
    bootstrap_samples,
    pair_band,
    pair_samples,
    perturbation_samples,
    summarize_samples,
)
from fitting.laws.size.joint import prepare_points
from fitting.laws.size.power import check_span, leave_largest_out, require_finite_params
from fitting.laws.table_fits import note_dropped, pair_final_losses

__all__ = ["MultilingualLawFit", "fit_multilingual_law", "f_hat_eq12", "f_hat_eq13",
           "f_hat_violation"]

_ALPHA_STARTS = np.geomspace(0.05, 1.5, 8)
# 95 % point of χ²(1): the largest cost of f̂'s constraints, in noise variances, that the data allow
_CHI2_1_95 = 3.84
# where f̂'s shape is checked: uniform, and dense towards both ends (where p^c2, (1 − p)^c3 bend)
_SHAPE_GRID = np.unique(np.concatenate([np.linspace(0.0, 1.0, 201), np.geomspace(1e-6, 0.05, 40),
                                        1.0 - np.geomspace(1e-6, 0.05, 40)]))
# weight of the monotonicity penalty, per unit decrease of f̂, relative to the spread of the losses
_PENALTY_WEIGHT = 100.0


def f_hat_eq12(p: ArrayLike, c1: float, c2: float, c3: float) -> np.ndarray:
    """f̂(p) = p + c1·p^c2·(1−p)^c3 (Fernandes eq. 12); f̂(1) = 1, f̂(0) = 0."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return p + c1 * np.power(p, c2) * np.power(np.clip(1.0 - p, 0.0, None), c3)


def f_hat_eq13(p: ArrayLike, c1: float) -> np.ndarray:
    """f̂(p) = c1·(p − 1) + 1 for p > 0 (Fernandes eq. 13, the linear approximation); f̂(0) = 0
    (an untrained pair has no effective parameters), so the line holds on (0, 1]."""
    p = np.asarray(p, dtype=np.float64)
    return np.where(p > 0, c1 * (p - 1.0) + 1.0, 0.0)


_FORMS = {
    "eq12": (("c1", "c2", "c3"), f_hat_eq12),
    "eq13": (("c1",), f_hat_eq13),
}


def f_hat_violation(form: str, coeffs: ArrayLike) -> float:
    """How far f̂ of ``form`` with ``coeffs`` is from a fraction: the largest of −min f̂,
    max f̂ − 1 and the largest decrease of f̂ over [0, 1] (0 when f̂ is a valid fraction)."""
    f = _FORMS[form][1](_SHAPE_GRID, *np.asarray(coeffs, dtype=np.float64))
    if not np.all(np.isfinite(f)):
        return float("inf")
    drop = float(np.max(np.maximum.accumulate(f) - f))
    return max(0.0, float(-f.min()), float(f.max() - 1.0), drop)


def _k(name: str, pair: str) -> str:
    return f"{name}[{pair}]"


@register_law("multilingual")
@dataclass
class MultilingualLawFit(FitResult):
    """Eq. 11 per pair. Params ``alpha[pair]``, ``beta1[pair]``, ``l_inf[pair]``, ``c1[pair]``…

    ``meta["converged"][pair]``: whether that pair's robust polish converged
    (:func:`fitting.core.engine.converged`; False comes with a warning). Refits that failed, those
    that did not converge included, are counted in ``meta["refits_failed"][pair]`` and left out of
    ``stderr``, ``intervals`` and ``samples``.
    """

    form: str = "eq12"
    pairs: list[str] | None = None
    samples: dict[str, list[float]] | None = None
    n_range: tuple[float, float] | None = None
    weight_range: dict[str, list[float]] | None = None
    backtest: dict[str, dict] | None = None
    # pair -> {"identified": constraint_cost ≤ 3.84 (χ²(1), 95 %), "violation": how far the
    # unconstrained best f̂ leaves a fraction (f_hat_violation), "constraint_cost": (SSR of the
    # constrained fit − SSR without the constraints) / σ² with σ² = max(SSR/dof, (1 % of the mean
    # loss)²), "weights": distinct positive weights, "needed": the fewest that fit f̂,
    # "exactly_determined": weights == needed (f̂ meets every f(p) point, its form untested),
    # "reason": why not identified ("" when identified)}
    identification: dict[str, dict] | None = None

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> MultilingualLawFit:
        """``mnmt-fit fit --law multilingual``: eq. 11 (f̂ of ``request.form``, eq12 by default)
        fitted to the table's final losses."""
        fin, dropped = pair_final_losses(table, request)
        kw = request.fit_options()
        return note_dropped(fit_multilingual_law(fin, form=request.form or "eq12",
                                                 loss_col="loss", source=request.source, **kw),
                            dropped)

    @property
    def identified(self) -> bool:
        """Whether every pair's f̂ is identified (see ``identification``)."""
        return all(d.get("identified", True) for d in (self.identification or {}).values())

    def not_identified(self) -> dict[str, str]:
        """pair -> reason, for the pairs whose f̂ is not identified."""
        return {pair: d.get("reason", "") for pair, d in (self.identification or {}).items()
                if not d.get("identified", True)}

    @classmethod
    def _decode_extra(cls, name: str, value):
        if name == "n_range" and value is not None:
            return (float(value[0]), float(value[1]))
        return value

    def _pair(self, pair: str | None) -> str:
        return fitted_pair(self.pairs, pair)

    def f_hat(self, p: ArrayLike, pair: str | None = None, params: dict | None = None) -> np.ndarray:
        """f̂_i(p) of eq. 12 or eq. 13 for this pair."""
        pair = self._pair(pair)
        q = self.params if params is None else params
        names, fn = _FORMS[self.form]
        return fn(p, *[q[_k(c, pair)] for c in names])

    def _predict(self, q: dict, n, p, pair: str) -> np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        p = np.asarray(p, dtype=np.float64)
        f = np.clip(self.f_hat(p, pair, q), 1e-300, None)
        with np.errstate(over="ignore", divide="ignore"):
            out = q[_k("beta1", pair)] * np.power(f * n, -q[_k("alpha", pair)]) + q[_k("l_inf", pair)]
        return np.where(p > 0, out, np.inf)

    def predict(self, n: ArrayLike, p: ArrayLike, pair: str | None = None) -> np.ndarray:
        """L_i(N; p) of eq. 11 for any weight p ∈ (0, 1] and size N (inf at p = 0)."""
        return self._predict(self.params, n, p, self._pair(pair))

    def band(self, n: ArrayLike, p: ArrayLike, pair: str | None = None,
             level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of :meth:`predict` over the uncertainty samples, widened to contain
        the prediction itself (:mod:`fitting.core.uncertainty`)."""
        pair = self._pair(pair)
        return pair_band(lambda q: self._predict(q, n, p, pair), self.samples, pair, level,
                         estimate=self.params)

    def predict_samples(self, n: ArrayLike, p: ArrayLike, pair: str | None = None) -> np.ndarray:
        """Predictions on every uncertainty sample (rows), for custom bands."""
        pair = self._pair(pair)
        if not self.samples:
            raise FitError("this fit has no uncertainty samples")
        own = pair_samples(self.samples, pair)
        m = len(next(iter(own.values())))
        return np.stack([self._predict({k: v[j] for k, v in own.items()}, n, p, pair)
                         for j in range(m)])


def _fit_pair(n, p, y, *, form, loss, f_scale, theta0=None, constrained=True, refit=False,
              report: dict | None = None):
    """Eq. 11 for one pair. ``constrained``: f̂ a fraction (see the module docstring); else f̂
    only positive at the fitted weights (the diagnostic fit behind ``identification``).
    ``refit`` (or ``theta0`` given): FitError unless the polish converged; ``report``: a dict
    given ``result``, the engine's result."""
    names, fn = _FORMS[form]
    n_ref = float(np.exp(np.mean(np.log(n))))
    u = n / n_ref

    def design(theta):
        f = np.clip(fn(p, *theta[1:]), 1e-12, None)
        return np.column_stack([np.power(f * u, -theta[0]), np.ones_like(u)])

    penalty = None
    if form == "eq12":
        lo, hi = [1e-4, -0.95, 0.05, 0.05], [5.0, 50.0, 8.0, 8.0]
        grid = [_ALPHA_STARTS, [-0.5, 0.0, 0.3, 1.0, 3.0], [0.5, 1.0, 2.0], [0.5, 1.0, 2.0]]
        if constrained:
            weight = _PENALTY_WEIGHT * max(float(np.ptp(y)), 1e-9)

            def penalty(theta):  # any decrease of f̂ over [0, 1]; with f̂(0) = 0 and f̂(1) = 1
                c1, c2, c3 = theta[1:]  # this also keeps f̂ in [0, 1]
                with np.errstate(invalid="ignore", over="ignore"):
                    f = np.nan_to_num(fn(_SHAPE_GRID, c1, c2, c3), nan=0.0)
                # f̂' → −∞ at p = 1 when c1 > 0 and c3 < 1, and at p = 0 when c1 < 0 and c2 < 1
                ends = [max(c1, 0.0) * max(1.0 - c3, 0.0), max(-c1, 0.0) * max(1.0 - c2, 0.0)]
                return weight * np.concatenate([np.clip(-np.diff(f), 0.0, None), ends])
    else:
        pmin = float(np.min(p))
        upper = 1.0 if constrained else (0.999 / (1.0 - pmin) if pmin < 1 else 1.0)
        lo, hi = [1e-4, 0.0], [5.0, upper]
        grid = [_ALPHA_STARTS, [0.2, 0.5, 0.8, 0.95]]
    model = VarproModel(design, theta_bounds=(lo, hi), coef_nonneg=True, theta_penalty=penalty)
    res = varpro_fit(model, y, theta_grid=grid, theta0=theta0,
                     options=VarproOptions(loss=loss, f_scale=f_scale, n_refine=4,
                                           require_convergence=refit or theta0 is not None))
    if report is not None:
        report["result"] = res
    t = res.theta
    q = {"alpha": float(t[0]), "beta1": float(res.coef[0] * n_ref ** t[0]),
         "l_inf": float(res.coef[1])}
    q.update({c: float(v) for c, v in zip(names, t[1:], strict=True)})
    return q, res.f_scale, t


def fit_multilingual_law(
    df: pd.DataFrame,
    *,
    form: str = "eq12",
    loss_col: str | None = None,
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
    backtest: BacktestOptions | None = BacktestOptions(),
    source: str | None = None,
) -> MultilingualLawFit:
    """Fit eq. 11 with f̂ of eq. 12 (``form="eq12"``) or eq. 13 (``"eq13"``) per pair.

    Input: final losses with columns ``pair``, ``weight``, ``n``, ``loss``/``value``. Rows with
    weight 0 are excluded (count in ``meta["excluded_zero_weight"]``). With ≥ 4 sizes each pair
    is also refitted without its largest size and predicts it (``backtest[pair]``, worst weight;
    a warning when the error exceeds ``backtest.tolerance`` × the noise level, as in
    :func:`fitting.laws.size.power.fit_power_law`, whose options objects these are).
    """
    if form not in _FORMS:
        raise FitError(f"form must be one of {sorted(_FORMS)}, got {form!r}")
    pts = prepare_points(df, loss_col=loss_col, source=source)
    zero = pts["weight"] <= 0
    pts = pts[~zero]
    names = _FORMS[form][0]
    k = 3 + len(names)
    params: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    warnings: list[str] = []
    meta: dict = {"form": form, **options_meta(fit_options, uncertainty),
                  "excluded_zero_weight": int(zero.sum()), "f_scale": {}}
    good: dict[str, float] = {}
    ys, preds = [], []
    pairs = sorted(pts["pair"].unique())
    if not pairs:
        raise FitError("no rows with a positive weight", column="weight")
    wr: dict[str, list[float]] = {}
    bts: dict[str, dict] = {}
    ident: dict[str, dict] = {}
    for pair in pairs:
        sub = pts[pts["pair"] == pair]
        n, p, y = (sub[c].to_numpy(dtype=np.float64) for c in ("n", "weight", "loss"))
        n_sizes, n_w = np.unique(n).size, np.unique(p).size
        # with one size, α is identified only through f̂(p)^−α: one more weight is needed
        need_w = len(names) + (1 if n_sizes > 1 else 2)
        if y.size < k + 1 or n_w < need_w:
            raise FitError(
                f"law 'multilingual' ({form}), pair {pair!r}: {k} free parameters need more than "
                f"{k} points and ≥ {need_w} distinct weights; got {y.size} points, "
                f"{n_sizes} sizes, {n_w} weights", column="weight")
        if n_sizes == 1:
            warnings.append(f"pair {pair!r}: a single model size; β1 absorbs N^−α and the law "
                            "predicts unseen weights at this size only")
        check_span(n, "n", "multilingual")
        main: dict = {}
        q, fs, theta = _fit_pair(n, p, y, form=form, loss=fit_options.robust_loss,
                                 f_scale=fit_options.f_scale,
                                 report=main)
        meta.setdefault("converged", {})[pair] = main["result"].success
        if (w_conv := convergence_warning(main["result"], f"pair {pair!r}")):
            warnings.append(w_conv)
        require_finite_params(q, "multilingual")
        meta["f_scale"][pair] = fs
        ident[pair] = _identification(n, p, y, form, fit_options.robust_loss, fs, n_w, need_w, q,
                                      uncertainty.sigma_rel)
        if not ident[pair]["identified"]:
            warnings.append(f"pair {pair!r}: f̂ ({form}) not identified: {ident[pair]['reason']}")
        wr[pair] = [float(p.min()), float(p.max())]
        params.update({_k(kk, pair): v for kk, v in q.items()})
        pred = MultilingualLawFit(law="multilingual", params=params, form=form,
                                  pairs=[pair]).predict(n, p, pair)
        g = goodness_of_fit(y, pred, k)
        good.update({f"{kk}[{pair}]": v for kk, v in g.items()})
        ys.append(y)
        preds.append(pred)

        def refit_y(y_new, n=n, p=p, fs=fs, theta=theta, pair=pair):
            qq, _, _ = _fit_pair(n, p, y_new, form=form, loss=fit_options.robust_loss, f_scale=fs,
                                 theta0=theta)
            return {_k(kk, pair): v for kk, v in qq.items()}

        def refit_idx(idx, n=n, p=p, y=y, fs=fs, theta=theta, pair=pair, need_w=need_w):
            if np.unique(p[idx]).size < need_w:
                raise FitError("resample lacks weights")
            qq, _, _ = _fit_pair(n[idx], p[idx], y[idx], form=form, loss=fit_options.robust_loss,
                                 f_scale=fs, theta0=theta)
            return {_k(kk, pair): v for kk, v in qq.items()}

        if uncertainty.method in ("perturbation", "both"):
            s, failed = perturbation_samples(refit_y, y, n_refits=uncertainty.n_refits,
                                             sigma_rel=uncertainty.sigma_rel,
                                             seed=uncertainty.seed)
        elif uncertainty.method == "bootstrap":
            s, failed = bootstrap_samples(refit_idx, y.size, n_boot=uncertainty.n_refits,
                                          seed=uncertainty.seed)
        elif uncertainty.method in (None, "none"):
            s, failed = None, 0
        else:
            raise FitError("uncertainty must be perturbation, bootstrap or None, "
                           f"got {uncertainty.method!r}")
        meta.setdefault("refits_failed", {})[pair] = failed
        if s is not None:
            samples.update({kk: v.tolist() for kk, v in s.items()})
        if backtest:

            def refit_mask(mask, n=n, p=p, y=y, fs=fs):
                qq, _, _ = _fit_pair(n[mask], p[mask], y[mask], form=form,
                                     loss=fit_options.robust_loss,
                                     f_scale=fs, refit=True)
                ph = p[~mask]
                f = np.clip(_FORMS[form][1](ph, *[qq[c] for c in names]), 1e-300, None)
                return lambda xx: qq["beta1"] * (f * xx) ** -qq["alpha"] + qq["l_inf"]

            bt, w_ = leave_largest_out(n, y, refit_mask, backtest.noise_level,
                                       noise_rel=uncertainty.sigma_rel,
                                       tolerance=backtest.tolerance, groups=p)
            if bt is not None:
                bts[pair] = bt
            if w_:
                warnings.append(f"pair {pair!r}: {w_}")
    y_all, p_all = np.concatenate(ys), np.concatenate(preds)
    good = {**goodness_of_fit(y_all, p_all, len(params)), **good}
    stderr = intervals = None
    if samples:
        stderr, intervals = summarize_samples({kk: np.array(v) for kk, v in samples.items()},
                                              uncertainty.level,
                                              estimate=params)
    return MultilingualLawFit(
        law="multilingual", params=params, stderr=stderr, intervals=intervals, goodness=good,
        n_points=int(y_all.size), warnings=warnings, meta=meta, form=form, pairs=pairs,
        samples=samples or None, n_range=(float(pts["n"].min()), float(pts["n"].max())),
        weight_range=wr, backtest=bts or None, identification=ident,
    )


def _identification(n, p, y, form, loss, f_scale, n_w: int, need_w: int, constrained: dict,
                    sigma_rel: float) -> dict:
    """Whether the data allow a physical f̂ (see MultilingualLawFit.identification).

    The constrained fit is compared with the unconstrained one by their sums of squared
    residuals: f̂ is identified when the constraints cost less than the 95 % point of χ²(1)
    (3.84) in units of the noise variance, σ² = max(SSR_free / dof, (sigma_rel · mean loss)²),
    the floor being the 1 % seed noise of Fernandes et al. (footnote 5).
    """
    names = _FORMS[form][0]

    def ssr(q: dict) -> float:
        f = np.clip(_FORMS[form][1](p, *[q[c] for c in names]), 1e-300, None)
        return float(np.sum((q["beta1"] * (f * n) ** -q["alpha"] + q["l_inf"] - y) ** 2))

    try:
        free, _, _ = _fit_pair(n, p, y, form=form, loss=loss, f_scale=f_scale, constrained=False)
    except FitError:
        free = constrained
    violation = f_hat_violation(form, [free[c] for c in names])
    ssr_free = min(ssr(free), ssr(constrained))
    dof = max(y.size - 3 - len(names), 1)
    sigma2 = max(ssr_free / dof, (sigma_rel * float(np.mean(y))) ** 2)
    cost = (ssr(constrained) - ssr_free) / sigma2
    ok = cost <= _CHI2_1_95
    reason = "" if ok else (
        f"the data ask for an f̂ that is no fraction (without the constraints it leaves [0, 1] or "
        f"decreases by {violation:.3g}; keeping it a fraction raises the squared residuals by "
        f"{cost:.3g} noise variances, more than {_CHI2_1_95}); the frontier, recommendation and "
        "eq. 11 predictions drawn from it are not determined by the data")
    return {"identified": bool(ok), "violation": float(violation), "constraint_cost": float(cost),
            "weights": int(n_w), "needed": int(need_w), "exactly_determined": bool(n_w == need_w),
            "reason": reason}


def simplex_grid(k: int, step: float) -> np.ndarray:
    """All weight vectors on the K-simplex with coordinates multiple of ``step`` (incl. zeros)."""
    m = int(round(1.0 / step))
    pts = [c for c in itertools.product(range(m + 1), repeat=k - 1) if sum(c) <= m]
    return np.array([[*c, m - sum(c)] for c in pts], dtype=np.float64) / m
