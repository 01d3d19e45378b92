"""Single power law L(N) = β·N^(−α) + L∞.

Fernandes et al. 2023 eq. 1/3/6 (per language pair and mixture weight p), Ghorbani et al. 2021
eq. 1; with N replaced by the data size D it is the data-scaling law E + B·D^(−β) and with N
replaced by the training step it is the learning-curve law of Fernandes App. G.

Fitting: variable projection (β and L∞ are linear for fixed α and solved exactly, α searched on a
grid then refined) followed by a soft_l1 polish with the f_scale grid of Ghorbani App. E.
Uncertainty: 1%-of-loss Gaussian perturbation refits (Fernandes footnote 5) and/or bootstrap.
Extrapolation check: refit without the largest size and predict it (Caillaut et al. 2024 §4.1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fitting.core.base import FitError, FitResult, TableRequest, register_law
from fitting.core.engine import (
    EngineResult,
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
from fitting.laws.table_fits import note_dropped, pair_final_losses

__all__ = ["PowerLawFit", "fit_power_law", "power_law", "leave_largest_out", "as_positive_array",
           "check_span", "require_finite_params", "MAX_SPAN"]

ALPHA_GRID = np.geomspace(0.01, 2.5, 30)
ALPHA_BOUNDS = (1e-4, 5.0)
#: Widest ratio max/min of sizes a law is fitted over: (1e40)^5 still fits in a float64, so
#: x^(−α) stays finite for every α the fits search (real studies span a few orders of magnitude).
MAX_SPAN = 1e40


def power_law(x: np.ndarray, alpha: float, beta: float, l_inf: float) -> np.ndarray:
    """β·x^(−α) + L∞ (Fernandes eq. 6)."""
    return beta * np.power(np.asarray(x, dtype=np.float64), -alpha) + l_inf


def as_positive_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """1-D float array of finite positive values, or FitError naming ``name`` and the row."""
    try:
        a = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        items = list(np.asarray(values, dtype=object).reshape(-1))
        for i, v in enumerate(items):
            try:
                float(v)
            except (TypeError, ValueError):
                raise FitError(f"column {name!r}, row {i}: expected a number, got {v!r}",
                               column=name, row=i) from None
        raise FitError(f"column {name!r}: expected numbers ({e})", column=name) from None
    bad = ~np.isfinite(a) | (a <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FitError(
            f"column {name!r}, row {i}: expected a finite positive number, got {a[i]!r}",
            column=name, row=i,
        )
    return a


def check_span(x: np.ndarray, name: str, law: str) -> None:
    """FitError when positive ``x`` spans more than :data:`MAX_SPAN` (x^(−α) would overflow)."""
    lo, hi = float(np.min(x)), float(np.max(x))
    if hi / lo > MAX_SPAN or not np.isfinite(hi / lo):
        raise FitError(f"law {law!r}: column {name!r} spans {lo:.3g} to {hi:.3g}, more than "
                       f"{MAX_SPAN:.0e}×; expected sizes within {MAX_SPAN:.0e}× of each other",
                       column=name)


def require_finite_params(params: dict[str, float], law: str) -> None:
    """FitError when a fit produced a NaN/inf parameter (e.g. β = c·x_ref^α overflowing)."""
    bad = {k: v for k, v in params.items() if not np.isfinite(v)}
    if bad:
        raise FitError(f"law {law!r}: the fit gave non-finite parameters {bad}; expected finite "
                       "values (rescale the sizes, e.g. to millions, and the losses to nats)")


@register_law("power")
@dataclass
class PowerLawFit(FitResult):
    """L(x) = β·x^(−α) + L∞ with x = N (or D, or steps). Params: ``alpha``, ``beta``, ``l_inf``.

    ``meta["converged"]``: whether the fit's robust polish converged
    (:func:`fitting.core.engine.converged`; False comes with a warning, the parameters being the
    optimiser's last iterate). ``meta["perturbation_failed"]``, ``meta["bootstrap_failed"]``:
    refits that failed, those that did not converge included; they are left out of ``stderr``,
    ``intervals`` and ``samples``.
    """

    x_name: str = "n"
    samples: dict[str, list[float]] | None = None
    backtest: dict[str, float] | None = None
    x_range: tuple[float, float] | None = None

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> PowerLawFit | dict:
        """``mnmt-fit fit --law power``: the final losses' power law in N, one fit per pair and
        weight of the table (:func:`fit_power_groups`)."""
        fin, dropped = pair_final_losses(table, request)
        return note_dropped(fit_power_groups(fin, request), dropped)

    def predict(self, x: Sequence[float] | np.ndarray | float) -> np.ndarray:
        """Predicted loss at ``x``."""
        p = self.params
        return power_law(np.asarray(x, dtype=np.float64), p["alpha"], p["beta"], p["l_inf"])

    def reducible(self, x: Sequence[float] | np.ndarray | float) -> np.ndarray:
        """β·x^(−α), the reducible part (Fernandes Fig. 3)."""
        return self.predict(x) - self.params["l_inf"]

    def band(self, x: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Percentile band of the prediction at ``x`` over the uncertainty samples, widened to
        contain the prediction itself (:mod:`fitting.core.uncertainty`)."""
        if not self.samples:
            raise FitError("this fit has no uncertainty samples (fit with uncertainty=...)")
        xx = np.asarray(x, dtype=np.float64)
        return band_from_samples(lambda p: power_law(xx, p["alpha"], p["beta"], p["l_inf"]),
                                 self.samples, level, estimate=self.params)

    @classmethod
    def _decode_extra(cls, name: str, value):
        if name == "x_range" and value is not None:
            return (float(value[0]), float(value[1]))
        return value


@dataclass
class _Core:
    alpha: float
    beta: float
    l_inf: float
    f_scale: float
    residuals: np.ndarray = field(repr=False)
    result: EngineResult = field(repr=False)


def _fit_core(
    x: np.ndarray,
    y: np.ndarray,
    *,
    loss: str,
    f_scale: float | str,
    alpha0: float | None = None,
    alpha_bounds: tuple[float, float] = ALPHA_BOUNDS,
    l_inf_max: float | None = None,
    refit: bool = False,
) -> _Core:
    """The robust fit; ``refit`` (or ``alpha0`` given): FitError unless it converged."""
    x_ref = float(np.exp(np.mean(np.log(x))))  # geometric mean: conditions β
    u = x / x_ref

    logu = np.log(u)

    def design(theta: np.ndarray) -> np.ndarray:
        return np.column_stack([np.power(u, -theta[0]), np.ones_like(u)])

    def design_jac(theta: np.ndarray) -> list[np.ndarray]:
        return [np.column_stack([-logu * np.power(u, -theta[0]), np.zeros_like(u)])]

    model = VarproModel(design, theta_bounds=([alpha_bounds[0]], [alpha_bounds[1]]),
                        coef_nonneg=True,
                        coef_upper=None if l_inf_max is None else [np.inf, l_inf_max],
                        design_jac=design_jac)
    res = varpro_fit(
        model, y,
        theta_grid=[ALPHA_GRID[(ALPHA_GRID > alpha_bounds[0]) & (ALPHA_GRID < alpha_bounds[1])]],
        theta0=None if alpha0 is None else [alpha0],
        options=VarproOptions(loss=loss, f_scale=f_scale,
                              require_convergence=refit or alpha0 is not None),
    )
    alpha = float(res.theta[0])
    beta = float(res.coef[0] * x_ref**alpha)
    return _Core(alpha, beta, float(res.coef[1]), res.f_scale, res.residuals, res)


def _group_label(group) -> str:
    """A group key for messages: numbers as %g (0.3, not 0.30000000000000004)."""
    if isinstance(group, (int, float, np.floating, np.integer)) and not isinstance(group, bool):
        return f"{float(group):g}"
    return str(group)


def leave_largest_out(
    x: np.ndarray,
    y: np.ndarray,
    refit: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]],
    noise: float | None,
    *,
    noise_rel: float = 0.01,
    tolerance: float = 3.0,
    min_sizes: int = 4,
    groups: np.ndarray | None = None,
) -> tuple[dict[str, float] | None, str | None]:
    """Backtest (Caillaut et al. 2024 §4.1): refit without the largest x, predict it.

    ``refit(mask)`` fits on rows ``mask`` and returns a predict function for the held-out rows
    (in their order). Held-out rows are averaged per group (``groups``, e.g. the weight p; seeds
    at one size are averaged) and the worst group is reported. Returns (backtest dict, warning or
    None). The warning fires when |error| > tolerance × noise; ``noise=None`` means
    ``noise_rel`` × the observed loss there (the 1% noise model of Fernandes footnote 5).
    """
    sizes = np.unique(x)
    if sizes.size < min_sizes:
        return None, None
    held = x == sizes[-1]
    try:
        pred_fn = refit(~held)
    except FitError as e:
        return None, f"backtest without the largest size failed: {e}"
    pred_h = np.asarray(pred_fn(x[held]), dtype=np.float64)
    y_h = y[held]
    g_h = np.zeros(y_h.size) if groups is None else np.asarray(groups)[held]
    worst = None
    for g in np.unique(g_h):
        m = g_h == g
        t, pr = float(np.mean(y_h[m])), float(np.mean(pred_h[m]))
        if worst is None or abs(t - pr) > abs(worst[0] - worst[1]):
            worst = (t, pr, g)
    true, pred, grp = worst
    err = true - pred
    if noise is None:
        noise = noise_rel * true
    bt = {
        "held_out_x": float(sizes[-1]),
        "true": true,
        "pred": pred,
        "error": err,
        "rel_error": err / true,
        "noise": float(noise),
        "tolerance": float(tolerance),
    }
    if groups is not None:
        bt["worst_group"] = float(grp) if np.isscalar(grp) and not isinstance(grp, str) else grp
    warning = None
    if abs(err) > tolerance * noise:
        warning = (
            f"extrapolation backtest: refitted without the largest size ({sizes[-1]:.4g}), the law "
            + ("" if groups is None else f"(worst group {_group_label(grp)}) ")
            + f"predicts {pred:.4f} there but {true:.4f} was observed (error {err:+.4f}, "
            + f"{100 * err / true:+.2f}%), more than {tolerance:g}× the noise level {noise:.4f}; "
            + "predictions beyond the fitted range are unreliable"
        )
    return bt, warning


