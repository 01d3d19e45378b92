"""Encoder/decoder bivariate law and optimal allocation (Ghorbani et al. 2021).

    L(N_e, N_d) = α · (N̄_e/N_e)^p_e · (N̄_d/N_d)^p_d + L∞                        (eq. 2)
    N_e* = p_e/(p_e+p_d)·B,  N_d* = p_d/(p_e+p_d)·B                              (eq. 3)
    L_opt(B) = α*·B^−(p_e+p_d) + L∞,
        α* = α·(N̄_e(p_e+p_d)/p_e)^p_e·(N̄_d(p_e+p_d)/p_d)^p_d                      (eq. 4)

With a fixed decoder fraction r = N_d/B the law is α#·B^−(p_e+p_d) + L∞ with
α# = α·N̄_e^p_e·N̄_d^p_d·(1−r)^−p_e·r^−p_d; α#/α* is the multiplicative penalty of Fig. 6 (left)
and (α# − α*)·B^−(p_e+p_d) the additive one (Fig. 6 right).

α and L∞ are linear for fixed exponents (variable projection); p_e, p_d from a grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fitting.core.base import FitError, FitResult, TableRequest, register_law
from fitting.core.engine import (
    VarproModel,
    VarproOptions,
    convergence_warning,
    goodness_of_fit,
    varpro_fit,
)
from fitting.core.options import BacktestOptions, FitOptions, UncertaintyOptions, options_meta
from fitting.core.uncertainty import (
    band_from_samples,
    bootstrap_samples,
    perturbation_samples,
    summarize_samples,
)
from fitting.data.tables import require_columns
from fitting.laws.size.power import (
    as_positive_array,
    check_span,
    leave_largest_out,
    require_finite_params,
)
from fitting.laws.table_fits import note_dropped, pair_final_losses

__all__ = ["BivariateLawFit", "fit_bivariate_law"]

_P_GRID = np.geomspace(0.02, 1.5, 12)


@register_law("bivariate")
@dataclass
class BivariateLawFit(FitResult):
    """Ghorbani eq. 2. Params ``alpha``, ``p_e``, ``p_d``, ``l_inf``; normalisers in ``n_e_bar``/``n_d_bar``.

    ``meta["converged"]``: whether the fit's robust polish converged
    (:func:`fitting.core.engine.converged`; False comes with a warning). ``meta["refits_failed"]``:
    refits that failed, those that did not converge included; left out of ``stderr``,
    ``intervals`` and ``samples``.
    """

    n_e_bar: float = 1.0
    n_d_bar: float = 1.0
    samples: dict[str, list[float]] | None = None
    backtest: dict[str, float] | None = None

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> BivariateLawFit:
        """``mnmt-fit fit --law bivariate``: eq. 2 fitted to the final losses' ``n_enc``,
        ``n_dec`` and ``loss``."""
        used = ("n_enc", "n_dec", "loss")
        fin, dropped = pair_final_losses(table, request, used)
        kw = request.fit_options()
        require_columns(fin, list(used), request.source)
        return note_dropped(fit_bivariate_law(fin["n_enc"].to_numpy(float),
                                              fin["n_dec"].to_numpy(float),
                                              fin["loss"].to_numpy(float), **kw), dropped)

    def _pred(self, q: dict, n_enc, n_dec) -> np.ndarray:
        ne = np.asarray(n_enc, dtype=np.float64)
        nd = np.asarray(n_dec, dtype=np.float64)
        return q["alpha"] * (self.n_e_bar / ne) ** q["p_e"] * (self.n_d_bar / nd) ** q["p_d"] + q[
            "l_inf"]

    def predict(self, n_enc: ArrayLike, n_dec: ArrayLike) -> np.ndarray:
        """Loss at encoder/decoder non-embedding sizes (eq. 2)."""
        return self._pred(self.params, n_enc, n_dec)

    def band(self, n_enc: ArrayLike, n_dec: ArrayLike,
             level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of :meth:`predict` over the uncertainty samples, widened to contain
        the prediction itself (:mod:`fitting.core.uncertainty`)."""
        if not self.samples:
            raise FitError("this fit has no uncertainty samples")
        return band_from_samples(lambda q: self._pred(q, n_enc, n_dec), self.samples, level,
                                 estimate=self.params)

    def optimal_allocation(self, budget: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(N_e*, N_d*) for a total budget B (eq. 3)."""
        pe, pd = self.params["p_e"], self.params["p_d"]
        b = np.asarray(budget, dtype=np.float64)
        return pe / (pe + pd) * b, pd / (pe + pd) * b

    def optimal_decoder_fraction(self) -> float:
        """r* = N_d*/B = p_d/(p_e+p_d)."""
        return self.params["p_d"] / (self.params["p_e"] + self.params["p_d"])

    def alpha_star(self) -> float:
        """α* of eq. 4."""
        q = self.params
        pe, pd, s = q["p_e"], q["p_d"], q["p_e"] + q["p_d"]
        return q["alpha"] * (self.n_e_bar * s / pe) ** pe * (self.n_d_bar * s / pd) ** pd

    def optimal_law(self, budget: ArrayLike) -> np.ndarray:
        """L_opt(B) = α*·B^−(p_e+p_d) + L∞ (eq. 4)."""
        q = self.params
        return self.alpha_star() * np.asarray(budget, dtype=np.float64) ** -(q["p_e"] + q["p_d"]) + q[
            "l_inf"]

    def alpha_sharp(self, decoder_fraction: ArrayLike) -> np.ndarray:
        """α# for a fixed decoder fraction r = N_d/B (proportional scaling)."""
        q = self.params
        r = np.asarray(decoder_fraction, dtype=np.float64)
        if np.any((r <= 0) | (r >= 1)):
            raise FitError("decoder fraction must lie in (0, 1)", column="decoder_fraction")
        return (q["alpha"] * self.n_e_bar ** q["p_e"] * self.n_d_bar ** q["p_d"]
                * (1 - r) ** -q["p_e"] * r ** -q["p_d"])

    def penalty(self, decoder_fraction: ArrayLike) -> np.ndarray:
        """Multiplicative penalty α#/α* ≥ 1 of a fixed N_d/N ratio (Ghorbani Fig. 6 left)."""
        return self.alpha_sharp(decoder_fraction) / self.alpha_star()

    def additive_penalty(self, decoder_fraction: ArrayLike, budget: float) -> np.ndarray:
        """L̂ − L̂_opt at budget B for a fixed decoder fraction (Ghorbani Fig. 6 right)."""
        s = self.params["p_e"] + self.params["p_d"]
        return (self.alpha_sharp(decoder_fraction) - self.alpha_star()) * float(budget) ** -s


def fit_bivariate_law(
    n_enc: Sequence[float] | np.ndarray,
    n_dec: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    *,
    n_e_bar: float | None = None,
    n_d_bar: float | None = None,
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
    backtest: BacktestOptions | None = BacktestOptions(),
) -> BivariateLawFit:
    """Fit Ghorbani eq. 2 to (N_e, N_d, loss) points.

    ``n_e_bar``/``n_d_bar`` are the normalisers (Ghorbani: the 6L-6L baseline's sizes); default:
    geometric means of the data. Needs ≥ 5 points with both N_e and N_d varying. Backtest:
    refit without the largest total size N_e + N_d (when ≥ 6 points remain) and predict it.
    The options objects are :func:`fitting.laws.size.power.fit_power_law`'s.
    """
    ne = as_positive_array(n_enc, "n_enc")
    nd = as_positive_array(n_dec, "n_dec")
    y = as_positive_array(loss, "loss")
    if not (ne.size == nd.size == y.size):
        raise FitError(f"n_enc, n_dec and loss have {ne.size}, {nd.size}, {y.size} values")
    if y.size < 5:
        raise FitError(f"law 'bivariate' has 4 free parameters; need ≥ 5 points, got {y.size}")
    if np.unique(ne).size < 2 or np.unique(nd).size < 2:
        raise FitError("law 'bivariate' needs both n_enc and n_dec to vary across the points",
                       column="n_enc" if np.unique(ne).size < 2 else "n_dec")
    check_span(ne, "n_enc", "bivariate")
    check_span(nd, "n_dec", "bivariate")
    ebar = float(np.exp(np.mean(np.log(ne)))) if n_e_bar is None else float(n_e_bar)
    dbar = float(np.exp(np.mean(np.log(nd)))) if n_d_bar is None else float(n_d_bar)
    le, ld = np.log(ebar / ne), np.log(dbar / nd)

    def fit(yy, theta0=None, fs=fit_options.f_scale, idx=None, refit=False):
        a_e, a_d, yv = (le, ld, yy) if idx is None else (le[idx], ld[idx], yy[idx])

        def design(t):
            return np.column_stack([np.exp(t[0] * a_e + t[1] * a_d), np.ones_like(a_e)])

        def design_jac(t):
            g = np.exp(t[0] * a_e + t[1] * a_d)
            z = np.zeros_like(a_e)
            return [np.column_stack([a_e * g, z]), np.column_stack([a_d * g, z])]

        model = VarproModel(design, theta_bounds=([1e-4, 1e-4], [5.0, 5.0]), coef_nonneg=True,
                            design_jac=design_jac)
        res = varpro_fit(model, yv, theta_grid=[_P_GRID, _P_GRID], theta0=theta0,
                         options=VarproOptions(loss=fit_options.robust_loss, f_scale=fs,
                                               require_convergence=refit or theta0 is not None))
        q = {"alpha": float(res.coef[0]), "p_e": float(res.theta[0]),
             "p_d": float(res.theta[1]), "l_inf": float(res.coef[1])}
        return q, res

    q, res = fit(y)
    require_finite_params(q, "bivariate")
    out = BivariateLawFit(law="bivariate", params=q, n_e_bar=ebar, n_d_bar=dbar,
                          n_points=int(y.size))
    out.goodness = {**goodness_of_fit(y, out.predict(ne, nd), 4), "f_scale": res.f_scale}
    out.meta = {**options_meta(fit_options, uncertainty), "converged": res.success}
    if (w_conv := convergence_warning(res, "bivariate law fit")):
        out.warnings.append(w_conv)
    samples = None
    if uncertainty.method in ("perturbation", "both"):
        samples, failed = perturbation_samples(
            lambda yy: fit(yy, theta0=res.theta, fs=res.f_scale)[0], y,
            n_refits=uncertainty.n_refits, sigma_rel=uncertainty.sigma_rel, seed=uncertainty.seed)
        out.meta["refits_failed"] = failed
    elif uncertainty.method == "bootstrap":
        samples, failed = bootstrap_samples(
            lambda idx: fit(y, theta0=res.theta, fs=res.f_scale, idx=idx)[0], y.size,
            n_boot=uncertainty.n_refits, seed=uncertainty.seed)
        out.meta["refits_failed"] = failed
    elif uncertainty.method not in (None, "none"):
        raise FitError("uncertainty must be perturbation, bootstrap or None, "
                       f"got {uncertainty.method!r}")
    if samples is not None:
        out.stderr, out.intervals = summarize_samples(samples, uncertainty.level, estimate=q)
        out.samples = {k: v.tolist() for k, v in samples.items()}
    if backtest:
        tot = ne + nd
        if int(np.sum(tot < tot.max())) >= 6:

            def refit_mask(mask):
                qq, _ = fit(y, fs=res.f_scale, idx=np.flatnonzero(mask), refit=True)
                held = ~mask
                return lambda _x: out._pred(qq, ne[held], nd[held])

            out.backtest, w = leave_largest_out(tot, y, refit_mask, backtest.noise_level,
                                                noise_rel=uncertainty.sigma_rel,
                                                tolerance=backtest.tolerance,
                                                min_sizes=2)
            if w:
                out.warnings.append(w)
    return out
