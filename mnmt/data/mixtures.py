"""Mixtures of tasks: explicit weights, temperature and oversampling weights, grids.

A mixture is registered in ``seqio.MixtureRegistry`` and, for our training iterator, in a local
table of normalised weights. Weights are the sampling probabilities of implicit scalarization
(Fernandes et al. 2023 §2.2, eq. 8: each batch draws pair i with probability p_i); p_i = 0 means
the pair is not trained but is still evaluated (its task stays in the mixture with rate 0).

Weight formulas live in :mod:`fitting.data.sampling` (numpy only) and are reused here:
temperature sampling p_i ∝ n_i^{1/T} (Chen et al. 2023 §4.2) and Caillaut et al. 2024 §3.1
oversampling (optionally applied per domain group).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "register_weighted_mixture",
    "register_temperature_mixture",
    "register_oversampling_mixture",
    "mixture_weights",
    "validate_weights",
    "two_pair_grid",
    "simplex_grid",
    "TWO_PAIR_GRID",
]

# Fernandes et al. 2023 §3.2: the weights of the first pair in the two-pair studies.
TWO_PAIR_GRID = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)

_WEIGHTS: dict[str, dict[str, float]] = {}


def validate_weights(weights: Mapping[str, Any], what: str = "weights") -> dict[str, float]:
    """Normalised weights; errors for negative, NaN/inf, non-numeric or all-zero weights."""
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(f"{what}: expected a non-empty mapping task_name -> weight, got {weights!r}")
    out: dict[str, float] = {}
    for name, w in weights.items():
        try:
            x = float(w)
        except (TypeError, ValueError):
            raise ValueError(f"{what}[{name!r}]: expected a number >= 0, got {w!r}") from None
        if math.isnan(x) or math.isinf(x):
            raise ValueError(f"{what}[{name!r}]: expected a finite number >= 0, got {x}")
        if x < 0:
            raise ValueError(f"{what}[{name!r}]: expected a weight >= 0, got {x}")
        out[str(name)] = x
    total = math.fsum(out.values())
    if total <= 0:
        raise ValueError(f"{what}: all weights are zero; at least one task needs a positive weight")
    return {k: v / total for k, v in out.items()}


def register_weighted_mixture(name: str, weights: Mapping[str, float]) -> str:
    """Register ``name`` with explicit per-task weights (normalised to sum to 1) → ``name``.

    Tasks with weight 0 stay members (evaluated, never sampled). Re-registering the same
    weights is harmless; different weights under an existing name replace the old mixture.
    """
    import seqio

    if not isinstance(name, str) or not name:
        raise ValueError(f"mixture name: expected a non-empty string, got {name!r}")
    norm = validate_weights(weights, f"mixture {name!r} weights")
    unknown = [t for t in norm if t not in seqio.TaskRegistry.names()]
    if unknown:
        raise ValueError(
            f"mixture {name!r}: unknown tasks {unknown}; register them first "
            f"(e.g. mnmt.data.tasks.register_synthetic_tasks)"
        )
    if _WEIGHTS.get(name) == norm and name in seqio.MixtureRegistry.names():
        return name
    if name in seqio.MixtureRegistry.names():
        seqio.MixtureRegistry.remove(name)
    seqio.MixtureRegistry.add(name, [(t, w) for t, w in norm.items()])
    _WEIGHTS[name] = norm
    return name


def mixture_weights(name: str) -> dict[str, float]:
    """Normalised weights of a mixture (registered here, or any seqio mixture / task)."""
    if name in _WEIGHTS:
        return dict(_WEIGHTS[name])
    import seqio

    if name in seqio.TaskRegistry.names():
        return {name: 1.0}
    if name in seqio.MixtureRegistry.names():
        mix = seqio.MixtureRegistry.get(name)
        return validate_weights({t.name: mix.get_rate(t) for t in mix.tasks}, f"mixture {name!r}")
    raise ValueError(f"unknown mixture or task {name!r}")


def _sizes_of(tasks: Sequence[str], sizes: Mapping[str, float] | None) -> dict[str, float]:
    if sizes is not None:
        missing = [t for t in tasks if t not in sizes]
        if missing:
            raise ValueError(f"sizes: missing training sizes for tasks {missing}")
        return {t: float(sizes[t]) for t in tasks}
    from mnmt.data.tasks import get_task_info

    out = {}
    for t in tasks:
        n = get_task_info(t).train_size
        if n is None:
            raise ValueError(
                f"task {t!r} has an unlimited training stream: pass sizes= explicitly for "
                "temperature / oversampling weights"
            )
        out[t] = float(n)
    return out


def register_temperature_mixture(
    name: str, tasks: Sequence[str], T: float, sizes: Mapping[str, float] | None = None
) -> str:
    """Mixture with p_i ∝ n_i^{1/T} (Chen et al. 2023 §4.2); sizes default to the task caps."""
    from fitting.data.sampling import temperature_weights

    n = _sizes_of(tasks, sizes)
    w = temperature_weights([n[t] for t in tasks], T)
    return register_weighted_mixture(name, dict(zip(tasks, (float(x) for x in w), strict=True)))


def register_oversampling_mixture(
    name: str,
    tasks: Sequence[str],
    t: float,
    sizes: Mapping[str, float] | None = None,
    groups: Mapping[str, str] | None = None,
) -> str:
    """Mixture with Caillaut et al. 2024 §3.1 oversampling weights (per ``groups`` domain)."""
    from fitting.data.sampling import oversampling_weights

    n = _sizes_of(tasks, sizes)
    kwargs: dict[str, Any] = {}
    if groups is not None:
        missing = [x for x in tasks if x not in groups]
        if missing:
            raise ValueError(f"groups: no domain given for tasks {missing}")
        kwargs["groups"] = [groups[x] for x in tasks]
    w = oversampling_weights([n[x] for x in tasks], t, **kwargs)
    return register_weighted_mixture(name, dict(zip(tasks, (float(x) for x in w), strict=True)))


def two_pair_grid(
    first: str, second: str, ps: Iterable[float] = TWO_PAIR_GRID
) -> list[dict[str, float]]:
    """Weights {first: p, second: 1 - p} for each p (Fernandes et al. 2023 §3.2 grid)."""
    out = []
    for p in ps:
        p = float(p)
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"two_pair_grid: expected p in [0, 1], got {p}")
        out.append({first: p, second: 1.0 - p})
    return out


def simplex_grid(tasks: Sequence[str], step: float = 0.1, *, min_weight: float = 0.0) -> list[dict[str, float]]:
    """All weight vectors on the K-simplex with coordinates multiples of ``step``.

    ``step`` must divide 1 (e.g. 0.1, 0.25); ``min_weight`` drops points where a pair gets
    less (use it to keep every pair trained, e.g. Fernandes App. H's three-pair study).
    """
    if len(tasks) < 1 or len(set(tasks)) != len(tasks):
        raise ValueError(f"simplex_grid: expected distinct task names, got {list(tasks)}")
    m = round(1.0 / step)
    if m < 1 or abs(m * step - 1.0) > 1e-9:
        raise ValueError(f"simplex_grid: step must divide 1 (e.g. 0.1, 0.25), got {step}")
    out = []
    for combo in itertools.product(range(m + 1), repeat=len(tasks) - 1):
        rest = m - sum(combo)
        if rest < 0:
            continue
        w = [c / m for c in combo] + [rest / m]
        if min(w) + 1e-12 < min_weight:
            continue
        out.append(dict(zip(tasks, w, strict=True)))
    return out
