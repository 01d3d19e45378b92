"""Parameter uncertainty and prediction bands: perturbation refits (Fernandes et al. 2023
footnote 5: every loss times 1 + 0.01·ε, refitted), the bootstrap (points or groups resampled
with replacement), and bands (a prediction evaluated on every parameter sample, summarised by
percentiles, widened where needed to contain the estimate: [min(q_lo, θ̂), max(q_hi, θ̂)]).

A refit fails when it raises :class:`~fitting.core.base.FitError` (or a numerical error): too
few points, or an optimiser that did not converge (:func:`fitting.core.engine.converged`).
Failed refits are counted (``n_failed``, recorded by each law in its ``meta``) and left out of
every sd, interval and band; never replaced by the estimate. Why the widening never lowers the
coverage: docs/reference/laws.md, "Engine".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from fitting.core.base import FitError

__all__ = [
    "perturbation_samples",
    "bootstrap_samples",
    "summarize_samples",
    "band_from_samples",
    "percentile_range",
    "beyond_sd",
    "pair_samples",
    "pair_band",
]

Refit = Callable[[np.ndarray], Mapping[str, float]]


def beyond_sd(difference: float, sd: float, multiple: float = 2.0) -> bool:
    """Whether ``difference`` (signed: positive in the direction tested) exceeds ``multiple``
    times its ``sd``; False when the sd is unknown (NaN or infinite)."""
    return bool(np.isfinite(sd) and difference > multiple * sd)


def pair_samples(samples: Mapping[str, Sequence[float]], pair: str
                 ) -> dict[str, Sequence[float]]:
    """The samples of one pair's parameters (``name[pair]``, ``name[pair,…]``) of a law fitted
    per pair: each pair's refits are its own, and failed refits (not converged) differ in number
    between pairs, so a band of one pair reads that pair's samples alone."""
    return {k: v for k, v in samples.items()
            if k.endswith(f"[{pair}]") or f"[{pair}," in k}


def _collect(draws: list[Mapping[str, float]], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {k: np.array([d[k] for d in draws], dtype=np.float64) for k in names}


def perturbation_samples(
    refit: Refit,
    y: np.ndarray,
    *,
    n_refits: int = 100,
    sigma_rel: float = 0.01,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], int]:
    """Refit on ``y·(1 + sigma_rel·ε)``, ε ~ N(0, 1) i.i.d. (Fernandes footnote 5).

    ``refit(y_new)`` returns the named parameters, or raises FitError when it fails (e.g. its
    optimiser did not converge). Returns (samples of the successful refits, n_failed).
    """
    rng = np.random.default_rng(seed)
    y = np.asarray(y, dtype=np.float64)
    draws: list[Mapping[str, float]] = []
    failed = 0
    for _ in range(int(n_refits)):
        y_new = y * (1.0 + sigma_rel * rng.standard_normal(y.shape))
        try:
            draws.append(refit(y_new))
        except (FitError, ValueError, np.linalg.LinAlgError, FloatingPointError):
            failed += 1
    if not draws:
        raise FitError(f"all {n_refits} perturbation refits failed")
    return _collect(draws, list(draws[0])), failed


def bootstrap_samples(
    refit_idx: Callable[[np.ndarray], Mapping[str, float]],
    n: int,
    *,
    n_boot: int = 200,
    seed: int = 0,
    groups: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], int]:
    """Refit on bootstrap resamples; ``refit_idx(indices)`` fits the rows ``indices``.

    With ``groups`` (one label per row) whole groups are resampled (e.g. all rows of one run).
    Resamples on which the law cannot be fitted (too few distinct points, a refit that did not
    converge: ``refit_idx`` raises FitError) count as failures and are left out of the samples.
    """
    rng = np.random.default_rng(seed)
    draws: list[Mapping[str, float]] = []
    failed = 0
    if groups is not None:
        labels, inverse = np.unique(np.asarray(groups), return_inverse=True)
        members = [np.flatnonzero(inverse == g) for g in range(len(labels))]
    for _ in range(int(n_boot)):
        if groups is None:
            idx = rng.integers(0, n, size=n)
        else:
            pick = rng.integers(0, len(members), size=len(members))
            idx = np.concatenate([members[g] for g in pick])
        try:
            draws.append(refit_idx(np.sort(idx)))
        except (FitError, ValueError, np.linalg.LinAlgError, FloatingPointError):
            failed += 1
    if not draws:
        raise FitError(f"all {n_boot} bootstrap refits failed")
    return _collect(draws, list(draws[0])), failed


def _reach(lo, hi, estimate):
    """(lo, hi) widened to contain ``estimate`` (elementwise; a nan bound or estimate stays as is)."""
    est = np.asarray(estimate, dtype=np.float64)
    ok = np.isfinite(est)
    return np.where(ok, np.minimum(lo, est), lo), np.where(ok, np.maximum(hi, est), hi)


def percentile_range(values: np.ndarray, level: float = 0.95, estimate: ArrayLike | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Central ``level`` percentile range of ``values`` over its first axis (the samples), nan
    samples ignored, widened to contain ``estimate`` when given (module docstring)."""
    q = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):  # ±inf samples (a pair at weight 0): nan bound
        lo = np.nanquantile(values, q, axis=0)
        hi = np.nanquantile(values, 1.0 - q, axis=0)
    return (lo, hi) if estimate is None else _reach(lo, hi, estimate)


def summarize_samples(
    samples: Mapping[str, np.ndarray],
    level: float = 0.95,
    estimate: Mapping[str, float] | None = None,
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Standard deviation and central ``level`` percentile interval of each parameter.

    With ``estimate`` (the point fit's parameters) each interval is widened to contain it
    (module docstring).
    """
    stderr, intervals = {}, {}
    for k, v in samples.items():
        v = np.asarray(v, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size < 2:
            stderr[k] = float("nan")
            intervals[k] = (float("nan"), float("nan"))
            continue
        stderr[k] = float(np.std(v, ddof=1))
        lo, hi = percentile_range(v, level, None if estimate is None else estimate.get(k))
        intervals[k] = (float(lo), float(hi))
    return stderr, intervals


def band_from_samples(
    predict: Callable[[Mapping[str, float]], np.ndarray],
    samples: Mapping[str, Sequence[float]],
    level: float = 0.95,
    estimate: Mapping[str, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) percentile band of ``predict(params)`` over the parameter samples.

    With ``estimate`` (the point fit's parameters) the band is widened to contain
    ``predict(estimate)`` (module docstring).
    """
    names = list(samples)
    if not names:
        raise FitError("no parameter samples: fit with uncertainty to get bands")
    m = len(samples[names[0]])
    preds = []
    for j in range(m):
        p = {k: float(samples[k][j]) for k in names}
        with np.errstate(all="ignore"):
            preds.append(np.asarray(predict(p), dtype=np.float64))
    arr = np.stack(preds)
    if estimate is None:
        return percentile_range(arr, level)
    with np.errstate(all="ignore"):
        at_estimate = predict(estimate)
    return percentile_range(arr, level, estimate=at_estimate)


def pair_band(predict: Callable[[Mapping[str, float]], np.ndarray],
              samples: Mapping[str, Sequence[float]] | None, pair: str, level: float = 0.95,
              estimate: Mapping[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`band_from_samples` of a law fitted per pair, over ``pair``'s own samples
    (:func:`pair_samples`); FitError when the fit has no uncertainty samples."""
    if not samples:
        raise FitError("this fit has no uncertainty samples")
    return band_from_samples(predict, pair_samples(samples, pair), level, estimate=estimate)
