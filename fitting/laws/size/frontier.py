"""Trade-off frontiers and weight recommendation from the eq. 11 law (Fernandes et al. 2023 §3.4).

* :func:`frontier_2pair`: (L_1(N; p), L_2(N; 1 − p)) over p ∈ (0, 1) per size N (Fig. 7 right),
  with uncertainty bands from the law's parameter samples, optionally mapped through a quality
  law (loss → ChrF/BLEU, Fig. 8 right).
* :func:`frontier_kpair`: K pairs: all weight vectors on a simplex grid and the Pareto-efficient
  subset.
* :func:`recommend`: weights on the simplex minimising Σ_i r_i·M_i(N; w_i) for preferences r
  (implicit scalarisation), M = loss, or loss relative to a single-pair model of the same size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from fitting.core.base import FitError, json_safe
from fitting.core.uncertainty import percentile_range
from fitting.laws.size.effective import MultilingualLawFit, simplex_grid

__all__ = ["Frontier", "frontier_2pair", "frontier_kpair", "pareto_mask", "Recommendation",
           "recommend"]

MetricMap = Mapping[str, Callable[[np.ndarray], np.ndarray]]


@dataclass
class Frontier:
    """Predicted trade-off: ``values[N]`` is an array (#weights × #pairs) for ``weights``."""

    pairs: list[str]
    weights: np.ndarray
    values: dict[float, np.ndarray]
    lower: dict[float, np.ndarray] = field(default_factory=dict)
    upper: dict[float, np.ndarray] = field(default_factory=dict)
    metric: str = "loss"
    pareto: dict[float, np.ndarray] = field(default_factory=dict)
    #: predictive intervals at the target sizes, set by the report
    #: (:func:`fitting.intervals.eq11.frontier_intervals`); {} where none were built
    predictive: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-safe dict (sizes as string keys)."""
        return json_safe({
            "pairs": self.pairs, "metric": self.metric, "weights": self.weights,
            "values": {f"{n:g}": v for n, v in self.values.items()},
            "lower": {f"{n:g}": v for n, v in self.lower.items()},
            "upper": {f"{n:g}": v for n, v in self.upper.items()},
            "predictive": self.predictive,
        })


def _values(law: MultilingualLawFit, n: float, W: np.ndarray, pairs: Sequence[str],
            metric_map: MetricMap | None, samples: bool, level: float):
    cols, lo, hi = [], [], []
    for j, pair in enumerate(pairs):
        mm = (metric_map or {}).get(pair)
        v = law.predict(n, W[:, j], pair)
        cols.append(mm(v) if mm else v)
        if samples:
            s = law.predict_samples(n, W[:, j], pair)
            lo_j, hi_j = percentile_range(mm(s) if mm else s, level, estimate=cols[-1])
            lo.append(lo_j)
            hi.append(hi_j)
    val = np.column_stack(cols)
    if samples:
        return val, np.column_stack(lo), np.column_stack(hi)
    return val, None, None


def frontier_2pair(
    law: MultilingualLawFit,
    sizes: Sequence[float],
    *,
    pairs: Sequence[str] | None = None,
    n_weights: int = 99,
    metric_map: MetricMap | None = None,
    metric: str = "loss",
    bands: bool = True,
    level: float = 0.95,
) -> Frontier:
    """Predicted 2-pair frontier at each size: pair 1 gets p, pair 2 gets 1 − p (eq. 11)."""
    pairs = list(pairs or law.pairs or [])
    if len(pairs) != 2:
        raise FitError(f"a 2-pair frontier needs exactly 2 pairs, got {pairs}", column="pair")
    p = np.linspace(0, 1, n_weights + 2)[1:-1]
    W = np.column_stack([p, 1 - p])
    fr = Frontier(pairs=pairs, weights=W, values={}, metric=metric)
    use_bands = bands and bool(law.samples)
    for n in sizes:
        v, lo, hi = _values(law, float(n), W, pairs, metric_map, use_bands, level)
        fr.values[float(n)] = v
        if use_bands:
            fr.lower[float(n)], fr.upper[float(n)] = lo, hi
    return fr


def pareto_mask(values: np.ndarray, higher_is_better: bool = False) -> np.ndarray:
    """Rows of ``values`` (points × objectives) not dominated by another row."""
    v = -values if higher_is_better else values
    keep = np.ones(v.shape[0], dtype=bool)
    for i in range(v.shape[0]):
        if not keep[i]:
            continue
        dom = np.all(v <= v[i], axis=1) & np.any(v < v[i], axis=1)
        if dom.any():
            keep[i] = False
    return keep


def frontier_kpair(
    law: MultilingualLawFit,
    sizes: Sequence[float],
    *,
    pairs: Sequence[str] | None = None,
    step: float = 0.05,
    metric_map: MetricMap | None = None,
    metric: str = "loss",
    higher_is_better: bool = False,
    bands: bool = False,
    level: float = 0.95,
) -> Frontier:
    """K-pair frontier: every weight vector on a simplex grid with spacing ``step`` (all w_i > 0)
    and, per size, the Pareto-efficient subset in ``pareto[N]``."""
    pairs = list(pairs or law.pairs or [])
    if len(pairs) < 2:
        raise FitError("a frontier needs at least 2 pairs", column="pair")
    W = simplex_grid(len(pairs), step)
    W = W[np.all(W > 0, axis=1)]
    if not len(W):
        raise FitError(f"step {step} leaves no interior point of the {len(pairs)}-simplex")
    fr = Frontier(pairs=pairs, weights=W, values={}, metric=metric)
    use_bands = bands and bool(law.samples)
    for n in sizes:
        v, lo, hi = _values(law, float(n), W, pairs, metric_map, use_bands, level)
        fr.values[float(n)] = v
        fr.pareto[float(n)] = pareto_mask(v, higher_is_better)
        if use_bands:
            fr.lower[float(n)], fr.upper[float(n)] = lo, hi
    return fr


@dataclass
class Recommendation:
    """Recommended weights at one size with the predicted per-pair values."""

    n: float
    weights: dict[str, float]
    predicted: dict[str, float]
    interval: dict[str, tuple[float, float]] | None
    objective: str
    preferences: dict[str, float]
    uniform_predicted: dict[str, float]

    def to_json(self) -> dict:
        """JSON-safe dict."""
        return json_safe(self.__dict__)


def recommend(
    law: MultilingualLawFit,
    target_n: float,
    preferences: Mapping[str, float] | None = None,
    *,
    objective: str = "loss",
    min_weight: float = 1e-3,
    level: float = 0.95,
) -> Recommendation:
    """Weights w on the simplex minimising Σ_i r_i·M_i(N; w_i) at ``target_n`` (Fernandes §3.4).

    ``preferences`` r (default equal) are normalised to sum 1. ``objective="loss"`` uses the
    predicted loss; ``"relative"`` the loss relative to a single-pair model of the same size,
    L_i(N; w_i) / L_i(N; 1), so pairs with different L∞ count comparably.
    """
    pairs = list(law.pairs or [])
    prefs = {p: 1.0 for p in pairs} if preferences is None else dict(preferences)
    unknown = [p for p in prefs if p not in pairs]
    if unknown:
        raise FitError(f"preferences name unknown pair(s) {unknown}; fitted pairs: {pairs}",
                       column="pair")
    r = np.array([float(prefs.get(p, 0.0)) for p in pairs])
    if np.any(r < 0) or not np.isfinite(r).all() or r.sum() <= 0:
        raise FitError(f"preferences must be non-negative with a positive sum, got {prefs}")
    r = r / r.sum()
    if objective not in ("loss", "relative"):
        raise FitError(f"objective must be 'loss' or 'relative', got {objective!r}")
    n = float(target_n)
    ref = np.array([law.predict(n, 1.0, p) for p in pairs]).reshape(-1)

    def obj(w: np.ndarray) -> float:
        vals = np.array([law.predict(n, w[j], p) for j, p in enumerate(pairs)]).reshape(-1)
        if objective == "relative":
            vals = vals / ref
        return float(np.dot(r, vals))

    k = len(pairs)
    starts = [np.full(k, 1.0 / k), np.maximum(r, min_weight) / np.maximum(r, min_weight).sum()]
    grid = simplex_grid(k, 0.1 if k <= 4 else 0.25)
    grid = grid[np.all(grid >= min_weight, axis=1)]
    if len(grid):
        starts.append(grid[int(np.argmin([obj(w) for w in grid]))])
    best, best_v = None, np.inf
    cons = [{"type": "eq", "fun": lambda w: np.sum(w) - 1.0}]
    # each end point is judged by the objective itself, converged or not
    # (fitting.core.engine.converged is for fits, whose last iterate is no estimate)
    for s in starts:
        res = minimize(obj, s, method="SLSQP", bounds=[(min_weight, 1.0)] * k, constraints=cons,
                       options={"ftol": 1e-12, "maxiter": 500})
        w = np.clip(res.x, min_weight, 1.0)
        w = w / w.sum()
        v = obj(w)
        if v < best_v:
            best, best_v = w, v
    pred = {p: float(law.predict(n, best[j], p)[()]) for j, p in enumerate(pairs)}
    interval = None
    if law.samples:
        interval = {}
        for j, p in enumerate(pairs):
            s = law.predict_samples(n, best[j], p).reshape(-1)
            lo, hi = percentile_range(s, level, estimate=pred[p])
            interval[p] = (float(lo), float(hi))
    uni = {p: float(law.predict(n, 1.0 / k, p)[()]) for p in pairs}
    return Recommendation(n=n, weights={p: float(best[j]) for j, p in enumerate(pairs)},
                          predicted=pred, interval=interval, objective=objective,
                          preferences={p: float(r[j]) for j, p in enumerate(pairs)},
                          uniform_predicted=uni)
