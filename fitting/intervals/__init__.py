"""Predictive intervals: how far a prediction beyond the fitted runs may be off. The rule is
stated once (:mod:`fitting.intervals.predictive`); each law's interval builder feeds it the terms
that law has.

* :mod:`fitting.intervals.predictive` ``PredictiveInterval``, ``predictive_interval`` (the s²
  rule, each term on its dof), ``extrapolation_sd``, ``coverage`` (calibrated intervals where
  claimed), ``coverage_by_cluster`` and ``clopper_pearson`` (the one Clopper–Pearson rule),
  ``informative`` (a band no wider than ``UNINFORMATIVE_FACTOR``)
* :mod:`fitting.intervals.cooled_law` L(N, D) across weights: its backtest points and E
* :mod:`fitting.intervals.heldout`    held-out runs predicted by L(N, D) across weights
* :mod:`fitting.intervals.eq11`       the eq. 11 law: the frontier and its held-out entries
* :mod:`fitting.intervals.mixture`    a mixture's objective J and held-out mixtures
* :mod:`fitting.intervals.early_stop` stopped runs' predicted ends, calibrated on the checks

Intervals sit between the laws and the report: they import laws, never plots or reports.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["PredictiveInterval", "predictive_interval", "extrapolation_sd",
                     "coverage", "coverage_by_cluster", "clopper_pearson", "informative"],
                    "predictive"),
    "cooled_law_intervals": "cooled_law",
    "heldout_predictive": "heldout",
    **dict.fromkeys(["frontier_intervals", "mark_eq11_heldout"], "eq11"),
    **dict.fromkeys(["objective_interval", "heldout_mixture_intervals"], "mixture"),
    "calibrated_intervals": "early_stop",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
