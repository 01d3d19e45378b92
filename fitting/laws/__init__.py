"""The laws of the four papers, each a fit function returning a documented result object.

* :mod:`fitting.laws.power`          L(N) = β N^−α + L∞ (Fernandes eq. 1/3/6)
* :mod:`fitting.laws.joint`          the joint multilingual law (Fernandes eq. 7, 9, 10)
* :mod:`fitting.laws.effective`      unseen weights through f̂(p) (Fernandes eq. 11–13)
* :mod:`fitting.laws.frontier`       trade-off frontiers and recommended weights (Fernandes §3.4)
* :mod:`fitting.laws.bivariate`      encoder/decoder law and optimal allocation (Ghorbani eq. 2–4)
* :mod:`fitting.laws.quality`        BLEU/ChrF against cross-entropy (Ghorbani eq. 5)
* :mod:`fitting.laws.learning_curve` under-trained runs (Fernandes App. G)
* :mod:`fitting.laws.chinchilla`     L(N, D) (Caillaut eq. 2), its starts searched in
  :mod:`fitting.laws.chinchilla_search`, optimised in :mod:`fitting.laws.chinchilla_opt`
* :mod:`fitting.laws.dpl`            the Double Power Law and optimal ratios (Chen eq. 5–7)
* :mod:`fitting.laws.mixture_laws`   mixture laws for K pairs (Fernandes eq. 11 with transfer,
  Ye et al. 2024, Shukor et al. 2025); runs from tables in :mod:`fitting.laws.mixture_runs`,
  the losses outside their domain in :mod:`fitting.laws.mixture_domain`, their comparison in
  :mod:`fitting.laws.mixture_compare`, weights in :mod:`fitting.laws.mixture_recommend` against
  the baselines of :mod:`fitting.laws.mixture_baselines`

Laws depend on :mod:`fitting.core` and :mod:`fitting.data` only, never on plots or reports.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["PowerLawFit", "fit_power_law", "power_law"], "power"),
    **dict.fromkeys(["JointLawFit", "fit_joint_law"], "joint"),
    **dict.fromkeys(["MultilingualLawFit", "fit_multilingual_law", "f_hat_eq12", "f_hat_eq13"],
                    "effective"),
    **dict.fromkeys(["Frontier", "frontier_2pair", "frontier_kpair", "Recommendation",
                     "recommend"], "frontier"),
    **dict.fromkeys(["BivariateLawFit", "fit_bivariate_law"], "bivariate"),
    **dict.fromkeys(["QualityLawFit", "fit_quality_law"], "quality"),
    **dict.fromkeys(["LearningCurveFit", "fit_learning_curve", "convergence_check",
                     "correct_final_losses"], "learning_curve"),
    **dict.fromkeys(["ChinchillaFit", "fit_chinchilla"], "chinchilla"),
    **dict.fromkeys(["DPLFit", "fit_dpl", "optimal_sampling_ratios", "CHEN_EQ6_PRESET"], "dpl"),
    **dict.fromkeys(["MixtureLawFit", "fit_mixture_law"], "mixture_laws"),
    **dict.fromkeys(["MixtureRuns", "mixture_runs", "read_wide_runs"], "mixture_runs"),
    **dict.fromkeys(["MixtureComparison", "compare_mixture_laws", "transfer_matrix"],
                    "mixture_compare"),
    "recommend_mixture": "mixture_recommend",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
