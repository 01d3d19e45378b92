"""The laws a design can be made for, by name, with the table columns each reads.

``chinchilla``: L(N, D) = E + A/N^α + B/D^β (Caillaut et al. 2024 eq. 2) on columns n, d;
``data_constrained``: Muennighoff et al. 2023's L(N, D, U) on columns u, n, d;
``farseer``: Farseer's L(N, D) on columns n, d. Each comes with a box of plausible parameters,
wide enough for the CPU studies' thousands of parameters and for billions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.design.parametric import ParametricLaw
from fitting.laws.budget.data_constrained import (
    DATA_CONSTRAINED_BOUNDS,
    DATA_CONSTRAINED_PARAMS,
    data_constrained_loss,
)
from fitting.laws.budget.farseer import FARSEER_BOUNDS, FARSEER_PARAMS, farseer_loss

__all__ = ["DesignLaw", "DESIGN_LAWS", "at_budgets", "design_law"]


@dataclass(frozen=True)
class DesignLaw:
    """A law for the design room and the table columns its inputs come from, in order."""

    law: ParametricLaw
    columns: tuple[str, ...]


def _chinchilla(T, X):
    E, A, a, B, b = T[:, :, None]
    return E + A / X[:, 0] ** a + B / X[:, 1] ** b


DESIGN_LAWS: dict[str, DesignLaw] = {
    "chinchilla": DesignLaw(ParametricLaw(
        "chinchilla", _chinchilla,
        [(0.0, 10.0), (1e-3, 1e9), (0.05, 2.0), (1e-3, 1e9), (0.05, 2.0)],
        ("E", "A", "alpha", "B", "beta")), ("n", "d")),
    "data_constrained": DesignLaw(ParametricLaw(
        "data_constrained", lambda T, X: data_constrained_loss(T[:, :, None], *X.T),
        list(DATA_CONSTRAINED_BOUNDS), DATA_CONSTRAINED_PARAMS), ("u", "n", "d")),
    "farseer": DesignLaw(ParametricLaw(
        "farseer", lambda T, X: farseer_loss(T[:, :, None], X[:, 0], X[:, 1]),
        list(FARSEER_BOUNDS), FARSEER_PARAMS), ("n", "d")),
}


def design_law(name: str) -> DesignLaw:
    """The design law called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return DESIGN_LAWS[name]
    except KeyError:
        raise ValueError(f"unknown design law {name!r}; known: {', '.join(DESIGN_LAWS)}") from None




def at_budgets(law: ParametricLaw, k: int) -> ParametricLaw:
    """``law`` of inputs (n, d) evaluated at k budgets of one run: inputs (n, d_1 … d_k), outputs
    the k losses — a run with cool-down branches measures its cooled-down loss at k budgets D,
    and the design weighs a run by everything it measures (its k outputs together)."""
    if k < 1:
        raise ValueError(f"need at least one budget per run, got {k}")

    def predict(T, X):
        X = np.asarray(X, float)
        return np.stack([law.predict(T, X[:, [0, 1 + j]]) for j in range(k)], axis=-1)

    return ParametricLaw(f"{law.name}@{k}", predict, law.bounds, law.param_names)
