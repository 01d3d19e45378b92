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
from fitting.laws.budget.kaplan_nd import KAPLAN_EXPONENT_BOUNDS, predict_kaplan

__all__ = ["DesignLaw", "DESIGN_LAWS", "design_law", "kaplan_across_weights"]


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


def kaplan_across_weights(n_weights: int, k: int) -> ParametricLaw:
    """L(N, D) across mixture weights in Kaplan's form (:mod:`fitting.laws.budget.kaplan_nd`:
    E + [(A_p/N)^(α/β) + B_p/D]^β, Kaplan et al. 2020 eq. 1.5 with Fernandes et al. 2023 eq. 7's
    sharing) at the k cooled-down budgets of a run, as log L (relative noise is what a run's
    loss has). Inputs (N, D_1 … D_k, p) with p the index of the run's weight, best scaled to
    O(1); parameters E, α, β, A_1 … A_W, B_1 … B_W. At N = D = ∞ it is log E."""
    if n_weights < 1 or k < 1:
        raise ValueError(f"need at least one weight and one budget, got {n_weights}, {k}")

    def predict(T, X):
        X = np.asarray(X, float)
        E, alpha, beta = T[0][:, None], T[1][:, None], T[2][:, None]
        idx = np.nan_to_num(X[:, -1]).astype(int)
        A, B = T[3:3 + n_weights][idx].T, T[3 + n_weights:3 + 2 * n_weights][idx].T
        with np.errstate(all="ignore"):
            return np.log(np.stack([predict_kaplan(E, alpha, beta, A, B, X[:, 0], X[:, 1 + j])
                                    for j in range(k)], axis=-1))

    names = ("E", "alpha", "beta", *(f"A_{i}" for i in range(n_weights)),
             *(f"B_{i}" for i in range(n_weights)))
    return ParametricLaw(f"kaplan_across_weights@{k}", predict,
                         [(0.0, 10.0), KAPLAN_EXPONENT_BOUNDS, KAPLAN_EXPONENT_BOUNDS,
                          *[(1e-4, 1e6)] * (2 * n_weights)], names)
