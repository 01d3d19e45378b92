"""The settings the law fitters share, as frozen options objects (the T5X ``*Config`` manner).

A law's fit function takes its data, the few settings only it has, and these objects:
:class:`FitOptions` (the robust loss), :class:`UncertaintyOptions` (the refits that give the
intervals) and :class:`BacktestOptions` (the leave-largest-size-out check; ``None`` skips it).
Each default is the fitters' default, so ``fit_power_law(n, loss)`` fits as it always did.
:func:`grouped_options` turns the flat names a user types (``mnmt-fit fit --option KEY=VALUE``,
``--uncertainty``, ``--n-refits``) into these objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FitOptions", "UncertaintyOptions", "BacktestOptions", "NO_UNCERTAINTY",
           "DEFAULT_UNCERTAINTY", "uncertainty_method", "grouped_options", "options_meta"]


@dataclass(frozen=True)
class FitOptions:
    """How a law's parameters are estimated (Ghorbani et al. App. E).

    Attributes:
      robust_loss: the least-squares loss: ``"soft_l1"`` (Huber-like, robust to a diverged run)
        or any ``scipy.optimize.least_squares`` loss; ``"linear"`` is ordinary least squares.
      f_scale: the soft_l1 scale: a number, or ``"auto"`` to pick the best of the engine's
        f_scale grid.
    """

    robust_loss: str = "soft_l1"
    f_scale: float | str = "auto"


@dataclass(frozen=True)
class UncertaintyOptions:
    """How the parameter intervals are estimated (Fernandes et al. footnote 5).

    Attributes:
      method: ``"perturbation"`` (refits to the losses perturbed by σ = ``sigma_rel`` × loss),
        ``"bootstrap"`` (refits to points resampled with replacement), ``"both"`` or ``None``
        (no intervals).
      n_refits: refits of each method.
      sigma_rel: the relative noise of one loss, used by the perturbation refits and, where no
        noise level is given, by the backtest.
      level: the intervals' coverage.
      seed: the refits' random seed (the bootstrap uses ``seed + 1``).
    """

    method: str | None = "perturbation"
    n_refits: int = 100
    sigma_rel: float = 0.01
    level: float = 0.95
    seed: int = 0

    def capped_resamples(self, cap: int) -> int:
        """The resamples of a law whose only intervals are the bootstrap's (Chinchilla, the
        DPL): ``n_refits`` up to ``cap``; 0 when no intervals are asked for."""
        return min(int(self.n_refits), cap) if self.method not in (None, "none") else 0


#: no intervals: the fit alone
NO_UNCERTAINTY = UncertaintyOptions(method=None)
#: the fits' interval settings by default (also the defaults of ``mnmt-fit``'s ``--uncertainty``,
#: ``--n-refits`` and ``--seed``)
DEFAULT_UNCERTAINTY = UncertaintyOptions()


def uncertainty_method(flag: str | None) -> str | None:
    """The :attr:`UncertaintyOptions.method` a user's ``--uncertainty`` names (``"none"``: None,
    no intervals)."""
    return None if flag == "none" else flag


@dataclass(frozen=True)
class BacktestOptions:
    """The leave-largest-size-out backtest: refit without the largest size, predict it, and warn
    when the error exceeds ``tolerance`` × the noise.

    Attributes:
      noise_level: the noise, in the law's loss units; ``None``: the law's own default
        (``sigma_rel`` × the held-out loss, or the fit's residual RMSE where the law says so).
      tolerance: how many noise levels the held-out error may reach before the warning.
    """

    noise_level: float | None = None
    tolerance: float = 3.0


#: the flat name a user types → (keyword of the fit function, field of its options object)
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "robust_loss": ("fit_options", "robust_loss"), "f_scale": ("fit_options", "f_scale"),
    "uncertainty": ("uncertainty", "method"), "n_refits": ("uncertainty", "n_refits"),
    "sigma_rel": ("uncertainty", "sigma_rel"), "level": ("uncertainty", "level"),
    "seed": ("uncertainty", "seed"), "noise_level": ("backtest", "noise_level"),
    "backtest_tolerance": ("backtest", "tolerance"),
}
OPTION_TYPES = {"fit_options": FitOptions, "uncertainty": UncertaintyOptions,
                "backtest": BacktestOptions}


def grouped_options(flat: Mapping[str, Any],
                    groups: tuple[str, ...] = ("fit_options", "uncertainty", "backtest")
                    ) -> dict[str, Any]:
    """Keyword arguments of a law's fit function from flat names (:data:`FLAT_NAMES`): each of
    ``groups`` named at least once becomes its options object, ``backtest=False`` becomes
    ``backtest=None`` (no backtest); other names are passed on as they are."""
    fields: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if key in FLAT_NAMES and FLAT_NAMES[key][0] in groups:
            group, name = FLAT_NAMES[key]
            fields.setdefault(group, {})[name] = value
        elif key != "backtest" or "backtest" not in groups:
            out[key] = value
    for group, values in fields.items():
        out[group] = OPTION_TYPES[group](**values)
    if "backtest" in groups and "backtest" in flat and not flat["backtest"]:
        out["backtest"] = None
    return out



def options_meta(fit_options: FitOptions, uncertainty: UncertaintyOptions) -> dict[str, Any]:
    """What a fit records of its options in ``meta``: the robust loss and the uncertainty
    settings, under their flat names."""
    return {"robust_loss": fit_options.robust_loss, "uncertainty": uncertainty.method,
            "sigma_rel": uncertainty.sigma_rel, "n_refits": uncertainty.n_refits,
            "seed": uncertainty.seed, "level": uncertainty.level}
