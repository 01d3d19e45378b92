"""Joint multilingual law (Fernandes et al. 2023 eq. 7) and effective parameters (eq. 9, 10).

    L_i(N; p) = β_{p,i} · N^(−α_i) + L∞^(i)

α_i and L∞^(i) are shared by all mixture weights p of pair i; one β per (pair, weight). Pairs are
independent, so each pair is one variable-projection problem with a single nonlinear parameter
(α_i) and ``#weights + 1`` linear ones, solved exactly.

Effective parameters (eq. 9): N_eff^(i,p) = (β_{1,i}/β_{p,i})^(1/α_i) · N; the effective fraction
(eq. 10): f_i(p) = N_eff/N = (β_{1,i}/β_{p,i})^(1/α_i), independent of N.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from fitting.data.tables import check_finite_positive, check_weights, require_columns
from fitting.laws.size.power import (
    ALPHA_BOUNDS,
    ALPHA_GRID,
    check_span,
    leave_largest_out,
    require_finite_params,
)
from fitting.laws.table_fits import note_dropped, pair_final_losses

__all__ = ["JointLawFit", "fit_joint_law", "beta_key", "prepare_points"]


def beta_key(pair: str, p: float) -> str:
    """Parameter name of β_{p,i}: ``beta[en-de,p=0.5]``."""
    return f"beta[{pair},p={float(p):g}]"


def _k(name: str, pair: str) -> str:
    return f"{name}[{pair}]"


def prepare_points(
    df: pd.DataFrame,
    *,
    loss_col: str | None = None,
    need: Sequence[str] = ("n", "weight"),
    source: str | None = None,
) -> pd.DataFrame:
    """Validated copy with columns pair, n, weight, loss (``loss`` taken from loss/value)."""
    if loss_col is None:
        loss_col = "loss" if "loss" in df.columns else "value"
    require_columns(df, [*need, loss_col], source)
    out = pd.DataFrame(index=df.index)
    out["pair"] = df["pair"].astype(str) if "pair" in df.columns else "all"
    for c in need:
        if c == "weight":
            out["weight"] = check_weights(df, "weight", source)
        else:
            out[c] = check_finite_positive(df, c, source)
    out["loss"] = check_finite_positive(df, loss_col, source)
    return out


@register_law("joint")
@dataclass
class JointLawFit(FitResult):
    """Fernandes eq. 7 for several pairs. Params ``alpha[pair]``, ``l_inf[pair]``, ``beta[pair,p=…]``.

    ``meta["converged"][pair]``: whether that pair's robust polish converged
    (:func:`fitting.core.engine.converged`; False comes with a warning). Refits that failed, those
    that did not converge included, are counted in ``meta["perturbation_failed"][pair]`` or
    ``meta["bootstrap_failed"][pair]`` and left out of ``stderr``, ``intervals`` and ``samples``.
    """

    pairs: list[str] | None = None
    weights: dict[str, list[float]] | None = None
    samples: dict[str, list[float]] | None = None
    backtest: dict[str, dict[str, float]] | None = None
    n_range: tuple[float, float] | None = None

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> JointLawFit:
        """``mnmt-fit fit --law joint``: eq. 7 fitted to the table's final losses."""
        fin, dropped = pair_final_losses(table, request)
        kw = request.fit_options()
        return note_dropped(fit_joint_law(fin, loss_col="loss", source=request.source, **kw),
                            dropped)

    @classmethod
    def _decode_extra(cls, name: str, value):
        if name == "n_range" and value is not None:
            return (float(value[0]), float(value[1]))
        return value

    def _beta(self, params: dict[str, float], pair: str, p: float) -> float:
        key = beta_key(pair, p)
        if key not in params:
            raise FitError(
                f"pair {pair!r} has no fitted β for weight p={p:g} (fitted weights: "
                f"{self.weights.get(pair) if self.weights else []}); use the eq. 11 law "
                "(fitting.laws.size.effective.fit_effective_law) to predict unseen weights",
                column="weight",
            )
        return params[key]

    def _predict(self, params: dict[str, float], n, p, pair: str) -> np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        pa = np.broadcast_to(np.asarray(p, dtype=np.float64), n.shape)
        out = np.empty(n.shape)
        for pv in np.unique(pa):
            m = pa == pv
            out[m] = self._beta(params, pair, pv) * n[m] ** -params[_k("alpha", pair)] + params[
                _k("l_inf", pair)
            ]
        return out

    def predict(self, n: ArrayLike, p: ArrayLike, pair: str | None = None) -> np.ndarray:
        """L_i(N; p) of eq. 7 for a fitted weight p."""
        pair = self._pair(pair)
        return self._predict(self.params, n, p, pair)

    def band(self, n: ArrayLike, p: ArrayLike, pair: str | None = None,
             level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of :meth:`predict` over the uncertainty samples, widened to contain
        the prediction itself (:mod:`fitting.core.uncertainty`)."""
        pair = self._pair(pair)
        return pair_band(lambda q: self._predict(q, n, p, pair), self.samples, pair, level,
                         estimate=self.params)

    def _pair(self, pair: str | None) -> str:
        return fitted_pair(self.pairs, pair, name_one=True)

    def effective_params(self, n: ArrayLike, p: ArrayLike, pair: str | None = None) -> np.ndarray:
        """N_eff^(i,p) = (β_{1,i}/β_{p,i})^(1/α_i)·N (Fernandes eq. 9)."""
        return self.fraction(p, pair) * np.asarray(n, dtype=np.float64)

    def fraction(self, p: ArrayLike, pair: str | None = None, params: dict | None = None) -> np.ndarray:
        """f_i(p) = (β_{1,i}/β_{p,i})^(1/α_i) (Fernandes eq. 10); needs p = 1 among the weights."""
        pair = self._pair(pair)
        params = self.params if params is None else params
        b1 = self._beta(params, pair, 1.0)
        a = params[_k("alpha", pair)]
        pa = np.atleast_1d(np.asarray(p, dtype=np.float64))
        return np.array([(b1 / self._beta(params, pair, pv)) ** (1.0 / a) for pv in pa])

    def fraction_samples(self, pair: str | None = None) -> dict[float, np.ndarray]:
        """f_i(p) evaluated on each uncertainty sample, per fitted weight (for error bars)."""
        pair = self._pair(pair)
        if not self.samples:
            raise FitError("this fit has no uncertainty samples")
        ws = [w for w in (self.weights or {}).get(pair, []) if w > 0]
        own = pair_samples(self.samples, pair)
        m = len(next(iter(own.values())))
        out = {}
        for w in ws:
            vals = []
            for j in range(m):
                q = {k: v[j] for k, v in own.items()}
                vals.append(float(self.fraction(w, pair, q)[0]))
            out[w] = np.array(vals)
        return out


def _fit_pair(n, p, y, *, loss, f_scale, alpha0=None, alpha_bounds=ALPHA_BOUNDS, refit=False):
    """One pair's (α, β per weight, L∞, f_scale, engine result); ``refit`` (or ``alpha0``
    given): FitError unless the polish converged."""
    ws = np.unique(p)
    n_ref = float(np.exp(np.mean(np.log(n))))
    u = n / n_ref
    logu = np.log(u)
    onehot = (p[:, None] == ws[None, :]).astype(np.float64)

    def design(theta):
        return np.column_stack([onehot * np.power(u, -theta[0])[:, None], np.ones_like(u)])

    def design_jac(theta):
        d = onehot * (-logu * np.power(u, -theta[0]))[:, None]
        return [np.column_stack([d, np.zeros_like(u)])]

    model = VarproModel(design, theta_bounds=([alpha_bounds[0]], [alpha_bounds[1]]),
                        coef_nonneg=True, design_jac=design_jac)
    res = varpro_fit(
        model, y,
        theta_grid=[ALPHA_GRID[(ALPHA_GRID > alpha_bounds[0]) & (ALPHA_GRID < alpha_bounds[1])]],
        theta0=None if alpha0 is None else [alpha0],
        options=VarproOptions(loss=loss, f_scale=f_scale,
                              require_convergence=refit or alpha0 is not None),
    )
    a = float(res.theta[0])
    betas = {float(w): float(res.coef[j] * n_ref**a) for j, w in enumerate(ws)}
    return a, betas, float(res.coef[-1]), res.f_scale, res


def fit_joint_law(
    df: pd.DataFrame,
    *,
    loss_col: str | None = None,
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
    backtest: BacktestOptions | None = BacktestOptions(),
    source: str | None = None,
) -> JointLawFit:
    """Fit Fernandes eq. 7 to final losses (columns ``pair``, ``weight``, ``n``, ``loss``/``value``).

    Rows with weight 0 (zero-shot pairs, outside the law: f(0) = 0) are excluded and counted in
    ``meta["excluded_zero_weight"]``. Each pair needs at least #weights + 2 points and 3 sizes.
    The options objects are :func:`fitting.laws.size.power.fit_power_law`'s (``method``
    ``"both"`` is not offered here).
    """
    pts = prepare_points(df, loss_col=loss_col, source=source)
    zero = pts["weight"] <= 0
    pts = pts[~zero]
    params: dict[str, float] = {}
    warnings: list[str] = []
    good_all: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    bts: dict[str, dict[str, float]] = {}
    weights: dict[str, list[float]] = {}
    meta: dict = {**options_meta(fit_options, uncertainty),
                  "excluded_zero_weight": int(zero.sum()), "f_scale": {}}
    pairs = sorted(pts["pair"].unique())
    if not pairs:
        raise FitError("no rows with a positive weight to fit the joint law to", column="weight")
    all_y, all_pred = [], []
    for pair in pairs:
        sub = pts[pts["pair"] == pair]
        n, p, y = (sub[c].to_numpy(dtype=np.float64) for c in ("n", "weight", "loss"))
        ws = np.unique(p)
        k = ws.size + 2
        if y.size < k or np.unique(n).size < 3:
            raise FitError(
                f"law 'joint', pair {pair!r}: {k} free parameters ({ws.size} β, α, L∞) but only "
                f"{y.size} points over {np.unique(n).size} sizes; need ≥ {k} points and ≥ 3 sizes",
                column="n",
            )
        for w in ws:
            if np.unique(n[p == w]).size < 2:
                warnings.append(f"pair {pair!r}, weight {w:g}: a single size; its β is not checked "
                                "by any other point")
        check_span(n, "n", "joint")
        a, betas, linf, fs, res = _fit_pair(n, p, y, loss=fit_options.robust_loss,
                                            f_scale=fit_options.f_scale)
        meta.setdefault("converged", {})[pair] = res.success
        if (w_conv := convergence_warning(res, f"pair {pair!r}")):
            warnings.append(w_conv)
        meta["f_scale"][pair] = fs
        weights[pair] = [float(w) for w in ws]
        params[_k("alpha", pair)] = a
        params[_k("l_inf", pair)] = linf
        for w, b in betas.items():
            params[beta_key(pair, w)] = b
        require_finite_params(params, "joint")
        pred = np.array([betas[float(pi)] for pi in p]) * n**-a + linf
        g = goodness_of_fit(y, pred, k)
        for name, v in g.items():
            good_all[f"{name}[{pair}]"] = v
        all_y.append(y)
        all_pred.append(pred)

        def pack(a_, betas_, linf_, pair=pair):
            d = {_k("alpha", pair): a_, _k("l_inf", pair): linf_}
            d.update({beta_key(pair, w): b for w, b in betas_.items()})
            return d

        def refit_y(y_new, n=n, p=p, fs=fs, a0=a, pack=pack):
            return pack(*_fit_pair(n, p, y_new, loss=fit_options.robust_loss, f_scale=fs,
                                   alpha0=a0)[:3])

        def refit_idx(idx, n=n, p=p, y=y, fs=fs, ws=ws, pack=pack):
            if np.unique(p[idx]).size < ws.size or np.unique(n[idx]).size < 3:
                raise FitError("resample lost a weight or has < 3 sizes")
            return pack(*_fit_pair(n[idx], p[idx], y[idx], loss=fit_options.robust_loss, f_scale=fs,
                                   refit=True)[:3])

        if uncertainty.method in ("perturbation", "both"):
            s, failed = perturbation_samples(refit_y, y, n_refits=uncertainty.n_refits,
                                             sigma_rel=uncertainty.sigma_rel,
                                             seed=uncertainty.seed)
            meta.setdefault("perturbation_failed", {})[pair] = failed
        elif uncertainty.method == "bootstrap":
            s, failed = bootstrap_samples(refit_idx, y.size, n_boot=uncertainty.n_refits,
                                          seed=uncertainty.seed)
            meta.setdefault("bootstrap_failed", {})[pair] = failed
        elif uncertainty.method in (None, "none"):
            s = None
        else:
            raise FitError("uncertainty must be perturbation, bootstrap or None, "
                           f"got {uncertainty.method!r}")
        if s is not None:
            samples.update({kk: v.tolist() for kk, v in s.items()})

        if backtest:
            def refit_mask(mask, n=n, p=p, y=y, fs=fs):
                a_, b_, l_, _, _ = _fit_pair(n[mask], p[mask], y[mask],
                                             loss=fit_options.robust_loss,
                                             f_scale=fs, refit=True)
                ph = p[~mask]

                def pred_fn(xx):
                    return np.array([b_.get(float(pi), np.nan) for pi in ph]) * xx**-a_ + l_

                return pred_fn

            held_ok = all(np.unique(n[p == w]).size >= 2 for w in ws)
            if held_ok:
                bt, w_ = leave_largest_out(n, y, refit_mask, backtest.noise_level,
                                           noise_rel=uncertainty.sigma_rel,
                                           tolerance=backtest.tolerance, groups=p)
                if bt is not None:
                    bts[pair] = bt
                if w_:
                    warnings.append(f"pair {pair!r}: {w_}")
    y_all, p_all = np.concatenate(all_y), np.concatenate(all_pred)
    good = goodness_of_fit(y_all, p_all, len(params))
    good.update(good_all)
    stderr = intervals = None
    if samples:
        stderr, intervals = summarize_samples({k: np.array(v) for k, v in samples.items()},
                                              uncertainty.level,
                                              estimate=params)
    return JointLawFit(
        law="joint", params=params, stderr=stderr, intervals=intervals, goodness=good,
        n_points=int(y_all.size), warnings=warnings, meta=meta, pairs=pairs, weights=weights,
        samples=samples or None, backtest=bts or None,
        n_range=(float(pts["n"].min()), float(pts["n"].max())),
    )
