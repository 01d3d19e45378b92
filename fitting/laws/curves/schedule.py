"""Learning-rate schedule areas: what the schedule-aware curve laws read from a run's LR log.

:func:`dense_lr` turns the logged rates into η_i at every step (piecewise-linear between logged
steps, the first value held back to step 0); then, the loss at step s taken after updates 1…s:
the forward area S1(s) = Σ_{i≤s} η_i (:func:`forward_area`), the LR drops d_i = η_{i−1} − η_i, 0
during the warm-up (:func:`lr_drops`), the annealing area with momentum S2(s) = Σ_{i≤s} m_i,
m_i = λ·m_{i−1} + d_i (Tissue et al. 2024 eq. 1; :func:`annealing_area`), and the Multi-Power
Law's loss reduction sum Σ_k d_k·G(η_k^−γ S_k(t)) (Luo et al. 2025 eq. 1), taken in blocks
between knots (:func:`reduction_knots`, :func:`reduction_sum`). Details:
docs/reference/laws.md, "Schedule-aware curve laws".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from fitting.core.base import FitError

__all__ = ["dense_lr", "warmup_end", "forward_area", "lr_drops", "annealing_area",
           "ReductionKnots", "reduction_knots", "reduction_sum", "DEFAULT_LAMBDA"]

#: Tissue et al. 2024: the decay factor λ of the annealing momentum (0.999 in their fits)
DEFAULT_LAMBDA = 0.999


def dense_lr(steps: Sequence[float] | np.ndarray, lr: Sequence[float] | np.ndarray,
             last_step: int | None = None, *, run: str = "") -> np.ndarray:
    """η_i at every step i = 0…``last_step`` (default: the last logged step) from a log of
    (step, lr): linear between logged steps, constant before the first and after the last.

    FitError for non-finite or negative rates, fewer than one point, or steps that repeat with
    different rates."""
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(lr, dtype=np.float64)
    who = f"run {run!r}: " if run else ""
    if s.size == 0 or s.shape != v.shape:
        raise FitError(f"{who}the learning-rate log needs matching step and lr values "
                       f"(got {s.size} and {v.size})", column="lr")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(v)) and np.all(v >= 0)):
        raise FitError(f"{who}learning rates must be finite and ≥ 0", column="lr")
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    uniq, first = np.unique(s, return_index=True)
    if uniq.size < s.size:  # a step logged twice (a restart): the mean of its rates
        v = np.bincount(np.searchsorted(uniq, s), weights=v) / np.bincount(np.searchsorted(uniq, s))
        s = uniq
    end = int(np.ceil(s[-1])) if last_step is None else int(last_step)
    return np.interp(np.arange(end + 1, dtype=np.float64), s, v)


def warmup_end(eta: np.ndarray) -> int:
    """The end of the warm-up: the first step at which η reaches its maximum."""
    return int(np.argmax(np.asarray(eta)))


def forward_area(eta: np.ndarray) -> np.ndarray:
    """S1(s) = Σ_{i=1}^{s} η_i for s = 0…T (S1(0) = 0; Tissue eq. 1, Luo's S1 + S_W)."""
    eta = np.asarray(eta, dtype=np.float64)
    out = np.zeros_like(eta)
    out[1:] = np.cumsum(eta[1:])
    return out


def lr_drops(eta: np.ndarray) -> np.ndarray:
    """d_i = η_{i−1} − η_i for i ≥ 1 (d_0 = 0), 0 up to :func:`warmup_end`."""
    eta = np.asarray(eta, dtype=np.float64)
    d = np.zeros_like(eta)
    d[1:] = eta[:-1] - eta[1:]
    d[: warmup_end(eta) + 1] = 0.0
    return d


def annealing_area(eta: np.ndarray, lam: float = DEFAULT_LAMBDA) -> np.ndarray:
    """S2(s) = Σ_{i=1}^{s} m_i, m_i = λ·m_{i−1} + d_i (Tissue et al. 2024, eq. 1), s = 0…T."""
    if not 0.0 <= lam < 1.0:
        raise FitError(f"the annealing decay λ must lie in [0, 1), got {lam!r}", column="lam")
    m = lfilter([1.0], [1.0, -float(lam)], lr_drops(eta))
    return np.cumsum(m)


@dataclass(frozen=True)
class ReductionKnots:
    """The pieces of the MPL sum at steps t (n of them) over M blocks of k.

    ``s1_t`` (n,): S1(t); ``drop`` (n × M): the block's summed d_k where the block ends at or
    before t, else 0; ``area`` (n × M): S_k(t) = S1(t) − S1(k − 1) at the block's midpoint k
    (0 where the block is after t); ``eta_k`` (M,): η at the midpoint, floored at 10⁻⁹ of the
    peak rate."""

    s1_t: np.ndarray
    drop: np.ndarray
    area: np.ndarray
    eta_k: np.ndarray


def reduction_knots(eta: np.ndarray, steps: np.ndarray, max_knots: int = 400) -> ReductionKnots:
    """Blocks of k for :func:`reduction_sum` at ``steps``: their edges are every step t asked
    for plus ``max_knots`` evenly spaced steps (all steps when the run has fewer)."""
    eta = np.asarray(eta, dtype=np.float64)
    t = np.asarray(steps, dtype=np.int64)
    T = eta.size - 1
    if t.size and (t.min() < 0 or t.max() > T):
        raise FitError(f"steps must lie in [0, {T}] (the logged schedule); got {t.min()}…{t.max()}",
                       column="step")
    grid = np.arange(T + 1) if T + 1 <= max_knots else np.round(
        np.linspace(0, T, max_knots)).astype(np.int64)
    edges = np.unique(np.concatenate([[0], grid, t]))
    s1 = forward_area(eta)
    cum_d = np.cumsum(lr_drops(eta))
    lo, hi = edges[:-1], edges[1:]            # block j holds k = lo+1 … hi
    drop = cum_d[hi] - cum_d[lo]
    mid = 0.5 * (lo + 1 + hi)
    # η_k floored at 1e-9 of the peak: a rate cooled to 0 makes G(·) = 1, not inf · 0
    eta_k = np.maximum(np.interp(mid, np.arange(T + 1), eta), 1e-9 * max(eta.max(), 1e-300))
    s1_before = np.interp(mid - 1.0, np.arange(T + 1), s1)   # S1(k − 1)
    s1_t = s1[t]
    inside = hi[None, :] <= t[:, None]
    area = np.where(inside, s1_t[:, None] - s1_before[None, :], 0.0)
    return ReductionKnots(s1_t=s1_t, drop=np.where(inside, drop[None, :], 0.0), area=area,
                          eta_k=eta_k)


def reduction_sum(knots: ReductionKnots, C: float, beta: float, gamma: float) -> np.ndarray:
    """Σ_k d_k G(η_k^{−γ} S_k(t)), G(x) = 1 − (C·x + 1)^{−β} (Luo et al. 2025, the MPL's LD(t)
    without its factor B), at the steps of ``knots``."""
    x = knots.area * np.power(knots.eta_k, -gamma)[None, :]
    g = 1.0 - np.power(C * x + 1.0, -beta)
    return np.sum(knots.drop * g, axis=1)
