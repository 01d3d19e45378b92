"""The Multi-Power Law (Luo et al. 2025, *A Multi-Power Law for Loss Curve Prediction Across
Learning Rate Schedules*, eq. 1 / the MPL definition): the loss at step t is

    L(t) = L0 + A·(S1(t) + S_W)^−α − LD(t),
    LD(t) = B Σ_{k=1}^{t} (η_{k−1} − η_k)·G(η_k^−γ S_k(t)),  G(x) = 1 − (C·x + 1)^−β,
    S_k(t) = Σ_{τ=k}^{t} η_τ

with S_W the warm-up's area: here S1 counts every step from 1, warm-up included, so S1 + S_W is
:func:`fitting.laws.curves.schedule.forward_area`, and the drops of the warm-up are 0
(:func:`fitting.laws.curves.schedule.lr_drops`). The sum over k is taken in blocks
(:func:`fitting.laws.curves.schedule.reduction_knots`, at most ``max_knots`` a run). With size
terms L0(N) = E + A_N·N^−a (:mod:`fitting.laws.curves.joint_fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fitting.core.base import register_law
from fitting.laws.curves.joint_fit import CurveFitOptions, CurveLaw, ScheduleLawFit, fit_curve_law
from fitting.laws.curves.runs import Curve
from fitting.laws.curves.schedule import reduction_knots, reduction_sum

__all__ = ["MultiPowerLaw", "MultiPowerLawFit", "fit_multipower_law"]


class MultiPowerLaw(CurveLaw):
    """X = [S1^−α, −Σ_k d_k G(η_k^−γ S_k(t))] with coefficients (A, B); θ = (α, log10 C, β, γ)
    (C searched on a log scale, reported as C)."""

    name = "multi_power"
    theta_names = ("alpha", "log10_C", "beta", "gamma")
    coef_names = ("A", "B")
    theta_bounds = ((0.01, -8.0, 0.001, 0.0), (3.0, 6.0, 5.0, 3.0))
    theta_grid = ((0.3, 0.7), (-1.0, 0.5, 2.0), (0.3, 0.7, 1.5), (0.3, 0.6))

    def __init__(self, max_knots: int = 400) -> None:
        self.max_knots = int(max_knots)

    def features(self, curve: Curve, steps: np.ndarray) -> Any:
        """The blocks of the reduction sum at ``steps`` (and S1 there)."""
        t = np.round(np.asarray(steps)).astype(np.int64)
        return reduction_knots(curve.eta(int(t.max()) if t.size else None), t, self.max_knots)

    def columns(self, theta: np.ndarray, feats: Any) -> np.ndarray:
        """[S1^−α, −Σ d_k G]."""
        alpha, log_c, beta, gamma = theta
        ld = reduction_sum(feats, 10.0 ** log_c, beta, gamma)
        return np.column_stack([np.power(np.maximum(feats.s1_t, 1e-300), -alpha), -ld])

    def named(self, theta: np.ndarray) -> dict[str, float]:
        """(α, log10 C, β, γ) → alpha, C, beta, gamma."""
        return {"alpha": float(theta[0]), "C": float(10.0 ** theta[1]), "beta": float(theta[2]),
                "gamma": float(theta[3])}

    def unnamed(self, params: dict[str, float]) -> np.ndarray:
        """alpha, C, beta, gamma → (α, log10 C, β, γ)."""
        return np.array([params["alpha"], np.log10(params["C"]), params["beta"],
                         params["gamma"]])


@register_law("multi_power")
@dataclass
class MultiPowerLawFit(ScheduleLawFit):
    """L(t) = L0 + A·S1(t)^−α − B Σ_k (η_{k−1} − η_k)·(1 − (C·η_k^−γ S_k(t) + 1)^−β)
    (Luo et al. 2025, eq. 1), fitted to several runs.

    params: ``L0`` (or ``E``, ``A_N``, ``a`` with size terms), ``A`` and ``alpha`` of the
    forward-area power law, ``B`` the scale of the loss reduction, ``C``, ``beta`` and ``gamma``
    of its saturation G. ``max_knots``: blocks of k per run in the reduction sum.
    ``limits``: L_inf = E and L0(N) per fitted size (ScheduleLawFit)."""

    max_knots: int = 400

    def curve_law(self) -> MultiPowerLaw:
        """The law with this fit's number of knots."""
        return MultiPowerLaw(self.max_knots)


def fit_multipower_law(curves: dict[str, Curve] | list[Curve], *, max_knots: int = 400,
                       options: CurveFitOptions = CurveFitOptions()) -> MultiPowerLawFit:
    """Fit Luo et al.'s Multi-Power Law jointly to ``curves`` as ``options`` say
    (:class:`~fitting.laws.curves.joint_fit.CurveFitOptions`)."""
    out = fit_curve_law(MultiPowerLaw(max_knots), curves, options=options)
    return MultiPowerLawFit(law="multi_power", max_knots=int(max_knots), **out)
