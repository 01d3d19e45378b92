"""Which run to train next: the design's criterion and the baselines it is judged beside.

Every strategy picks one run from the affordable candidates of a :class:`DesignState`:
``target_variance_per_cost`` (ours: the drop in the target's mean predictive variance per unit of
cost, the information updated after each pick so that a batch never repeats what it already
teaches), ``d_optimal`` (the largest gain in log det of the information, cost ignored),
``random``, ``cheapest`` and ``cost_random`` (chance ∝ 1/cost), as in Li et al. 2026's benchmark.
Where the fit weights the runs by cost, ours counts each run's information as that fit weighs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fitting.design.information import (
    fisher_information,
    jacobian,
    logdet_gain,
    variance_reduction,
)
from fitting.design.parametric import ParametricFit, ParametricLaw, cost_weights

__all__ = ["DesignState", "STRATEGIES", "register_strategy", "weighted_information"]


@dataclass
class DesignState:
    """What a strategy may read: the pool, its costs, what was chosen, the target, the fit.

    Attributes:
        law: the law being fitted.
        X: candidate runs (m, d); ``cost`` their costs (m,).
        chosen: indices chosen so far, in order.
        X_target: the points whose prediction the design should make certain.
        fit: the latest fit of ``law`` on the chosen runs (None before any).
        rng: the random stream of this repeat.
        cost_power: ours divides its gain by cost ** cost_power.
        identify_first: ours gains in log det of the information (D-optimality) until the chosen
            runs give as many values as the law has parameters, then in the target's variance.
        cost_weight: the fit's run weights (``FitSettings.cost_weight``); ours counts each run's
            information as that fit weighs it (see :func:`weighted_information`).
        jac_pool: cached Jacobians of the pool at ``fit`` (filled by the criterion).
    """

    law: ParametricLaw
    X: np.ndarray
    cost: np.ndarray
    X_target: np.ndarray
    rng: np.random.Generator
    chosen: list[int] = field(default_factory=list)
    fit: ParametricFit | None = None
    cost_power: float = 1.0
    identify_first: bool = False
    cost_weight: float = 0.0
    jac_pool: np.ndarray | None = None
    jac_target: np.ndarray | None = None

    def identified(self) -> bool:
        """Whether the chosen runs give at least as many values as the law has parameters."""
        outputs = 1 if self.jac_pool is None else self.jac_pool.shape[1]
        return len(self.chosen) * outputs >= self.law.n_params

    def current_u(self) -> np.ndarray:
        return np.full(self.law.n_params, 0.5) if self.fit is None else self.fit.u

    def sigma2(self) -> float:
        if self.fit is None or not np.isfinite(self.fit.sigma2) or self.fit.sigma2 <= 0:
            return 1e-4
        return max(self.fit.sigma2, 1e-8)

    def refresh_jacobians(self) -> None:
        u = self.current_u()
        self.jac_pool = jacobian(self.law, u, self.X)
        self.jac_target = jacobian(self.law, u, self.X_target)

    def info(self) -> np.ndarray:
        if self.jac_pool is None:
            self.refresh_jacobians()
        return fisher_information(self.jac_pool[self.chosen], self.sigma2())


Strategy = Callable[[DesignState, np.ndarray], int]
STRATEGIES: dict[str, Strategy] = {}


def register_strategy(name: str) -> Callable[[Strategy], Strategy]:
    """Register ``fn(state, affordable_indices) -> chosen index`` under ``name``."""

    def deco(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return deco


@register_strategy("random")
def random_choice(state: DesignState, affordable: np.ndarray) -> int:
    return int(state.rng.choice(affordable))


@register_strategy("cheapest")
def cheapest_choice(state: DesignState, affordable: np.ndarray) -> int:
    return int(affordable[np.argmin(state.cost[affordable])])


@register_strategy("cost_random")
def cost_random_choice(state: DesignState, affordable: np.ndarray) -> int:
    w = 1.0 / state.cost[affordable]
    return int(state.rng.choice(affordable, p=w / w.sum()))


@register_strategy("d_optimal")
def d_optimal_choice(state: DesignState, affordable: np.ndarray) -> int:
    gain = logdet_gain(state.info(), state.jac_pool[affordable], state.sigma2())
    return int(affordable[np.argmax(gain)])


def weighted_information(state: DesignState,
                         affordable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chosen runs' information and the candidates' Jacobians as a cost-weighted fit uses them.

    A fit that multiplies each run's squared residual by w = (cost / c_max) ** cost_weight
    learns w·JᵀJ/σ² from it, not JᵀJ/σ²: each Jacobian is scaled by √w, c_max the costliest
    of the chosen and affordable runs. With ``cost_weight`` 0 the plain information.
    """
    info = state.info()   # fills the Jacobian cache read below
    jac = state.jac_pool[affordable]
    if not state.cost_weight:
        return info, jac
    top = max(state.cost[state.chosen].max(initial=0.0), state.cost[affordable].max())

    def root_w(idx) -> np.ndarray:
        return np.sqrt(cost_weights(state.cost[idx], state.cost_weight, top))[:, None, None]

    info = fisher_information(state.jac_pool[state.chosen] * root_w(state.chosen), state.sigma2())
    return info, jac * root_w(affordable)


@register_strategy("ours")
def target_variance_per_cost(state: DesignState, affordable: np.ndarray) -> int:
    info, jac = weighted_information(state, affordable)
    if state.identify_first and not state.identified():
        gain = logdet_gain(info, jac, state.sigma2())
    else:
        gain = variance_reduction(info, jac, state.jac_target, state.sigma2())
    score = gain / state.cost[affordable] ** state.cost_power
    return int(affordable[np.argmax(score)])
