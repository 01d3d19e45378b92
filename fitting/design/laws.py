"""The laws a design can be made for, by name, with the table columns each reads.

``chinchilla``: L(N, D) = E + A/N^α + B/D^β (Caillaut et al. 2024 eq. 2) on columns n, d;
``data_constrained``: Muennighoff et al. 2023's L(N, D, U) on columns u, n, d;
``farseer``: Farseer's L(N, D) on columns n, d. Each comes with a box of plausible parameters,
wide enough for the CPU studies' thousands of parameters and for billions. For adaptive
studies: L(N, D) across mixture weights (:func:`kaplan_across_weights`) and, for K pairs, every
pair's loss across sizes and mixtures with the recommendation's objective on its parameters
(:func:`mixture_across_sizes`, :func:`mixture_objective`).
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
from fitting.laws.mixture.forms import form_spec

__all__ = ["DesignLaw", "DESIGN_LAWS", "design_law", "kaplan_across_weights",
           "mixture_across_sizes", "mixture_objective"]


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


#: bounds of each pair's linear coefficients in :func:`mixture_across_sizes`: β_i (the size
#: term's scale, searched in log space) and L∞_i
MIXTURE_COEF_BOUNDS = ((1e-3, 1e3), (0.0, 10.0))


def _mixture_losses(n_pairs: int):
    """(predict of every pair's loss (b, n, K) at inputs (u, w_1 … w_K, …), parameters per
    pair): eq. 11 of :func:`fitting.laws.mixture.forms.form_spec` ("transfer", sized), the
    form's own design A(θ; u, W) times its linear coefficients."""
    specs = [form_spec("transfer", i, n_pairs, sized=True) for i in range(n_pairs)]
    n_theta, per = len(specs[0].theta_names), len(specs[0].theta_names) + 2

    def losses(T, X):
        X = np.asarray(X, float)
        u, W = X[:, 0], X[:, 1:1 + n_pairs]
        out = np.empty((T.shape[1], len(X), n_pairs))
        for b in range(T.shape[1]):
            for i, spec in enumerate(specs):
                th = T[i * per:i * per + n_theta, b]
                out[b, :, i] = spec.design(th, u, W) @ T[i * per + n_theta:(i + 1) * per, b]
        return out

    return losses, specs


def mixture_across_sizes(n_pairs: int) -> ParametricLaw:
    """Every pair's loss across model sizes and mixtures, as log L_i: per pair i, Fernandes et
    al. 2023 eq. 11 with eq. 13's effective fraction and a transfer matrix τ (the mixture
    laws' "transfer" form, :mod:`fitting.laws.mixture.forms`), L_i = β_i (e_i(w) u)^−α_i + L∞_i
    with e_i = clip(w_i + Σ_j τ_ij w_j). Inputs (u, w_1 … w_K, m_1 … m_K): u = N / N_ref, the
    run's weights, and m_i = 1 where pair i's loss is in the mixture laws' domain (trained, not
    over the epoch cap) — the output is 0 where m_i = 0, so a run records 0 there and that loss
    neither fits nor informs. Parameters per pair: α_i, τ_ij (j ≠ i), β_i, L∞_i."""
    if n_pairs < 2:
        raise ValueError(f"need at least two pairs, got {n_pairs}")
    losses, specs = _mixture_losses(n_pairs)

    def predict(T, X):
        X = np.asarray(X, float)
        inside = X[:, 1 + n_pairs:1 + 2 * n_pairs] > 0
        with np.errstate(all="ignore"):
            return np.where(inside, np.log(losses(T, X)), 0.0)

    bounds, names = [], []
    for i, spec in enumerate(specs):
        bounds += [*zip(spec.lo, spec.hi, strict=True), *MIXTURE_COEF_BOUNDS]
        names += [f"{n}_{i}" for n in (*spec.theta_names, "beta", "L_inf")]
    return ParametricLaw(f"mixture_across_sizes@{n_pairs}", predict, bounds, names)


def mixture_objective(law: ParametricLaw, n_pairs: int, preferences: np.ndarray
                      ) -> ParametricLaw:
    """The recommendation's objective on ``law``'s parameters (:func:`mixture_across_sizes`):
    log J, J(w) = Σ_i π_i L_i(N, w) / Σ_i π_i over the pairs with π_i > 0
    (:func:`fitting.intervals.mixture.objective_samples`' J), at inputs (u, w_1 … w_K, …)."""
    pi = np.asarray(preferences, float)
    if pi.shape != (n_pairs,) or not np.all(pi >= 0) or not pi.sum() > 0:
        raise ValueError(f"need {n_pairs} preferences >= 0, not all 0; got {pi.tolist()}")
    used = pi > 0
    weights = pi[used] / pi[used].sum()
    losses, _ = _mixture_losses(n_pairs)

    def predict(T, X):
        with np.errstate(all="ignore"):
            return np.log(losses(T, X)[..., used] @ weights)[..., None]

    return ParametricLaw(f"mixture_objective@{n_pairs}", predict, law.bounds, law.param_names)
