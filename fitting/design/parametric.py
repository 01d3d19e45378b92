"""A law as a parametric function with bounds, and its multi-start least-squares fit.

The design room works with any law written as ``predict(theta, X) -> (n, k)`` and a box of
plausible parameters. Parameters move in a normalised coordinate u ∈ [0, 1]: linear across a
bound, or logarithmic where a positive bound spans more than three decades (a coefficient that
may be 1e-3 or 1e9), so that uniform random starts cover every scale. The fit is a bounded
least-squares solve (scipy's trust-region reflective method) from the warm start, if any, and
random starts. The objective's optional terms (:class:`FitObjective`): weights on the runs (a
target beyond the costliest runs is best told by them), a ridge pulling u toward the middle of
the box (it matters only where the runs cannot pin a parameter), and a guard keeping the
predictions at inputs without a loss (the target) inside a plausible band: a form that can diverge
(a power of a sum that reaches zero) otherwise fits the runs and predicts an astronomical loss one
step outside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

__all__ = ["ParametricLaw", "ParametricFit", "PredictionGuard", "FitObjective", "cost_weights",
           "fit_parametric"]

#: Bounds whose ratio exceeds this are searched in log space.
LOG_SPAN = 1e3


@dataclass(frozen=True)
class ParametricLaw:
    """A law ``predict(theta, X)`` with ``theta`` inside ``bounds``.

    Attributes:
        name: short identifier (reports, JSON).
        predict: ``(theta (p, b), X (n, d)) -> (b, n)`` or ``(b, n, k)``: predictions for a batch
            of b parameter vectors at once (k outputs; one loss when the last axis is absent).
        bounds: one ``(low, high)`` per parameter.
        param_names: optional names, one per parameter.
    """

    name: str
    predict: Callable[[np.ndarray, np.ndarray], np.ndarray]
    bounds: Sequence[tuple[float, float]]
    param_names: Sequence[str] = ()

    @property
    def n_params(self) -> int:
        return len(self.bounds)

    @property
    def _lo_hi_log(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo = np.array([b[0] for b in self.bounds], float)
        hi = np.array([b[1] for b in self.bounds], float)
        log = (lo > 0) & (hi / np.where(lo > 0, lo, 1.0) > LOG_SPAN)
        return lo, hi, log

    def to_theta(self, u: np.ndarray) -> np.ndarray:
        """Parameters from normalised coordinates (u = 0 at the low bound, 1 at the high one)."""
        lo, hi, log = self._lo_hi_log
        u = np.clip(np.asarray(u, float), 0.0, 1.0)
        lin = lo + u * (hi - lo)
        with np.errstate(divide="ignore", invalid="ignore"):
            geo = np.exp(np.log(np.where(log, lo, 1.0)) + u * np.log(np.where(log, hi / lo, 1.0)))
        return np.where(log, geo, lin)

    def to_u(self, theta: np.ndarray) -> np.ndarray:
        """Normalised coordinates of ``theta`` (the inverse of :meth:`to_theta`)."""
        lo, hi, log = self._lo_hi_log
        theta = np.clip(np.asarray(theta, float), lo, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            geo = np.log(np.where(log, theta / lo, 1.0)) / np.log(np.where(log, hi / lo, 2.0))
        return np.where(log, geo, (theta - lo) / (hi - lo))

    def predict_batch(self, u: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predictions (b, n, k) at a batch of normalised parameters ``u`` (b, p)."""
        u = np.atleast_2d(u)
        if len(X) == 0:
            return np.zeros((len(u), 0, 1))
        with np.errstate(all="ignore"):
            out = np.asarray(self.predict(self.to_theta(u).T, np.asarray(X, float)), float)
        return out.reshape(len(u), len(X), -1)

    def predict_u(self, u: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predictions (n, k) at normalised parameters ``u`` (p,)."""
        return self.predict_batch(np.asarray(u, float)[None, :], X)[0]

    def jacobian_u(self, u: np.ndarray, X: np.ndarray, step: float = 1e-6) -> np.ndarray:
        """∂ predictions / ∂u: (n, k, p), forward differences in one batched evaluation."""
        u = np.asarray(u, float)
        steps = np.where(u + step <= 1.0, step, -step)
        batch = np.vstack([u, u + np.diag(steps)])
        out = self.predict_batch(batch, X)
        with np.errstate(invalid="ignore"):  # inf − inf where a prediction is not finite
            diff = (out[1:] - out[0]) / steps[:, None, None]
        return np.moveaxis(np.where(np.isfinite(diff), diff, 0.0), 0, -1)


@dataclass
class ParametricFit:
    """The best of a multi-start fit.

    Attributes:
        u: normalised parameters of the best start.
        theta: ``law.to_theta(u)``.
        rss: Σ (prediction − y)² over every output of every run.
        n_obs: number of observed values (runs × outputs).
        sigma2: residual variance rss / max(n_obs − p, 1); the noise scale of the design's
            predicted intervals.
    """

    law: ParametricLaw
    u: np.ndarray
    theta: np.ndarray
    rss: float
    n_obs: int
    sigma2: float = field(default=float("nan"))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.law.predict_u(self.u, X)


@dataclass(frozen=True)
class PredictionGuard:
    """A band the predictions at inputs ``X`` (no losses known there) should stay inside.

    Each prediction outside [low, high] (per output) adds its distance to the band as one more
    residual, so a fit pays for a divergent prediction as for a missed run; inside the band the
    guard costs nothing and changes no fit.
    """

    X: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def around(cls, X: np.ndarray, y: np.ndarray) -> PredictionGuard:
        """The band of the observed losses ``y`` (n, k) widened by their own range each side
        (at least a tenth of the largest loss, so that one run still leaves room)."""
        y = np.asarray(y, float).reshape(len(y), -1)
        lo, hi = y.min(axis=0), y.max(axis=0)
        width = np.maximum(hi - lo, 0.1 * np.abs(y).max(axis=0))
        return cls(np.asarray(X, float), lo - width, hi + width)

    def residuals(self, law: ParametricLaw, u: np.ndarray) -> np.ndarray:
        pred = law.predict_u(u, self.X)
        out = np.maximum(pred - self.high, 0.0) + np.maximum(self.low - pred, 0.0)
        return np.where(np.isfinite(out), out, 1e3).ravel()

    def jacobian(self, law: ParametricLaw, u: np.ndarray) -> np.ndarray:
        pred = law.predict_u(u, self.X)
        sign = np.where(pred > self.high, 1.0, np.where(pred < self.low, -1.0, 0.0))
        return (law.jacobian_u(u, self.X) * sign[..., None]).reshape(-1, law.n_params)


@dataclass(frozen=True)
class FitObjective:
    """The least-squares objective's terms beyond the runs' plain squared residuals.

    Attributes:
        weights: one per run; each run's squared residuals are multiplied by its weight
            (None: all 1, the plain fit).
        ridge: adds ridge·Σ(u − ½)² (normalised parameters pulled toward the box's middle).
        guard: adds the distance of each guarded prediction outside its band
            (:class:`PredictionGuard`).
    """

    weights: np.ndarray | None = None
    ridge: float = 0.0
    guard: PredictionGuard | None = None


def cost_weights(cost: np.ndarray, power: float, top: float | None = None) -> np.ndarray:
    """The run weights of a cost-weighted fit, (cost / top) ** power; ``top`` the largest of
    ``cost`` unless given (a criterion that ranks candidates beside the chosen runs passes the
    largest of both)."""
    cost = np.asarray(cost, float)
    return (cost / (cost.max() if top is None else top)) ** power


def _residual_fn(law: ParametricLaw, X: np.ndarray, y: np.ndarray, objective: FitObjective):
    scale = np.sqrt(objective.ridge)
    guard = objective.guard
    root_w = (None if objective.weights is None
              else np.repeat(np.sqrt(np.asarray(objective.weights, float)), y.shape[1]))

    def residuals(u: np.ndarray) -> np.ndarray:
        r = (law.predict_u(u, X) - y).ravel()
        r = np.where(np.isfinite(r), r, 1e3)
        parts = [r if root_w is None else r * root_w]
        if guard is not None:
            parts.append(guard.residuals(law, u))
        if objective.ridge > 0:
            parts.append(scale * (u - 0.5))
        return np.concatenate(parts)

    def jac(u: np.ndarray) -> np.ndarray:
        j = law.jacobian_u(u, X).reshape(-1, law.n_params)
        parts = [j if root_w is None else j * root_w[:, None]]
        if guard is not None:
            parts.append(guard.jacobian(law, u))
        if objective.ridge > 0:
            parts.append(scale * np.eye(law.n_params))
        return np.vstack(parts)

    return residuals, jac


def fit_parametric(law: ParametricLaw, X: np.ndarray, y: np.ndarray, *,
                   rng: np.random.Generator, n_starts: int = 8,
                   warm: np.ndarray | None = None, max_nfev: int = 200,
                   screen_nfev: int = 0, n_polish: int = 2,
                   objective: FitObjective = FitObjective()) -> ParametricFit:
    """Least-squares fit of ``law`` to runs ``X`` with outcomes ``y`` (n, k) from several starts.

    ``warm`` (normalised) is tried first; ``n_starts`` uniform random starts follow. With
    ``screen_nfev`` > 0 every start first runs that many evaluations and only the ``n_polish``
    best (and the warm start) continue to ``max_nfev``: many cheap starts find the narrow valleys
    that a few long ones miss. ``objective``: the runs' weights, a ridge and a guard
    (:class:`FitObjective`). The recorded rss and σ² are the runs' alone, unweighted.
    """
    X = np.asarray(X, float)
    y = np.asarray(y, float).reshape(len(X), -1)
    residuals, jac = _residual_fn(law, X, y, objective)

    def solve(u0: np.ndarray, nfev: int):
        try:
            res = least_squares(residuals, u0, jac=jac, bounds=(0.0, 1.0), method="trf",
                                max_nfev=nfev)
        except (ValueError, np.linalg.LinAlgError):
            return None
        return res if np.isfinite(res.cost) else None

    starts = list(rng.random((n_starts, law.n_params)))
    if screen_nfev > 0:
        screened = [r for r in (solve(u0, screen_nfev) for u0 in starts) if r is not None]
        starts = [r.x for r in sorted(screened, key=lambda r: r.cost)[:n_polish]]
    if warm is not None:
        starts.insert(0, np.clip(warm, 0.0, 1.0))
    finished = [r for r in (solve(u0, max_nfev) for u0 in starts) if r is not None]
    best_u = (min(finished, key=lambda r: r.cost).x if finished
              else np.full(law.n_params, 0.5))
    r = (law.predict_u(best_u, X) - y).ravel()
    rss = float(np.sum(np.where(np.isfinite(r), r, 1e3) ** 2))
    n_obs = y.size
    return ParametricFit(law, best_u, law.to_theta(best_u), rss, n_obs,
                         rss / max(n_obs - law.n_params, 1))
