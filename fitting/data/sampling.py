"""Mixture sampling weights: temperature sampling and Caillaut's oversampling formula.

- :func:`temperature_weights` — p'_i = p_i^{1/T} / Σ_j p_j^{1/T} with p_i = n_i / Σ_j n_j
  (Chen et al. 2023 §2.1 and §4.2; the standard temperature-sampling baseline, T ∈ {1,2,5,10,100}).
- :func:`oversampling_sizes` / :func:`oversampling_weights` — Caillaut et al. 2024 §3.1:
  P(D_i) = N_i / Σ_j N_j, T(D_i, t) = P(D_i)^{1/t},
  k_i = floor(T(D_i, t) · max_j N_j / max_j T(D_j, t)), P_t(D_i) = k_i / Σ_j k_j.
  Caillaut apply it separately per domain (general vs. financial): pass ``groups`` to compute the
  k_i of each group with that group's own P, max N and max T, then normalise over all datasets.
- :func:`unimax_weights` — UniMax (Chung et al. 2023, Alg. 1): the budget spread uniformly over
  the datasets, none repeated more than a maximum number of epochs; what a small dataset cannot
  take goes to the larger ones.
- :func:`epoch_cap_weights` — the largest weight each dataset can take within an epoch cap.
- :func:`dirichlet_mixtures` — seeded random mixtures on the simplex (RegMix-style designs).

Pure numpy; used by ``mnmt.data.mixtures`` and the Chen eq. 7 comparisons in ``fitting.laws.mixture.dpl``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "temperature_weights",
    "oversampling_sizes",
    "oversampling_weights",
    "proportional_weights",
    "unimax_weights",
    "epoch_cap_weights",
    "dirichlet_mixtures",
]


def _as_sizes(sizes: Any, name: str = "sizes") -> tuple[np.ndarray, list[str] | None]:
    """Validate dataset sizes → (float array, keys or None). Mappings keep their key order."""
    keys: list[str] | None = None
    if isinstance(sizes, Mapping):
        keys = [str(k) for k in sizes.keys()]
        values = list(sizes.values())
    else:
        values = list(sizes) if not isinstance(sizes, np.ndarray) else sizes.ravel().tolist()
    if len(values) == 0:
        raise ValueError(f"{name}: expected at least one dataset size, got none")
    arr = np.empty(len(values), dtype=float)
    for i, v in enumerate(values):
        label = f"{name}[{keys[i]!r}]" if keys is not None else f"{name}[{i}]"
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{label}: expected a non-negative number, got {v!r}") from None
        if not np.isfinite(x):
            raise ValueError(f"{label}: expected a finite non-negative size, got {x!r}")
        if x < 0:
            raise ValueError(f"{label}: expected a non-negative size, got {x!r}")
        arr[i] = x
    if not np.any(arr > 0):
        raise ValueError(f"{name}: all dataset sizes are zero; at least one must be positive")
    return arr, keys


def _check_temperature(T: float, name: str = "T") -> float:
    try:
        t = float(T)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a positive number, got {T!r}") from None
    if not np.isfinite(t) and t != np.inf:
        raise ValueError(f"{name}: expected a positive number, got {T!r}")
    if not t > 0:
        raise ValueError(f"{name}: expected a positive temperature, got {T!r}")
    return t


def proportional_weights(sizes: Sequence[float] | Mapping[str, float] | np.ndarray) -> np.ndarray:
    """p_i = n_i / Σ_j n_j (temperature T = 1)."""
    n, _ = _as_sizes(sizes)
    return n / n.sum()


def temperature_weights(
    sizes: Sequence[float] | Mapping[str, float] | np.ndarray, T: float
) -> np.ndarray:
    """Temperature-sampling weights p'_i ∝ n_i^{1/T} (Chen et al. 2023 §4.2).

    ``sizes`` are the numbers of training examples n_i (any unit; a mapping keeps its key order).
    T = 1 gives proportional sampling, T → ∞ (``np.inf`` allowed) uniform sampling over the
    datasets with n_i > 0. Datasets of size 0 get weight 0. Returns an array summing to 1.

    Example (Chen's 4-direction setting): sizes 10M/4.6M/0.26M/0.26M at T = 5 give
    ≈ 0.355/0.304/0.171/0.171.
    """
    n, _ = _as_sizes(sizes)
    t = _check_temperature(T)
    p = n / n.sum()
    pos = p > 0
    w = np.zeros_like(p)
    if np.isinf(t):
        w[pos] = 1.0
    else:
        # log-space for numerical safety with tiny p and large T
        logw = np.log(p[pos]) / t
        w[pos] = np.exp(logw - logw.max())
    return w / w.sum()


def _oversample_one(n: np.ndarray, t: float, floor: bool) -> np.ndarray:
    """Caillaut §3.1 for one collection of datasets: the oversampled sizes k_i."""
    p = n / n.sum()
    factor = np.zeros_like(p)
    pos = p > 0
    factor[pos] = 1.0 if np.isinf(t) else np.exp(np.log(p[pos]) / t)
    k = factor * n.max() / factor.max()
    if floor:
        # tiny tolerance so k exactly representable (e.g. the largest dataset) is not floored down
        k = np.floor(k * (1 + 1e-12))
    return k


def oversampling_sizes(
    sizes: Sequence[float] | Mapping[str, float] | np.ndarray,
    t: float = 5.0,
    *,
    groups: Sequence[Any] | Mapping[str, Any] | None = None,
    floor: bool = True,
) -> np.ndarray:
    """Oversampled dataset sizes k_i of Caillaut et al. 2024 §3.1.

    k_i = floor(P(D_i)^{1/t} · max_j N_j / max_j P(D_j)^{1/t}): the largest dataset keeps its size
    and every other one is oversampled by a factor ≥ 1. With ``groups`` (one label per dataset,
    or a mapping dataset → label when ``sizes`` is a mapping), the formula is applied separately
    within each group, as Caillaut do for the general and financial domains. ``floor=False``
    skips the integer floor (useful when sizes are in millions).
    """
    n, keys = _as_sizes(sizes)
    tt = _check_temperature(t, "t")
    if groups is None:
        return _oversample_one(n, tt, floor)
    if isinstance(groups, Mapping):
        if keys is None:
            raise ValueError("groups: a mapping of groups needs sizes given as a mapping too")
        missing = [k for k in keys if k not in groups]
        if missing:
            raise ValueError(f"groups: no group given for dataset(s) {missing}")
        labels = [groups[k] for k in keys]
    else:
        labels = list(groups)
        if len(labels) != len(n):
            raise ValueError(
                f"groups: expected one label per dataset ({len(n)}), got {len(labels)}"
            )
    k = np.zeros_like(n)
    for g in dict.fromkeys(labels):  # first-seen order
        idx = np.array([i for i, lab in enumerate(labels) if lab == g])
        if not np.any(n[idx] > 0):
            continue  # an all-empty group contributes nothing
        k[idx] = _oversample_one(n[idx], tt, floor)
    return k


def oversampling_weights(
    sizes: Sequence[float] | Mapping[str, float] | np.ndarray,
    t: float = 5.0,
    *,
    groups: Sequence[Any] | Mapping[str, Any] | None = None,
    floor: bool = True,
) -> np.ndarray:
    """Sampling probabilities P_t(D_i) = k_i / Σ_j k_j of Caillaut et al. 2024 §3.1.

    Without groups and without the floor this equals :func:`temperature_weights` (the max-size
    scaling cancels); the floor and per-group application are what differ. See
    :func:`oversampling_sizes` for the arguments.
    """
    k = oversampling_sizes(sizes, t, groups=groups, floor=floor)
    total = k.sum()
    if total <= 0:
        raise ValueError(
            "sizes: every oversampled size floored to 0 (sizes below 1 with floor=True); "
            "pass floor=False for sizes in fractional units"
        )
    return k / total


def epoch_cap_weights(
    sizes: Sequence[float] | Mapping[str, float] | np.ndarray, budget: float, epochs: float
) -> np.ndarray:
    """Upper bounds w_i ≤ epochs · n_i / budget: the weight at which dataset i is seen ``epochs``
    times in a run that samples ``budget`` examples in all (same unit as ``sizes``). May exceed 1."""
    n, _ = _as_sizes(sizes)
    if not (np.isfinite(budget) and budget > 0):
        raise ValueError(f"budget: expected a positive number of examples, got {budget!r}")
    if not (np.isfinite(epochs) and epochs > 0):
        raise ValueError(f"epochs: expected a positive epoch cap, got {epochs!r}")
    return epochs * n / float(budget)


def unimax_weights(
    sizes: Sequence[float] | Mapping[str, float] | np.ndarray, budget: float, epochs: float
) -> np.ndarray:
    """UniMax sampling weights (Chung et al. 2023, Alg. 1).

    Datasets are visited from the smallest up; each gets an equal share of the budget that is
    left, b_i = min(left / (datasets left), epochs · n_i), so no dataset is repeated more than
    ``epochs`` times and the rest is uniform. Weights w_i = b_i / Σ_j b_j (when every dataset is
    capped the budget cannot be spent and the weights are proportional to the caps). ``budget``
    is the run's total number of examples (same unit as ``sizes``).
    """
    caps = epoch_cap_weights(sizes, budget, epochs) * float(budget)
    left = float(budget)
    alloc = np.zeros_like(caps)
    order = np.argsort(caps, kind="stable")
    for k, i in enumerate(order):
        alloc[i] = min(left / (len(order) - k), caps[i])
        left -= alloc[i]
    return alloc / alloc.sum()


def dirichlet_mixtures(num_pairs: int, count: int, *, concentration: float = 1.0,
                       seed: int = 0, min_weight: float = 0.0) -> np.ndarray:
    """``count`` seeded mixtures drawn from a symmetric Dirichlet(``concentration``) over
    ``num_pairs`` datasets, shape (count, num_pairs), rows summing to 1; weights below
    ``min_weight`` are set to 0 and the row renormalised (RegMix-style sparse designs)."""
    if num_pairs < 1 or count < 0:
        raise ValueError(f"dirichlet_mixtures: expected num_pairs >= 1 and count >= 0, got "
                         f"{num_pairs}, {count}")
    if not (np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration: expected a positive number, got {concentration!r}")
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.full(num_pairs, float(concentration)), size=count)
    if min_weight > 0 and count:
        w = np.where(w < min_weight, 0.0, w)
        empty = w.sum(axis=1) == 0
        w[empty, np.argmax(rng.random((int(empty.sum()), num_pairs)), axis=1)] = 1.0
    return w / w.sum(axis=1, keepdims=True) if count else w
