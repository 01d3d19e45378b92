"""The LR-annealing scaling law (Tissue et al. 2024, *Scaling Law with Learning Rate Annealing*,
eq. 1): the loss at step s of a run with learning rates η_1…η_s is

    L(s) = L0 + A·S1(s)^−α − C·S2(s)

S1 the forward area, S2 the annealing area with momentum λ (:mod:`fitting.laws.curves.schedule`);
with size terms L0(N) = E + A_N·N^−a (:mod:`fitting.laws.curves.joint_fit`). One fit over runs
with different schedules shares every parameter and predicts any other schedule at every step.
The relative form (``form="relative"``, L(s) = (L0 + A·S1^−α)·exp(−C·S2), not in the paper) and
why the report uses it: docs/reference/laws.md, "Schedule-aware curve laws".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.core.base import FitError, register_law
from fitting.laws.curves.joint_fit import CurveFitOptions, CurveLaw, ScheduleLawFit, fit_curve_law
from fitting.laws.curves.runs import Curve
from fitting.laws.curves.schedule import DEFAULT_LAMBDA, annealing_area, forward_area

__all__ = ["AnnealingLaw", "AnnealingLawFit", "fit_annealing_law", "ANNEALING_FORMS"]

#: "additive": Tissue et al. eq. 1; "relative": (L0 + A·S1^−α)·exp(−C·S2) (docs/reference/laws.md)
ANNEALING_FORMS = ("additive", "relative")


class AnnealingLaw(CurveLaw):
    """Additive form: X = [S1^−α, −S2] with coefficients (A, C) and θ = (α,) (Tissue et al.
    eq. 1); relative form: X = [S1^−α], coefficient A, factor g = exp(−C·S2), θ = (α, C)."""

    name = "lr_annealing"
    theta_names: tuple[str, ...] = ("alpha",)
    coef_names: tuple[str, ...] = ("A", "C")
    theta_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((0.01,), (3.0,))
    theta_grid: tuple[tuple[float, ...], ...] = ((0.2, 0.5, 1.0),)

    def __init__(self, lam: float = DEFAULT_LAMBDA, form: str = "additive") -> None:
        if form not in ANNEALING_FORMS:
            raise FitError(f"the annealing law's form must be one of {ANNEALING_FORMS}, got "
                           f"{form!r}", column="form")
        self.lam = float(lam)
        self.form = form
        if form == "relative":
            # C is the relative gain per unit of annealing area: exp(−C·S2) with S2 ≲ η_peak
            self.theta_names, self.coef_names = ("alpha", "C"), ("A",)
            self.theta_bounds = ((0.01, 0.0), (3.0, 1000.0))
            self.theta_grid = ((0.2, 0.5, 1.0), (0.3, 3.0, 30.0))

    def features(self, curve: Curve, steps: np.ndarray) -> dict[str, np.ndarray]:
        """S1 and S2 at ``steps``."""
        t = np.round(np.asarray(steps)).astype(np.int64)
        eta = curve.eta(int(t.max()) if t.size else None)
        s1 = forward_area(eta)[t]
        return {"s1": np.maximum(s1, 1e-300), "s2": annealing_area(eta, self.lam)[t]}

    def columns(self, theta: np.ndarray, feats: dict[str, np.ndarray]) -> np.ndarray:
        """[S1^−α, −S2] (additive), [S1^−α] (relative)."""
        s1 = np.power(feats["s1"], -theta[0])
        if self.form == "relative":
            return s1[:, None]
        return np.column_stack([s1, -feats["s2"]])

    def scale(self, theta: np.ndarray, feats: dict[str, np.ndarray]) -> np.ndarray | None:
        """exp(−C·S2) (relative form), None (additive)."""
        if self.form != "relative":
            return None
        return np.exp(-theta[1] * feats["s2"])

    @property
    def additive(self) -> bool:
        """Eq. 1 is additive; the relative form scales the constant by exp(−C·S2)."""
        return self.form != "relative"


@register_law("lr_annealing")
@dataclass
class AnnealingLawFit(ScheduleLawFit):
    """L(s) = L0 + A·S1(s)^−α − C·S2(s) (Tissue et al. 2024, eq. 1), fitted to several runs.

    params: ``L0`` (or, with size terms, ``E``, ``A_N``, ``a``: L0(N) = E + A_N·N^−a), ``A`` and
    ``alpha`` of the forward-area power law, ``C`` the loss drop per unit of annealing area
    (relative form: the relative drop, L = (L0 + A·S1^−α)·exp(−C·S2)).
    ``lam``: the momentum decay λ of S2 (fixed, not fitted); ``form``: "additive" (eq. 1) or
    "relative" (docs/reference/laws.md). ``limits``: L_inf = E and L0(N) per fitted size
    (ScheduleLawFit; the relative form's L_inf is that of a run never annealed)."""

    lam: float = DEFAULT_LAMBDA
    form: str = "additive"

    def curve_law(self) -> AnnealingLaw:
        """The law with this fit's λ and form."""
        return AnnealingLaw(self.lam, self.form)


def fit_annealing_law(curves: dict[str, Curve] | list[Curve], *, lam: float = DEFAULT_LAMBDA,
                      form: str = "additive",
                      options: CurveFitOptions = CurveFitOptions()) -> AnnealingLawFit:
    """Fit Tissue et al.'s eq. 1 (``form="additive"``) or its relative form
    (``form="relative"``, docs/reference/laws.md) jointly to ``curves`` ({run: Curve} or a list)
    as ``options`` say (:class:`~fitting.laws.curves.joint_fit.CurveFitOptions`; ``fixed_e``
    with eq. 1 only)."""
    out = fit_curve_law(AnnealingLaw(lam, form), curves, options=options)
    return AnnealingLawFit(law="lr_annealing", lam=float(lam), form=form, **out)