def fit_power_law(
    n: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    *,
    x_name: str = "n",
    fit_options: FitOptions = FitOptions(),
    uncertainty: UncertaintyOptions = UncertaintyOptions(),
    backtest: BacktestOptions | None = BacktestOptions(),
    alpha_bounds: tuple[float, float] = ALPHA_BOUNDS,
) -> PowerLawFit:
    """Fit L(N) = β·N^(−α) + L∞ (Fernandes eq. 6) robustly, with uncertainty and a backtest.

    Args:
      n: sizes (non-embedding parameters, or data size / steps; ``x_name`` names them).
      loss: observed losses (finite, positive).
      fit_options: the robust loss (soft_l1 with Ghorbani's f_scale grid by default).
      uncertainty: ``method`` ``"perturbation"`` (σ = ``sigma_rel`` × loss, Fernandes fn. 5),
        ``"bootstrap"``, ``"both"`` or ``None``; ``n_refits`` refits each.
      backtest: leave-largest-size-out backtest (needs ≥ 4 distinct sizes; ``None`` skips it);
        warns when its error exceeds ``tolerance`` × noise; noise = ``noise_level`` (nats) or, by
        default, ``uncertainty.sigma_rel`` × the observed loss at the held-out size (Fernandes
        footnote 5's noise model; the fit's residual σ is not used because it includes
        systematic misfit).
    """
    x = as_positive_array(n, x_name)
    y = as_positive_array(loss, "loss")
    if x.shape != y.shape:
        raise FitError(f"{x_name!r} has {x.size} values but 'loss' has {y.size}")
    if x.size < 3 or np.unique(x).size < 3:
        raise FitError(
            f"law 'power' has 3 free parameters (alpha, beta, l_inf) but only "
            f"{np.unique(x).size} distinct {x_name!r} values were given; need at least 3",
            column=x_name,
        )
    check_span(x, x_name, "power")
    core = _fit_core(x, y, loss=fit_options.robust_loss, f_scale=fit_options.f_scale,
                     alpha_bounds=alpha_bounds)
    params = {"alpha": core.alpha, "beta": core.beta, "l_inf": core.l_inf}
    require_finite_params(params, "power")
    pred = power_law(x, **params)
    good = goodness_of_fit(y, pred, 3)
    good["f_scale"] = core.f_scale
    warnings: list[str] = []
    if core.alpha >= alpha_bounds[1] * 0.999 or core.alpha <= alpha_bounds[0] * 1.001:
        warnings.append(f"alpha hit its bound {alpha_bounds}: the law is poorly determined")
    if core.l_inf <= 1e-9:
        warnings.append("l_inf fitted at its lower bound 0: the data do not show a plateau yet")

    def refit_y(y_new: np.ndarray) -> dict[str, float]:
        c = _fit_core(x, y_new, loss=fit_options.robust_loss, f_scale=core.f_scale,
                      alpha0=core.alpha,
                      alpha_bounds=alpha_bounds)
        return {"alpha": c.alpha, "beta": c.beta, "l_inf": c.l_inf}

    def refit_idx(idx: np.ndarray) -> dict[str, float]:
        if np.unique(x[idx]).size < 3:
            raise FitError("resample has fewer than 3 distinct sizes")
        c = _fit_core(x[idx], y[idx], loss=fit_options.robust_loss, f_scale=core.f_scale,
                      alpha_bounds=alpha_bounds, refit=True)
        return {"alpha": c.alpha, "beta": c.beta, "l_inf": c.l_inf}

    samples: dict[str, np.ndarray] | None = None
    stderr = intervals = None
    meta: dict = {**options_meta(fit_options, uncertainty), "converged": core.result.success}
    if (w := convergence_warning(core.result, "power law fit")):
        warnings.append(w)
    if uncertainty.method in ("perturbation", "both"):
        samples, failed = perturbation_samples(refit_y, y, n_refits=uncertainty.n_refits,
                                               sigma_rel=uncertainty.sigma_rel,
                                               seed=uncertainty.seed)
        meta["perturbation_failed"] = failed
    if uncertainty.method in ("bootstrap", "both"):
        bs, failed = bootstrap_samples(refit_idx, x.size, n_boot=uncertainty.n_refits,
                                       seed=uncertainty.seed + 1)
        meta["bootstrap_failed"] = failed
        if samples is None:
            samples = bs
        else:
            stderr_b, intervals_b = summarize_samples(bs, uncertainty.level, estimate=params)
            meta["bootstrap_stderr"] = stderr_b
            meta["bootstrap_intervals"] = {k: list(v) for k, v in intervals_b.items()}
    elif uncertainty.method not in (None, "none", "perturbation"):
        raise FitError("uncertainty must be perturbation, bootstrap, both or None, "
                       f"got {uncertainty.method!r}")
    if samples is not None:
        stderr, intervals = summarize_samples(samples, uncertainty.level, estimate=params)

    bt = None
    if backtest:
        def refit_mask(mask: np.ndarray):
            c = _fit_core(x[mask], y[mask], loss=fit_options.robust_loss, f_scale=core.f_scale,
                          alpha_bounds=alpha_bounds, refit=True)
            return lambda xx: power_law(xx, c.alpha, c.beta, c.l_inf)

        bt, w = leave_largest_out(x, y, refit_mask, backtest.noise_level,
                                  noise_rel=uncertainty.sigma_rel,
                                  tolerance=backtest.tolerance)
        if w:
            warnings.append(w)
        if bt is None and w is None:
            meta["backtest_skipped"] = "needs at least 4 distinct sizes"

    return PowerLawFit(
        law="power", params=params, stderr=stderr, intervals=intervals, goodness=good,
        n_points=int(x.size), warnings=warnings, meta=meta, x_name=x_name,
        samples=None if samples is None else {k: v.tolist() for k, v in samples.items()},
        backtest=bt, x_range=(float(x.min()), float(x.max())),
    )


def fit_power_groups(fin: pd.DataFrame, request: TableRequest) -> PowerLawFit | dict:
    """The power law of ``fin``'s final losses in N: where the table has several pairs or
    weights, a dict with one fit per (pair, weight) (weight 0 left out; ``{"error": message}``
    where that group's fit failed); else one fit. ``request.weight`` keeps that weight alone."""
    kw = request.fit_options()
    if request.weight is not None and "weight" in fin.columns:
        fin = fin[(fin["weight"].astype(float) - request.weight).abs() < 1e-9]
    groups = [c for c in ("pair", "weight") if c in fin.columns and fin[c].nunique() > 1]
    if not groups:
        require_columns(fin, ["n"], request.source)
        return fit_power_law(fin["n"], fin["loss"], **kw)
    res: dict = {}
    for key, g in fin.groupby(groups):
        key = key if isinstance(key, tuple) else (key,)
        name = ",".join(f"{c}={k}" for c, k in zip(groups, key, strict=True))
        if "weight" in groups and float(key[groups.index("weight")]) == 0:
            continue
        try:
            res[name] = fit_power_law(g["n"], g["loss"], **kw)
        except FitError as e:
            res[name] = {"error": str(e)}
    return res
