"""The sequential design loop on a pool whose outcomes are known, revealed only when chosen.

A repeat starts from nothing; at each budget (a fraction of the pool's summed cost, cumulative)
the strategy picks affordable runs one at a time until none fits in what is left; the law is
refitted on a geometric schedule while picking (after 2, 3, 4, 6, 8, 12, … runs) so that the
criterion sees the law the runs so far support, and once more at each budget for the record.
This is the protocol of Li et al. 2026 (ScaleBench), with picks restricted to affordable runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fitting.design.parametric import (
    FitObjective,
    ParametricFit,
    ParametricLaw,
    PredictionGuard,
    cost_weights,
    fit_parametric,
)
from fitting.design.strategies import STRATEGIES, DesignState

__all__ = ["BudgetStep", "FitSettings", "simulate_design", "refit_points"]


@dataclass(frozen=True)
class FitSettings:
    """How the loop's fits are made (see :func:`fitting.design.parametric.fit_parametric`).

    Attributes:
        n_starts: random starts of the fit recorded at each budget.
        screen_nfev: evaluations each start gets before only the best continue (0: all continue).
        n_polish: starts that continue past the screen.
        max_nfev: evaluations of a continuing start.
        design_starts: random starts of the refits made while picking (beside the warm start).
        ridge: pull of the normalised parameters toward the middle of the box.
        guard: keep the predictions at the target inside the band of the observed losses
            widened by their range (:class:`~fitting.design.parametric.PredictionGuard`).
        cost_weight: each run's squared residual weighted by (its cost / the largest cost
            among the fitted runs) ** cost_weight (0: unweighted). A target beyond the costliest
            runs (larger models, more tokens) is best told by the runs nearest it; the cheap
            runs still pin what the costly ones leave free.
    """

    n_starts: int = 32
    screen_nfev: int = 10
    n_polish: int = 2
    max_nfev: int = 300
    design_starts: int = 8
    ridge: float = 0.0
    guard: bool = False
    cost_weight: float = 0.0

    def fit(self, law: ParametricLaw, X: np.ndarray, y: np.ndarray, rng: np.random.Generator,
            warm: np.ndarray | None = None, design: bool = False,
            X_target: np.ndarray | None = None, cost: np.ndarray | None = None) -> ParametricFit:
        """One fit with these settings (``design``: the lighter refit made while picking;
        ``X_target``: the inputs the guard, if on, watches; ``cost``: the runs' costs, which
        ``cost_weight`` reads)."""
        guard = (PredictionGuard.around(X_target, y)
                 if self.guard and X_target is not None and len(X_target) else None)
        weights = (cost_weights(cost, self.cost_weight)
                   if self.cost_weight and cost is not None and len(cost) else None)
        return fit_parametric(law, X, y, rng=rng, warm=warm,
                              n_starts=self.design_starts if design else self.n_starts,
                              screen_nfev=self.screen_nfev,
                              n_polish=1 if design else self.n_polish, max_nfev=self.max_nfev,
                              objective=FitObjective(weights, self.ridge, guard))


@dataclass
class BudgetStep:
    """The design at one budget.

    Attributes:
        fraction: the budget as a fraction of the pool's summed cost.
        chosen: indices of the runs chosen so far, in order.
        spent: their summed cost.
        fit: the law fitted on them.
    """

    fraction: float
    chosen: list[int]
    spent: float
    fit: ParametricFit


def refit_points(n: int) -> bool:
    """Whether the loop refits after its n-th pick: 2, 3, 4, 6, 8, 12, 16, 24, …"""
    if n < 2:
        return False
    k = int(np.floor(np.log2(n)))
    return n in (2**k, 3 * 2 ** (k - 1))


def simulate_design(law: ParametricLaw, X: np.ndarray, y: np.ndarray, cost: np.ndarray,
                    X_target: np.ndarray, budgets: Sequence[float], strategy: str,
                    rng: np.random.Generator, settings: FitSettings = FitSettings(),
                    cost_power: float = 1.0, finished: Sequence[int] = (),
                    identify_first: bool = False) -> list[BudgetStep]:
    """Run ``strategy`` through each cumulative budget; one :class:`BudgetStep` each.

    ``finished``: runs already trained (free, revealed from the start); without them the loop
    starts from nothing, as the benchmark does.
    """
    choose = STRATEGIES[strategy]
    y = np.asarray(y, float).reshape(len(X), -1)
    state = DesignState(law, np.asarray(X, float), np.asarray(cost, float),
                        np.asarray(X_target, float), rng, cost_power=cost_power,
                        identify_first=identify_first, cost_weight=settings.cost_weight)
    needs_fit = strategy in ("ours", "d_optimal")
    state.chosen = list(finished)
    if len(state.chosen) >= 2:
        state.fit = _fit(state, y, settings, design=False)
    total, spent, steps = float(np.sum(cost)), 0.0, []
    for fraction in budgets:
        cap = fraction * total
        while True:
            free = np.ones(len(X), bool)
            free[state.chosen] = False
            affordable = np.flatnonzero(free & (state.cost <= cap - spent + 1e-12 * total))
            if len(affordable) == 0:
                break
            pick = choose(state, affordable)
            state.chosen.append(pick)
            spent += float(state.cost[pick])
            if needs_fit and refit_points(len(state.chosen)):
                state.fit = _fit(state, y, settings, design=True)
                state.refresh_jacobians()
        fit = _fit(state, y, settings, design=False) if state.chosen else None
        steps.append(BudgetStep(fraction, list(state.chosen), spent, fit))
        if fit is not None:  # the next budget's fits start from this one
            state.fit = fit
            if needs_fit:
                state.refresh_jacobians()
    return steps


def _fit(state: DesignState, y: np.ndarray, settings: FitSettings, design: bool) -> ParametricFit:
    idx = state.chosen
    warm = None if state.fit is None else state.fit.u
    return settings.fit(state.law, state.X[idx], y[idx], state.rng, warm=warm, design=design,
                        X_target=state.X_target, cost=state.cost[idx])
