"""The laws of the four papers, each a fit function returning a documented result object,
grouped by what they are a function of:

* :mod:`fitting.laws.size`     laws in the model size N: the power law (Fernandes eq. 1/3/6), the
  joint multilingual law (eq. 7, 9, 10), unseen weights through f̂(p) (eq. 11–13), frontiers and
  recommended weights (§3.4), the encoder/decoder law (Ghorbani eq. 2–4)
* :mod:`fitting.laws.budget`   laws in size and token budget, L(N, D) (Caillaut eq. 2; the
  joint per-pair form across weights; Kaplan's form)
* :mod:`fitting.laws.curves`   laws of one run's training curve: learning-curve extrapolation
  (Fernandes App. G); schedule-aware laws of the loss at every step (the LR-annealing law,
  Tissue et al. 2024 eq. 1; the Multi-Power Law, Luo et al. 2025)
* :mod:`fitting.laws.mixture`  laws in the mixture weights: the Double Power Law and optimal
  ratios (Chen eq. 5–7) and mixture laws for K pairs with their comparison and recommendation
* :mod:`fitting.laws.quality`  BLEU/ChrF against cross-entropy (Ghorbani eq. 5)
* :mod:`fitting.laws.table_fits` what the laws' ``mnmt-fit fit --law`` table fitters share

Laws depend on :mod:`fitting.core` and :mod:`fitting.data` only, never on plots or reports.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["PowerLawFit", "fit_power_law", "power_law"], "size.power"),
    **dict.fromkeys(["JointLawFit", "fit_joint_law"], "size.joint"),
    **dict.fromkeys(["MultilingualLawFit", "fit_multilingual_law", "f_hat_eq12", "f_hat_eq13"],
                    "size.effective"),
    **dict.fromkeys(["Frontier", "frontier_2pair", "frontier_kpair", "Recommendation",
                     "recommend"], "size.frontier"),
    **dict.fromkeys(["BivariateLawFit", "fit_bivariate_law"], "size.bivariate"),
    **dict.fromkeys(["QualityLawFit", "fit_quality_law"], "quality"),
    **dict.fromkeys(["LearningCurveFit", "fit_learning_curve", "convergence_check",
                     "correct_final_losses"], "curves.learning_curve"),
    **dict.fromkeys(["AnnealingLawFit", "fit_annealing_law"], "curves.annealing"),
    **dict.fromkeys(["MultiPowerLawFit", "fit_multipower_law"], "curves.multipower"),
    **dict.fromkeys(["Curve", "curves_from_table"], "curves.runs"),
    **dict.fromkeys(["ChinchillaFit", "fit_chinchilla"], "budget.chinchilla"),
    **dict.fromkeys(["DPLFit", "fit_dpl", "optimal_sampling_ratios", "CHEN_EQ6_PRESET"],
                    "mixture.dpl"),
    **dict.fromkeys(["MixtureLawFit", "fit_mixture_law"], "mixture.laws"),
    **dict.fromkeys(["MixtureRuns", "mixture_runs", "read_wide_runs"], "mixture.runs"),
    **dict.fromkeys(["MixtureComparison", "compare_mixture_laws", "transfer_matrix"],
                    "mixture.compare"),
    "recommend_mixture": "mixture.recommend",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
