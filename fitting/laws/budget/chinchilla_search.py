"""The starts of the Chinchilla fit and the search from them (Hoffmann et al. 2022; Besiroglu et
al. 2024): the published grid of L-BFGS starts, the ``init`` paths of
:func:`~fitting.laws.budget.chinchilla.fit_chinchilla` (``"grid"``, ``"varpro"``, ``"auto"``) and the
polishing of the best end points.

:func:`search_starts` runs one path and returns a :class:`StartSearch`: what ran, where every
start ended and the polished optima, best first. The optimiser it drives (vectorised L-BFGS,
variable-projection starts, polishing, the lattice check) is :mod:`fitting.laws.budget.chinchilla_opt`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fitting.core.base import FitError
from fitting.laws.budget.chinchilla_opt import (
    huber_objective,
    irls_polish_many,
    lbfgs_polish_many,
    multi_start,
    profile_check,
    to_theta,
    varpro_starts,
)

__all__ = ["published_grid", "grid_starts", "INITS", "AUTO_MIN_STARTS_AT_OPTIMUM", "StartSearch",
           "search_starts"]


def published_grid(tied_exponents: bool = False) -> dict[str, np.ndarray]:
    """The published grid of L-BFGS starts (Hoffmann et al.; Besiroglu et al. 2024)."""
    g = {
        "a": np.arange(0.0, 25.0 + 1e-9, 5.0),
        "b": np.arange(0.0, 25.0 + 1e-9, 5.0),
        "e": np.arange(-1.0, 1.0 + 1e-9, 0.5),
        "alpha": np.arange(0.0, 2.0 + 1e-9, 0.5),
        "beta": np.arange(0.0, 2.0 + 1e-9, 0.5),
    }
    if tied_exponents:
        del g["beta"]
    return g


def grid_starts(grid: Mapping[str, Sequence[float]] | np.ndarray | None, tied: bool) -> np.ndarray:
    """Cartesian product of the grid → starts (S, 5) or (S, 4) in order a, b, e, α[, β]."""
    names = ["a", "b", "e", "alpha"] + ([] if tied else ["beta"])
    if grid is None:
        grid = published_grid(tied)
    if isinstance(grid, np.ndarray):
        starts = np.atleast_2d(np.asarray(grid, dtype=float))
        if starts.shape[1] != len(names):
            raise FitError(f"grid: an array of starts needs {len(names)} columns {names}")
        return starts
    unknown = set(grid) - set(names) - ({"beta"} if tied else set())
    if unknown:
        raise FitError(f"grid: unknown parameter(s) {sorted(unknown)}; expected keys {names}")
    axes = []
    for k in names:
        if k not in grid:
            raise FitError(f"grid: missing values for {k!r}; expected keys {names}")
        v = np.atleast_1d(np.asarray(grid[k], dtype=float))
        if v.size == 0 or not np.all(np.isfinite(v)):
            raise FitError(f"grid: values for {k!r} must be a non-empty list of finite numbers")
        axes.append(v)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


#: ``init`` values of :func:`~fitting.laws.budget.chinchilla.fit_chinchilla`.
INITS = ("auto", "grid", "varpro")
#: ``init="auto"`` also runs the grid when fewer variable-projection starts than this end at the
#: optimum (within ``optimum_rtol``): one start alone is weak evidence of a global optimum.
AUTO_MIN_STARTS_AT_OPTIMUM = 2


@dataclass
class StartSearch:
    """Outcome of the multi-start search: what ran, where the starts ended, the polished optima."""

    path: str
    n_starts: int
    f_ends: np.ndarray
    polished: list[tuple[float, np.ndarray]]
    seconds_starts: float
    reason: str = ""
    check: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> tuple[float, np.ndarray]:
        return self.polished[0]

    def n_reached(self, rtol: float) -> int:
        f_best = self.best[0]
        return int(np.sum(np.isfinite(self.f_ends) & (self.f_ends <= f_best * (1 + rtol) + 1e-15)))


def _polish(ends: np.ndarray, f_ends: np.ndarray, n_polish: int, data: tuple
            ) -> list[tuple[float, np.ndarray]]:
    """Polish the ``n_polish`` best distinct end points (L-BFGS to tight tolerances, then IRLS);
    returns (objective, θ) pairs, best first. The best raw end point is kept should polishing
    ever make it worse."""
    x, z, y, delta, tied = data
    picked: list[np.ndarray] = []
    for i in np.argsort(f_ends):
        if len(picked) >= n_polish:
            break
        if all(np.max(np.abs(ends[i] - q)) > 1e-3 for q in picked):
            picked.append(ends[i])
    th = irls_polish_many(lbfgs_polish_many(np.array(picked), x, z, y, delta, tied), x, z, y,
                          delta, tied)
    f = huber_objective(to_theta(th, tied), x, z, y, delta)
    polished = sorted(zip(f.tolist(), th, strict=True), key=lambda t: t[0])
    i = int(np.argmin(f_ends))
    if f_ends[i] < polished[0][0]:  # polishing never makes a fit worse, but be safe
        polished.insert(0, (float(f_ends[i]), ends[i]))
    return polished


def _run(starts: np.ndarray, path: str, n_polish: int, data: tuple, t0: float,
         more: tuple[np.ndarray, np.ndarray] | None = None) -> StartSearch:
    """Multi-start L-BFGS from ``starts``, then polishing of the best end points, pooled with
    the points ``more`` (θ, objectives) of an earlier run if given. ``t0``: when the search
    began (for ``timing_s["grid"]``)."""
    ends, f_ends = multi_start(starts, *data)
    t_starts = time.perf_counter() - t0
    pool, f_pool = ends, f_ends
    if more is not None:
        pool, f_pool = np.concatenate([more[0], ends]), np.concatenate([more[1], f_ends])
    return StartSearch(path, len(starts), f_ends, _polish(pool, f_pool, n_polish, data), t_starts)


def search_starts(init: str, grid: Any, arrays: tuple, logs: tuple, delta: float, tied: bool,
                  n_polish: int, rtol: float) -> StartSearch:
    """Run the ``init`` path (see :func:`~fitting.laws.budget.chinchilla.fit_chinchilla`) and return
    what it found; ``logs`` are the logarithms of ``arrays`` (n, d, loss)."""
    n, d, loss = arrays
    data = (*logs, delta, tied)
    starts = grid_starts(grid, tied)
    t0 = time.perf_counter()
    if init == "grid":
        return _run(starts, "grid", n_polish, data, t0)
    if init == "varpro":
        return _run(varpro_starts(starts, n, d, loss, tied), "varpro", n_polish, data, t0)
    return _auto(starts, grid, arrays, n_polish, data, rtol, t0)


def _auto(starts: np.ndarray, grid: Any, arrays: tuple, n_polish: int, data: tuple,
          rtol: float, t0: float) -> StartSearch:
    """``init="auto"``: variable-projection starts, and the grid as well where they are not
    applicable or not trusted (the reasons are listed in
    :func:`~fitting.laws.budget.chinchilla.fit_chinchilla`)."""
    if isinstance(grid, np.ndarray):
        s = _run(starts, "grid", n_polish, data, t0)
        s.reason = "an array of starts was given: they are run as given"
        return s
    n, d, loss = arrays
    vp = varpro_starts(starts, n, d, loss, data[4])
    if not np.all(np.isfinite(vp)):
        s = _run(starts, "grid", n_polish, data, t0)
        s.reason = "variable projection gave non-finite starts"
        return s
    s = _run(vp, "varpro", n_polish, data, t0)
    reason = _distrust(s, starts, arrays, data, rtol)
    if not reason:
        return s
    optima = (np.array([th for _, th in s.polished]), np.array([f for f, _ in s.polished]))
    g = _run(starts, "varpro+grid", n_polish, data, t0, more=optima)
    g.n_starts += s.n_starts
    g.f_ends = np.concatenate([s.f_ends, g.f_ends])
    g.reason, g.check = reason, s.check
    return g


def _distrust(s: StartSearch, starts: np.ndarray, arrays: tuple, data: tuple, rtol: float) -> str:
    """Why the variable-projection optimum ``s`` is not trusted alone ("" when it is): fewer
    than :data:`AUTO_MIN_STARTS_AT_OPTIMUM` starts ended at it, or the lattice check of
    :func:`~fitting.laws.budget.chinchilla_opt.profile_check` found a lower objective."""
    reached = s.n_reached(rtol)
    s.check = {"varpro_starts_at_optimum": reached}
    if reached < AUTO_MIN_STARTS_AT_OPTIMUM:
        return (f"{reached} of {s.n_starts} variable-projection starts ended at the optimum "
                f"(fewer than {AUTO_MIN_STARTS_AT_OPTIMUM})")
    f_check, _ = profile_check(starts, *arrays, data[3], data[4])
    s.check["lattice_objective"] = f_check
    if f_check < s.best[0] * (1 - rtol):
        return (f"the exponent lattice check reached objective {f_check:.6g}, below the "
                f"variable-projection optimum {s.best[0]:.6g}")
    return ""
