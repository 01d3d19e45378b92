"""The next batch for a finished study: which pool runs to train, in order, within a budget.

From the law fitted on the finished runs, runs are picked greedily by the drop in the target's
mean predictive variance per unit of cost (cost ** ``cost_power``); after each pick the
information is updated as if that run were trained (its loss is not known yet, only that it will
be measured), so a batch never spends twice on what one run already teaches. Each pick records the
target's predicted sd once the batch so far is trained: the interval a user can expect to buy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.design.information import (
    fisher_information,
    jacobian,
    target_variance,
    variance_reduction,
)
from fitting.design.parametric import ParametricFit, ParametricLaw

__all__ = ["PlannedRun", "plan_batch", "current_target_sd"]


@dataclass(frozen=True)
class PlannedRun:
    """One pick of the batch.

    Attributes:
        index: row of the pool.
        cost: its cost; ``cumulative_cost`` the batch's cost up to and including it.
        target_sd: the target's linearised predictive sd (per target point) once the batch up
            to this pick is trained: √(g M⁻¹ gᵀ), M the information of the finished runs and the
            picks (see :mod:`fitting.design.information`).
    """

    index: int
    cost: float
    cumulative_cost: float
    target_sd: np.ndarray


def plan_batch(fit: ParametricFit, X_done: np.ndarray, X_pool: np.ndarray, cost: np.ndarray,
               X_target: np.ndarray, budget: float, cost_power: float = 1.0,
               target_law: ParametricLaw | None = None) -> list[PlannedRun]:
    """Greedy batch from ``X_pool`` within ``budget`` (same units as ``cost``). ``target_law``:
    the law whose value at ``X_target`` is the target, on the fitted law's parameters (a
    function of its outputs, e.g. a mixture's objective); None: the fitted law itself."""
    law, sigma2 = fit.law, max(fit.sigma2, 1e-12)
    jac_done = jacobian(law, fit.u, X_done)
    jac_pool = jacobian(law, fit.u, X_pool)
    jac_target = jacobian(target_law or law, fit.u, X_target)
    cost = np.asarray(cost, float)
    free = np.ones(len(X_pool), bool)
    spent, picks = 0.0, []
    info = fisher_information(jac_done, sigma2)
    while True:
        affordable = np.flatnonzero(free & (cost <= budget - spent))
        if len(affordable) == 0:
            break
        drop = variance_reduction(info, jac_pool[affordable], jac_target, sigma2)
        pick = int(affordable[np.argmax(drop / cost[affordable] ** cost_power)])
        free[pick] = False
        spent += float(cost[pick])
        info = fisher_information(np.concatenate([jac_done, jac_pool[~free]]), sigma2)
        sd = np.sqrt(target_variance(info, jac_target))[:, 0]
        picks.append(PlannedRun(pick, float(cost[pick]), spent, sd))
    return picks


def current_target_sd(fit: ParametricFit, X_done: np.ndarray, X_target: np.ndarray,
                      target_law: ParametricLaw | None = None) -> np.ndarray:
    """The target's linearised predictive sd from the finished runs alone (``target_law`` as in
    :func:`plan_batch`)."""
    info = fisher_information(jacobian(fit.law, fit.u, X_done), max(fit.sigma2, 1e-12))
    return np.sqrt(target_variance(info, jacobian(target_law or fit.law, fit.u, X_target)))[:, 0]
