"""Robust least-squares engine shared by the laws: scipy ``least_squares`` with ``soft_l1`` and an
``f_scale`` chosen from Ghorbani et al. 2021 App. E's grid (:func:`robust_fit`), and variable
projection (:func:`varpro_fit`): a law y ≈ A(θ) @ c searched over its few nonlinear parameters θ
on a grid, the linear ones c solved exactly (non-negative least squares) for each θ, then
polished jointly with the robust loss and bounds.

:func:`converged` is the one rule by which every scipy optimiser result in ``fitting`` is
judged: a refit that did not converge raises :class:`~fitting.core.base.FitError` (counted as
failed by :mod:`fitting.core.uncertainty`); a main fit that did not converge is returned with
``success=False`` and its law records ``converged = False`` with a warning. The f_scale choice,
bounds and conditioning: docs/reference/laws.md, "Engine".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

from fitting.core.base import FitError

__all__ = ["F_SCALE_GRID", "EngineResult", "VarproModel", "VarproOptions", "varpro_fit",
           "robust_fit", "goodness_of_fit",
           "converged", "require_converged", "convergence_warning"]

#: Ghorbani et al. 2021, App. E: f_scale candidates for soft_l1 (loss units, nats).
F_SCALE_GRID: np.ndarray = np.geomspace(0.001, 0.025, num=25)

Design = Callable[[np.ndarray], np.ndarray]


def converged(result: Any) -> bool:
    """Whether a scipy optimiser result ended by its own convergence test (the one rule).

    * ``least_squares`` (recognised by its ``active_mask``): ``status > 0`` (1 gtol, 2 ftol,
      3 xtol, 4 ftol and xtol); ``status == 0`` is the evaluation cap ``max_nfev`` reached and
      ``-1`` improper input: not converged. Its ``status`` numbering differs from ``minimize``'s.
    * ``minimize`` (any method) and ``minimize_scalar``: ``success``. This follows scipy's verdict
      also where it is cautious: L-BFGS-B's ``ABNORMAL_TERMINATION_IN_LNSRCH`` (the line search
      found no decrease, at an optimum at float precision or far from one with a poor gradient)
      and SLSQP's "Positive directional derivative for linesearch" count as not converged,
      since the result alone cannot tell the two apart.
    * an :class:`EngineResult`: its ``success``, set by this rule on its polish.
    """
    if isinstance(result, EngineResult):
        return bool(result.success)
    if "active_mask" in result:
        return int(result.status) > 0
    return bool(result.success)


def require_converged(result: Any, what: str) -> None:
    """Raise :class:`FitError` naming ``what``, the evaluations and scipy's message unless
    :func:`converged` (a refit that did not converge: its sampler counts it as failed)."""
    if not converged(result):
        raise FitError(f"{what} did not converge after {int(result.nfev)} evaluations: "
                       f"{result.message}")


def convergence_warning(result: Any, what: str) -> str | None:
    """The warning a law records when its main fit (not a refit) did not converge
    (:func:`converged`), or None; the law also sets ``meta["converged"]`` to False."""
    if converged(result):
        return None
    return (f"{what}: the optimiser stopped before converging after {int(result.nfev)} "
            f"evaluations ({result.message}); the parameters are its last iterate")


@dataclass
class EngineResult:
    """Solution of one robust fit: nonlinear θ, linear c, residuals (data − model), f_scale.

    ``success``: whether the returned polish converged by :func:`converged` (False: scipy stopped
    it, e.g. at its evaluation cap; ``message`` says why); ``nfev``: its evaluations.
    """

    theta: np.ndarray
    coef: np.ndarray
    residuals: np.ndarray
    f_scale: float
    cost: float
    success: bool
    nfev: int
    message: str = ""


def _solve_linear(A: np.ndarray, y: np.ndarray, nonneg: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """min ||W(y − A c)||² with c_j ≥ 0 where ``nonneg[j]`` (exact; NNLS after a sign split)."""
    if w is not None:
        A = A * w[:, None]
        y = y * w
    if nonneg.all():
        c, _ = nnls(A, y, maxiter=50 * A.shape[1] + 50)
        return c
    if not nonneg.any():
        c, *_ = np.linalg.lstsq(A, y, rcond=None)
        return c
    # free columns = difference of two non-negative ones
    free = ~nonneg
    A2 = np.hstack([A, -A[:, free]])
    c2, _ = nnls(A2, y, maxiter=50 * A2.shape[1] + 50)
    c = c2[: A.shape[1]].copy()
    c[free] -= c2[A.shape[1]:]
    return c


def _projected_jac(A: np.ndarray, c: np.ndarray, dA: Sequence[np.ndarray],
                   w: np.ndarray | None) -> np.ndarray:
    """Jacobian of the projected residual r(θ) = y − A(θ) c(θ) in Kaufman's approximation
    (Kaufman 1975; Golub & Pereyra 2003, eq. 3.5): ∂r/∂θ_j ≈ −P⊥ (∂A/∂θ_j) c, with P⊥ the
    projection off the columns of A whose coefficient is not held at its bound by the NNLS."""
    act = c != 0
    Aw = A if w is None else A * w[:, None]
    q = np.linalg.qr(Aw[:, act])[0] if act.any() else np.zeros((len(A), 0))
    cols = []
    for d in dA:
        v = d @ c if w is None else (d @ c) * w
        cols.append(-(v - q @ (q.T @ v)))
    return np.column_stack(cols)


def _soft_l1_sum(r: np.ndarray, f: float) -> float:
    return float(np.sum(2.0 * f * f * (np.sqrt(1.0 + (r / f) ** 2) - 1.0)))


@dataclass(frozen=True)
class VarproModel:
    """The model :func:`varpro_fit` fits: y ≈ design(θ) @ c, with θ in ``theta_bounds``.

    Attributes:
      design: θ -> design matrix A (n × k).
      theta_bounds: (lower, upper) for θ.
      coef_nonneg: which linear coefficients are constrained ≥ 0 (one bool: all of them).
      coef_upper: upper bounds of the linear coefficients (``None``: none).
      design_jac: θ -> [∂A/∂θ_j]; gives the polish an analytic Jacobian (faster).
      theta_penalty: θ -> non-negative residuals appended to the data residuals, 0 where θ
        satisfies a shape constraint that bounds cannot express (e.g. a monotone f̂); the
        returned ``residuals`` are the data's alone, ``cost`` includes the penalty. With it the
        polish uses finite differences (``design_jac`` is ignored).
    """

    design: Design
    theta_bounds: tuple[Sequence[float], Sequence[float]]
    coef_nonneg: Sequence[bool] | bool = True
    coef_upper: Sequence[float] | None = None
    design_jac: Callable[[np.ndarray], Sequence[np.ndarray]] | None = None
    theta_penalty: Callable[[np.ndarray], np.ndarray] | None = None


@dataclass(frozen=True)
class VarproOptions:
    """How :func:`varpro_fit` searches θ and polishes (θ, c) (Ghorbani et al. App. E).

    Attributes:
      loss: ``"soft_l1"`` (Ghorbani App. E) or any ``least_squares`` loss, ``"linear"`` = OLS.
      f_scale: a number, or ``"auto"`` to search ``f_scale_grid`` (default :data:`F_SCALE_GRID`).
      f_scale_grid: the f_scale candidates of ``"auto"``.
      n_refine: how many of the best grid points are refined locally.
      search_jac: the θ search uses ``design_jac`` too (:func:`_projected_jac`, Kaufman's
        approximation) instead of finite differences, each of which solves the linear problem.
      require_convergence: raise :class:`FitError` when no polish converged (:func:`converged`);
        default: when ``theta0`` is given (a local refit, counted as failed by its sampler).
        Otherwise the best polish is returned with ``success=False``.
    """

    loss: str = "soft_l1"
    f_scale: float | str = "auto"
    f_scale_grid: Sequence[float] | None = None
    n_refine: int = 3
    search_jac: bool = False
    require_convergence: bool | None = None


def varpro_fit(
    model: VarproModel,
    y: np.ndarray,
    *,
    theta_grid: Sequence[Sequence[float]],
    theta_starts: Sequence[Sequence[float]] | None = None,
    theta0: Sequence[float] | None = None,
    sigma: np.ndarray | None = None,
    options: VarproOptions = VarproOptions(),
) -> EngineResult:
    """Fit ``y ≈ model.design(θ) @ c`` robustly (variable projection + joint polish).

    Args:
      model: the design, θ's bounds and the coefficients' constraints (:class:`VarproModel`).
      y: observations (n,).
      theta_grid: per-θ candidate values; their Cartesian product is the multi-start grid
        (ignored when ``theta0`` is given: a single local refit, used for perturbation refits).
      theta_starts: explicit start points, used instead of ``theta_grid``'s Cartesian product
        (several grids of one law pooled: the best ``n_refine`` of all are refined, one polish).
      theta0: skip the grid and the θ search; polish locally from (θ0, c(θ0)) (perturbation
        refits).
      sigma: optional per-point scale; residuals are divided by it.
      options: the robust loss, f_scale and the search (:class:`VarproOptions`).
    """
    design, theta_bounds = model.design, model.theta_bounds
    coef_nonneg, coef_upper = model.coef_nonneg, model.coef_upper
    design_jac, theta_penalty = model.design_jac, model.theta_penalty
    loss, f_scale, f_scale_grid = options.loss, options.f_scale, options.f_scale_grid
    n_refine, search_jac = options.n_refine, options.search_jac
    require_convergence = options.require_convergence
    y = np.asarray(y, dtype=np.float64)
    lo_t = np.asarray(theta_bounds[0], dtype=np.float64)
    hi_t = np.asarray(theta_bounds[1], dtype=np.float64)
    p = lo_t.shape[0]
    A0 = design(np.clip(np.asarray(theta0 if theta0 is not None else [g[0] for g in theta_grid],
                                   dtype=np.float64), lo_t, hi_t))
    k = A0.shape[1]
    nonneg = (
        np.full(k, bool(coef_nonneg)) if isinstance(coef_nonneg, bool) else np.asarray(coef_nonneg)
    )
    w = None if sigma is None else 1.0 / np.asarray(sigma, dtype=np.float64)

    def penalised(r: np.ndarray, theta: np.ndarray) -> np.ndarray:
        return r if theta_penalty is None else np.concatenate([r, theta_penalty(theta)])

    last: dict = {}

    def projected(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if last.get("theta") is None or not np.array_equal(last["theta"], theta):
            A = design(theta)
            last.update(theta=theta.copy(), A=A, c=_solve_linear(A, y, nonneg, w))
        return last["A"], last["c"]

    def proj_resid(theta: np.ndarray) -> np.ndarray:
        A, c = projected(theta)
        r = y - A @ c
        return penalised(r if w is None else r * w, theta)

    search: Callable | str = "2-point"
    if search_jac and design_jac is not None and theta_penalty is None:

        def search(theta: np.ndarray) -> np.ndarray:
            A, c = projected(theta)
            return _projected_jac(A, c, design_jac(theta), w)

    # 1. multi-start over θ: evaluate the projected (OLS) cost on the grid, refine the best few.
    if theta0 is not None:
        starts = []
        best_theta = np.clip(np.asarray(theta0, dtype=np.float64), lo_t, hi_t)
    else:
        grid = [np.asarray(t, dtype=np.float64) for t in
                (itertools.product(*theta_grid) if theta_starts is None else theta_starts)]
        costs = []
        for t in grid:
            with np.errstate(all="ignore"):
                r = proj_resid(t)
            costs.append(np.sum(r * r) if np.all(np.isfinite(r)) else np.inf)
        order = np.argsort(costs)[: max(1, n_refine)]
        starts = [grid[i] for i in order if np.isfinite(costs[i])]
        if not starts:
            raise FitError("the model is not finite at any starting point of the θ grid")
        best_theta = None
    best_cost = np.inf
    for t0 in starts:
        t0 = _strictly_inside(t0, lo_t, hi_t)
        try:
            sol = least_squares(proj_resid, t0, jac=search, bounds=(lo_t, hi_t), method="trf",
                                x_scale="jac", max_nfev=200 * (p + 1))
            t, cst = sol.x, 0.5 * float(np.sum(sol.fun**2))
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(cst) and cst < best_cost:
            best_theta, best_cost = t, cst
    if best_theta is None:
        raise FitError("variable-projection search failed from every start")
    A = design(best_theta)
    c0 = _solve_linear(A, y, nonneg, w)

    # 2. robust polish over (θ, c) jointly, once per f_scale candidate.
    if loss == "linear":
        fscales = [1.0]
    elif f_scale == "auto":
        fscales = list(F_SCALE_GRID if f_scale_grid is None else f_scale_grid)
    else:
        fscales = [float(f_scale)]
    lo_c = np.where(nonneg, 0.0, -np.inf)
    hi_c = np.full(k, np.inf) if coef_upper is None else np.asarray(coef_upper, dtype=np.float64)
    lo = np.concatenate([lo_t, lo_c])
    hi = np.concatenate([hi_t, hi_c])
    x_start = _strictly_inside(np.concatenate([best_theta, c0]), lo, hi)

    def full_resid(x: np.ndarray) -> np.ndarray:
        r = y - design(x[:p]) @ x[p:]
        return penalised(r if w is None else r * w, x[:p])

    jac: Callable | str = "2-point"
    if design_jac is not None and theta_penalty is None:

        def jac(x: np.ndarray) -> np.ndarray:
            A = design(x[:p])
            cols = [-(dA @ x[p:]) for dA in design_jac(x[:p])]
            J = np.column_stack(cols + [-A])
            return J if w is None else J * w[:, None]

    best: EngineResult | None = None
    best_crit = (True, np.inf)  # (not converged, Σ|r|): a converged polish first
    x_prev = x_start
    # largest f_scale first (≈ least squares), each polish warm-started from the previous one
    ordered = sorted(fscales, reverse=True)
    for i, fs in enumerate(ordered):
        try:
            sol = least_squares(full_resid, x_prev, jac=jac, bounds=(lo, hi), loss=loss,
                                f_scale=fs, method="trf", x_scale="jac",
                                max_nfev=100 * (p + k + 1))
        except (ValueError, np.linalg.LinAlgError) as e:
            if best is None and i == len(ordered) - 1:
                raise FitError(f"robust polish failed: {e}") from e
            continue
        r = y - design(sol.x[:p]) @ sol.x[p:]
        if not np.all(np.isfinite(r)):
            continue
        x_prev = _strictly_inside(sol.x, lo, hi)
        crit = (not converged(sol), float(np.sum(np.abs(r))))
        if crit < best_crit:
            best_crit = crit
            best = EngineResult(
                theta=sol.x[:p].copy(), coef=sol.x[p:].copy(), residuals=r, f_scale=float(fs),
                cost=float(sol.cost), success=converged(sol), nfev=int(sol.nfev),
                message=str(sol.message),
            )
    if best is None:
        raise FitError("robust fit produced non-finite residuals for every f_scale")
    if (theta0 is not None if require_convergence is None else require_convergence):
        require_converged(best, "robust polish")
    return best


def robust_fit(
    fun: Callable[[np.ndarray], np.ndarray],
    y: np.ndarray,
    starts: Sequence[Sequence[float]],
    bounds: tuple[Sequence[float], Sequence[float]],
    *,
    loss: str = "soft_l1",
    f_scale: float | str = "auto",
    f_scale_grid: Sequence[float] | None = None,
    require_convergence: bool = False,
) -> EngineResult:
    """Multi-start robust fit of a general model ``y ≈ fun(x)`` (no linear parameters split off).

    The start is chosen by least squares, then polished once per f_scale; the polish with the
    smallest Σ|r| among those that converged (:func:`converged`) is returned (among all, with
    ``success=False``, when none did). ``require_convergence`` (refits): raise :class:`FitError`
    instead of returning an unconverged polish."""
    y = np.asarray(y, dtype=np.float64)
    lo = np.asarray(bounds[0], dtype=np.float64)
    hi = np.asarray(bounds[1], dtype=np.float64)
    if loss == "linear":
        fscales = [1.0]
    elif f_scale == "auto":
        fscales = list(F_SCALE_GRID if f_scale_grid is None else f_scale_grid)
    else:
        fscales = [float(f_scale)]

    def resid(x: np.ndarray) -> np.ndarray:
        return y - fun(x)

    # pick the start by least squares first, then polish per f_scale
    best_x, best_c = None, np.inf
    for s in starts:
        x0 = _strictly_inside(np.asarray(s, dtype=np.float64), lo, hi)
        try:
            sol = least_squares(resid, x0, bounds=(lo, hi), x_scale="jac", max_nfev=2000)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(sol.cost) and sol.cost < best_c:
            best_x, best_c = sol.x, sol.cost
    if best_x is None:
        raise FitError("robust fit failed from every start")
    best: EngineResult | None = None
    best_crit = (True, np.inf)  # (not converged, Σ|r|): a converged polish first
    for fs in fscales:
        sol = least_squares(resid, _strictly_inside(best_x, lo, hi), bounds=(lo, hi), loss=loss,
                            f_scale=fs, x_scale="jac", max_nfev=2000)
        r = resid(sol.x)
        crit = (not converged(sol), float(np.sum(np.abs(r))))
        if np.all(np.isfinite(r)) and crit < best_crit:
            best_crit = crit
            best = EngineResult(theta=sol.x.copy(), coef=np.zeros(0), residuals=r, f_scale=float(fs),
                                cost=float(sol.cost), success=converged(sol),
                                nfev=int(sol.nfev), message=str(sol.message))
    if best is None:
        raise FitError("robust fit produced non-finite residuals")
    if require_convergence:
        require_converged(best, "robust fit")
    return best


def _strictly_inside(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Clip into the box and step off the bounds (``least_squares`` wants a feasible start)."""
    x = np.clip(np.asarray(x, dtype=np.float64), lo, hi)
    span = np.where(np.isfinite(hi - lo), hi - lo, np.maximum(np.abs(x), 1.0))
    eps = 1e-10 * np.maximum(span, 1e-12)
    x = np.where(x <= lo, lo + eps, x)
    x = np.where(x >= hi, hi - eps, x)
    return x


def goodness_of_fit(y: np.ndarray, pred: np.ndarray, n_params: int) -> dict[str, float]:
    """rmse, r2 (Ghorbani's explained-variance R²), max |error|, mean |relative error|, noise σ."""
    y = np.asarray(y, dtype=np.float64)
    r = y - np.asarray(pred, dtype=np.float64)
    n = y.shape[0]
    ss_res = float(np.sum(r * r))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    dof = n - n_params
    return {
        "rmse": float(np.sqrt(ss_res / n)),
        "r2": float(1.0 - ss_res / ss_tot) if ss_tot > 0 else float("nan"),
        "max_abs_err": float(np.max(np.abs(r))),
        "mean_abs_rel_err": (float(np.mean(np.abs(r[y != 0]) / np.abs(y[y != 0])))
                             if np.any(y != 0) else float("nan")),  # zero targets left out
        "sigma": float(np.sqrt(ss_res / dof)) if dof > 0 else float("nan"),
    }
