"""What to train next: budget-aware sequential design of scaling-law experiments.

* :mod:`fitting.design.parametric`   a law as ``predict(theta, X)`` with a box; its multi-start fit
* :mod:`fitting.design.information`  linearised information and the target's predictive variance
* :mod:`fitting.design.strategies`   ours (target variance drop per cost) and the baselines
* :mod:`fitting.design.simulate`     the sequential loop on a pool whose outcomes are known
* :mod:`fitting.design.plan`         the next batch for a finished study, within a budget
* :mod:`fitting.design.laws`         the laws a design can be made for, with their table columns
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["ParametricLaw", "ParametricFit", "PredictionGuard", "FitObjective",
                     "cost_weights", "fit_parametric"], "parametric"),
    **dict.fromkeys(["jacobian", "fisher_information", "target_variance", "variance_reduction",
                     "logdet_gain"], "information"),
    **dict.fromkeys(["DesignState", "STRATEGIES", "register_strategy", "weighted_information"],
                    "strategies"),
    **dict.fromkeys(["BudgetStep", "FitSettings", "simulate_design"], "simulate"),
    **dict.fromkeys(["PlannedRun", "plan_batch", "current_target_sd"], "plan"),
    **dict.fromkeys(["DesignLaw", "DESIGN_LAWS", "design_law", "kaplan_across_weights",
                     "mixture_across_sizes", "mixture_objective"], "laws"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
