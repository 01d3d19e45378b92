"""The LR-annealing scaling law (Tissue et al. 2024, *Scaling Law with Learning Rate Annealing*,
eq. 1): the loss at step s of a run with learning rates η_1…η_s is

    L(s) = L0 + A·S1(s)^−α − C·S2(s)

S1 = Σ_{i≤s} η_i the forward area, S2 = Σ_{i≤s} m_i the annealing area with momentum
m_i = λ·m_{i−1} + (η_{i−1} − η_i) (λ = 0.999; :mod:`fitting.laws.curves.schedule`). With size
terms L0(N) = E + A_N·N^−a (:mod:`fitting.laws.curves.joint_fit`). One fit over several runs
with different schedules (and sizes) shares every parameter; it predicts the loss of any other
schedule at every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fitting.core.base import register_law
from fitting.laws.curves.joint_fit import CurveLaw, ScheduleLawFit, fit_curve_law
from fitting.laws.curves.runs import Curve
from fitting.laws.curves.schedule import DEFAULT_LAMBDA, annealing_area, forward_area

__all__ = ["AnnealingLaw", "AnnealingLawFit", "fit_annealing_law"]


class AnnealingLaw(CurveLaw):
    """X = [S1^−α, −S2] with coefficients (A, C) and θ = (α,) (Tissue et al. eq. 1)."""

    name = "lr_annealing"
    theta_names = ("alpha",)
    coef_names = ("A", "C")
    theta_bounds = ((0.01,), (3.0,))
    theta_grid = ((0.2, 0.5, 1.0),)

    def __init__(self, lam: float = DEFAULT_LAMBDA) -> None:
        self.lam = float(lam)

    def features(self, curve: Curve, steps: np.ndarray) -> dict[str, np.ndarray]:
        """S1 and S2 at ``steps``."""
        t = np.round(np.asarray(steps)).astype(np.int64)
        eta = curve.eta(int(t.max()) if t.size else None)
        s1 = forward_area(eta)[t]
        return {"s1": np.maximum(s1, 1e-300), "s2": annealing_area(eta, self.lam)[t]}

    def columns(self, theta: np.ndarray, feats: dict[str, np.ndarray]) -> np.ndarray:
        """[S1^−α, −S2]."""
        return np.column_stack([np.power(feats["s1"], -theta[0]), -feats["s2"]])


@register_law("lr_annealing")
@dataclass
class AnnealingLawFit(ScheduleLawFit):
    """L(s) = L0 + A·S1(s)^−α − C·S2(s) (Tissue et al. 2024, eq. 1), fitted to several runs.

    params: ``L0`` (or, with size terms, ``E``, ``A_N``, ``a``: L0(N) = E + A_N·N^−a), ``A`` and
    ``alpha`` of the forward-area power law, ``C`` the loss drop per unit of annealing area.
    ``lam``: the momentum decay λ of S2 (fixed, not fitted). ``limits``: L_inf = E and L0(N) per
    fitted size (ScheduleLawFit)."""

    lam: float = DEFAULT_LAMBDA

    def curve_law(self) -> AnnealingLaw:
        """The law with this fit's λ."""
        return AnnealingLaw(self.lam)


def fit_annealing_law(curves: dict[str, Curve] | list[Curve], *, lam: float = DEFAULT_LAMBDA,
                      **kwargs: Any) -> AnnealingLawFit:
    """Fit Tissue et al.'s eq. 1 jointly to ``curves`` ({run: Curve} or a list); keyword
    options as :func:`fitting.laws.curves.joint_fit.fit_curve_law` (``size_terms``,
    ``from_step``, ``max_points``, ``f_scale``, ``uncertainty``, ``n_refits``, ``seed``)."""
    out = fit_curve_law(AnnealingLaw(lam), curves, **kwargs)
    return AnnealingLawFit(law="lr_annealing", lam=float(lam), **out)
